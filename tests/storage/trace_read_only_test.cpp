// Finished traces in places that cannot be written (issue 19 item 5): the writer's close leaves
// a rollback-journal file with no -wal/-shm, readers open it (and an older WAL-mode file) from a
// read-only directory, a -wal with data that cannot be read in place is refused with a message
// saying what to do, an empty database beside a -wal with data is refused without SQLite deleting
// that -wal, and a reader that follows a live trace keeps working across the writer's close.
// "Cannot be written" is made real: the directory is chmod 0555 and the reading runs in a child
// process that drops root (root ignores permission bits); without that ability the test skips.
#include <grp.h>
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <functional>

#include "moewb/storage/trace_reader.h"
#include "moewb/storage/trace_writer.h"
#include "test_util.h"
#include "../read_only_child.h"

namespace moewb::storage {
namespace {

using moewb::test::runWhereDirIsReadOnly;

namespace fs = std::filesystem;
using testing::makeSlice;
using testing::TempDir;

constexpr int kSteps = 3;

// A finished single-run trace with kSteps committed steps.
void writeTrace(const std::string& path) {
  auto created = TraceWriter::create(path);
  ASSERT_TRUE(created.isOk()) << created.status().toString();
  auto writer = std::move(created).value();
  const RunId run = writer->addRun({});
  const TrackId track = writer->addTrack({TrackId(), "trainer", "thread", 0, 0});
  for (int64_t step = 0; step < kSteps; ++step) {
    writer->addSlice(makeSlice(track, "attention.fwd", step * 1000, 500, step));
    StepRow row;
    row.run = run;
    row.step = step;
    writer->addStep(row);
  }
  ASSERT_TRUE(writer->close().isOk());
}

bool exists(const std::string& path) {
  std::error_code ec;
  return fs::exists(path, ec);
}

// Bytes 18 and 19 of the SQLite header: 1 = rollback journal, 2 = WAL.
std::pair<int, int> fileFormatVersions(const std::string& path) {
  const std::string bytes = testing::readFile(path);
  if (bytes.size() < 20) return {0, 0};
  return {int(static_cast<unsigned char>(bytes[18])), int(static_cast<unsigned char>(bytes[19]))};
}

// "" when `path` opens and shows kSteps steps of run 1, else what went wrong.
std::string readStepsProblem(const std::string& path) {
  auto reader = TraceReader::open(path);
  if (!reader.isOk()) return "open: " + reader.status().toString();
  auto steps = (*reader)->steps(RunId(1));
  if (!steps.isOk()) return "steps: " + steps.status().toString();
  if (steps->size() != size_t(kSteps)) return "saw " + std::to_string(steps->size()) + " steps";
  return "";
}

// A directory readable by everyone that becomes read-only on lock() and writable again at the
// end (so TempDir can remove it).
class ReadOnlyDir {
 public:
  explicit ReadOnlyDir(const TempDir& temp) : m_path(temp.path("archive")) {
    fs::permissions(temp.root(), fs::perms(0755));
    fs::create_directory(m_path);
    fs::permissions(m_path, fs::perms(0755));
  }
  ~ReadOnlyDir() { fs::permissions(m_path, fs::perms(0755)); }
  std::string path(const std::string& name) const { return m_path + "/" + name; }
  void lock() const { fs::permissions(m_path, fs::perms(0555)); }
  const std::string& root() const { return m_path; }

 private:
  std::string m_path;
};

TEST(TraceFinish, ClosedTraceUsesARollbackJournalAndLeavesNoSidecars) {
  TempDir dir;
  const std::string path = dir.path("run.moewb");
  writeTrace(path);
  EXPECT_FALSE(exists(path + "-wal"));
  EXPECT_FALSE(exists(path + "-shm"));
  EXPECT_EQ(fileFormatVersions(path), std::make_pair(1, 1)) << "the file is still in WAL mode";
}

TEST(TraceFinish, ReadingAFinishedTraceLeavesNoSidecars) {
  TempDir dir;
  const std::string path = dir.path("run.moewb");
  writeTrace(path);
  {
    auto reader = TraceReader::open(path);
    ASSERT_TRUE(reader.isOk()) << reader.status().toString();
    auto slices = (*reader)->slices(TimeWindow::all());
    ASSERT_TRUE(slices.isOk()) << slices.status().toString();
    EXPECT_EQ(slices->size(), size_t(kSteps));
    EXPECT_FALSE(exists(path + "-wal") || exists(path + "-shm")) << "sidecars while reading";
  }
  EXPECT_FALSE(exists(path + "-wal") || exists(path + "-shm")) << "sidecars after reading";
}

// The GUI follows a live run: its reader, opened while the writer runs, sees each commit and
// keeps working when the writer closes (the writer then leaves the file in WAL mode, complete).
TEST(TraceFinish, LiveReaderKeepsWorkingAcrossTheWritersClose) {
  TempDir dir;
  const std::string path = dir.path("live.moewb");
  auto created = TraceWriter::create(path);
  ASSERT_TRUE(created.isOk()) << created.status().toString();
  auto writer = std::move(created).value();
  const RunId run = writer->addRun({});
  const TrackId track = writer->addTrack({TrackId(), "trainer", "thread", 0, 0});
  ASSERT_TRUE(writer->flush().isOk());
  auto opened = TraceReader::open(path);
  ASSERT_TRUE(opened.isOk()) << opened.status().toString();
  auto reader = std::move(opened).value();
  for (int64_t step = 0; step < kSteps; ++step) {
    writer->addSlice(makeSlice(track, "attention.fwd", step * 1000, 500, step));
    StepRow row;
    row.run = run;
    row.step = step;
    writer->addStep(row);
    ASSERT_TRUE(writer->flush().isOk());
    auto steps = reader->steps(run);
    ASSERT_TRUE(steps.isOk()) << steps.status().toString();
    EXPECT_EQ(steps->size(), size_t(step + 1)) << "the live reader missed a commit";
  }
  ASSERT_TRUE(writer->close().isOk());
  auto steps = reader->steps(run);
  ASSERT_TRUE(steps.isOk()) << steps.status().toString();
  EXPECT_EQ(steps->size(), size_t(kSteps));
  reader.reset();
  EXPECT_EQ(readStepsProblem(path), "");
}

TEST(TraceReadOnlyPlace, FinishedTraceOpensInADirectoryThatCannotBeWritten) {
  TempDir temp;
  ReadOnlyDir archive(temp);
  const std::string path = archive.path("run.moewb");
  writeTrace(path);
  archive.lock();
  const auto problem = runWhereDirIsReadOnly(archive.root(), [&] { return readStepsProblem(path); });
  if (!problem) GTEST_SKIP() << "cannot make a directory read-only for a reader here";
  EXPECT_EQ(*problem, "");
  EXPECT_FALSE(exists(path + "-wal") || exists(path + "-shm"));
}

// A trace finished by an older build (or whose close met a live reader) is in WAL mode; without
// its -shm, SQLite needs to create one to read it, which a read-only place refuses.
TEST(TraceReadOnlyPlace, WalModeTraceWithoutSidecarsOpensImmutable) {
  TempDir temp;
  ReadOnlyDir archive(temp);
  const std::string path = archive.path("old.moewb");
  writeTrace(path);
  testing::execSql(path, "PRAGMA journal_mode=WAL");  // its close removes the -wal and -shm
  ASSERT_EQ(fileFormatVersions(path), std::make_pair(2, 2));
  ASSERT_FALSE(exists(path + "-wal") || exists(path + "-shm"));
  archive.lock();
  const auto problem = runWhereDirIsReadOnly(archive.root(), [&] { return readStepsProblem(path); });
  if (!problem) GTEST_SKIP() << "cannot make a directory read-only for a reader here";
  EXPECT_EQ(*problem, "");
  EXPECT_FALSE(exists(path + "-wal") || exists(path + "-shm"));
}

// Leaves `from` (a finished trace) in WAL mode with one more stats row in its -wal only, and
// copies the main file and -wal (not the -shm) to `to`, as an unfinished run copied elsewhere.
void copyWithUnmergedWal(const std::string& from, const std::string& to) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(from.c_str(), &db), SQLITE_OK);
  const char* sql =
      "PRAGMA journal_mode=WAL; PRAGMA wal_autocheckpoint=0; "
      "INSERT INTO stats VALUES ('late', 'info', 1, 'only in the wal');";
  ASSERT_EQ(sqlite3_exec(db, sql, nullptr, nullptr, nullptr), SQLITE_OK) << sqlite3_errmsg(db);
  fs::copy_file(from, to);
  fs::copy_file(from + "-wal", to + "-wal");
  sqlite3_close(db);
}

TEST(TraceReadOnlyPlace, WalWithDataThatCannotBeReadInPlaceIsRefusedAndKept) {
  TempDir temp;
  ReadOnlyDir archive(temp);
  const std::string source = temp.path("source.moewb");
  const std::string path = archive.path("copied.moewb");
  writeTrace(source);
  copyWithUnmergedWal(source, path);
  const auto walBytes = fs::file_size(path + "-wal");
  ASSERT_GT(walBytes, 0u);
  archive.lock();
  const auto problem = runWhereDirIsReadOnly(archive.root(), [&]() -> std::string {
    auto reader = TraceReader::open(path);
    if (reader.isOk()) {
      // Reading it in place would be fine too, as long as the -wal's row is seen.
      auto stats = (*reader)->stats();
      if (stats.isOk() && stats->size() == 1 && stats->front().name == "late") return "";
      return "opened without the -wal's data";
    }
    const std::string& message = reader.status().message();
    if (message.find(path + "-wal") == std::string::npos) return "no -wal named: " + message;
    if (message.find("copy") == std::string::npos) return "no remedy given: " + message;
    return "";
  });
  if (!problem) GTEST_SKIP() << "cannot make a directory read-only for a reader here";
  EXPECT_EQ(*problem, "");
  ASSERT_TRUE(exists(path + "-wal"));
  EXPECT_EQ(fs::file_size(path + "-wal"), walBytes);
}

TEST(TraceWalSafety, EmptyDatabaseBesideAWalWithDataIsRefusedAndTheWalKept) {
  TempDir dir;
  const std::string source = dir.path("source.moewb");
  const std::string path = dir.path("emptied.moewb");
  writeTrace(source);
  copyWithUnmergedWal(source, path);
  testing::writeFile(path, "");  // the main file lost, its -wal still there
  const auto walBytes = fs::file_size(path + "-wal");
  auto reader = TraceReader::open(path);
  ASSERT_FALSE(reader.isOk()) << "an empty database beside a -wal opened";
  EXPECT_EQ(reader.status().code(), StatusCode::kDataLoss) << reader.status().toString();
  EXPECT_NE(reader.status().message().find(path + "-wal"), std::string::npos)
      << reader.status().message();
  ASSERT_TRUE(exists(path + "-wal")) << "SQLite deleted the -wal";
  EXPECT_EQ(fs::file_size(path + "-wal"), walBytes);
}

}  // namespace
}  // namespace moewb::storage
