// TraceReader::open on files that are not (readable) traces: each must give the documented code
// and a message naming the file, never a crash.
#include <gtest/gtest.h>

#include <filesystem>
#include <random>

#include "moewb/storage/trace_reader.h"
#include "moewb/storage/trace_writer.h"
#include "test_util.h"

namespace moewb::storage {
namespace {

using testing::TempDir;

// Opens `path`, expects failure with `code` and a message containing the path and `phrase`.
void expectOpenFails(const std::string& path, StatusCode code, const std::string& phrase) {
  auto reader = TraceReader::open(path);
  ASSERT_FALSE(reader.isOk()) << path << " opened although it should not";
  EXPECT_EQ(reader.status().code(), code) << reader.status().toString();
  EXPECT_NE(reader.status().message().find(path), std::string::npos) << reader.status().message();
  EXPECT_NE(reader.status().message().find(phrase), std::string::npos) << reader.status().message();
}

// A real, closed trace with enough slices to span many pages.
void writeRealTrace(const std::string& path, int slices) {
  auto created = TraceWriter::create(path);
  ASSERT_TRUE(created.isOk()) << created.status().toString();
  auto writer = std::move(created).value();
  const TrackId track = writer->addTrack({TrackId(), "t", "thread", 0, 0});
  for (int i = 0; i < slices; ++i) {
    writer->addSlice(testing::makeSlice(track, "slice" + std::to_string(i % 50), i * 10, 5));
  }
  ASSERT_TRUE(writer->close().isOk());
}

TEST(TraceReaderOpen, MissingFile) {
  TempDir dir;
  expectOpenFails(dir.path("nope.moewb"), StatusCode::kNotFound, "does not exist");
}

TEST(TraceReaderOpen, Directory) {
  TempDir dir;
  expectOpenFails(dir.root(), StatusCode::kFailedPrecondition, "is a directory");
}

TEST(TraceReaderOpen, EmptyFile) {
  TempDir dir;
  const std::string path = dir.path("empty.moewb");
  testing::writeFile(path, "");
  expectOpenFails(path, StatusCode::kDataLoss, "empty");
}

TEST(TraceReaderOpen, TextFile) {
  TempDir dir;
  const std::string path = dir.path("notes.txt");
  testing::writeFile(path, "step,loss\n0,2.5\n1,2.4\n");
  expectOpenFails(path, StatusCode::kDataLoss, "not an SQLite database");
}

TEST(TraceReaderOpen, RandomBytes) {
  TempDir dir;
  const std::string path = dir.path("random.bin");
  std::mt19937 rng(1234);
  std::string bytes(64 * 1024, '\0');
  for (char& c : bytes) c = char(rng() & 0xff);
  testing::writeFile(path, bytes);
  expectOpenFails(path, StatusCode::kDataLoss, "not an SQLite database");
}

TEST(TraceReaderOpen, SqliteDatabaseOfAnotherApp) {
  TempDir dir;
  const std::string path = dir.path("other.db");
  testing::execSql(path,
                   "CREATE TABLE users(id INTEGER PRIMARY KEY, name TEXT);"
                   "INSERT INTO users(name) VALUES ('ada');");
  expectOpenFails(path, StatusCode::kDataLoss,
                  "is an SQLite database but not a MoE Workbench trace");
}

TEST(TraceReaderOpen, SqliteDatabaseWithAForeignMetaTable) {
  TempDir dir;
  const std::string shaped = dir.path("shaped.db");
  testing::execSql(shaped, "CREATE TABLE meta(id INTEGER, blob BLOB);");
  expectOpenFails(shaped, StatusCode::kDataLoss,
                  "is an SQLite database but not a MoE Workbench trace");
  const std::string format = dir.path("format.db");
  testing::execSql(format,
                   "CREATE TABLE meta(key TEXT, value TEXT);"
                   "INSERT INTO meta VALUES ('format', 'someone-else');");
  expectOpenFails(format, StatusCode::kDataLoss, "meta format is 'someone-else'");
}

TEST(TraceReaderOpen, TraceMissingACoreTableIsDamagedNamingTheTables) {
  TempDir dir;
  const std::string path = dir.path("damaged.moewb");
  writeRealTrace(path, 10);
  testing::execSql(path, "DROP TABLE step; DROP TABLE expert_load;");
  expectOpenFails(path, StatusCode::kDataLoss, "lacks the table(s) step, expert_load");
  // An optional table (swap, GPU, parallel) may be absent: the trace still opens.
  const std::string optional = dir.path("optional.moewb");
  writeRealTrace(optional, 10);
  testing::execSql(optional, "DROP TABLE swap_event; DROP TABLE gpu_kernel;");
  EXPECT_TRUE(TraceReader::open(optional).isOk());
}

TEST(TraceReaderOpen, NewerSchemaVersion) {
  TempDir dir;
  const std::string path = dir.path("future.moewb");
  writeRealTrace(path, 10);
  testing::execSql(path, "UPDATE meta SET value = '2' WHERE key = 'schema_version'");
  expectOpenFails(path, StatusCode::kFailedPrecondition,
                  "was written by a newer MoE Workbench (schema 2); this build reads up to 1");
}

TEST(TraceReaderOpen, UnreadableSchemaVersion) {
  TempDir dir;
  const std::string path = dir.path("garbled.moewb");
  writeRealTrace(path, 10);
  testing::execSql(path, "UPDATE meta SET value = 'one' WHERE key = 'schema_version'");
  expectOpenFails(path, StatusCode::kDataLoss, "unreadable schema_version 'one'");
}

TEST(TraceReaderOpen, TruncatedTrace) {
  TempDir dir;
  const std::string path = dir.path("cut.moewb");
  writeRealTrace(path, 20'000);
  const auto size = std::filesystem::file_size(path);
  ASSERT_GT(size, 64u * 1024u) << "the trace should span many pages";
  ASSERT_FALSE(std::filesystem::exists(path + "-wal") &&
               std::filesystem::file_size(path + "-wal") > 0);
  std::filesystem::resize_file(path, size / 2);
  expectOpenFails(path, StatusCode::kDataLoss, "truncated");
}

TEST(TraceReaderOpen, CorruptPagesGiveDataLossNotACrash) {
  TempDir dir;
  const std::string path = dir.path("scribbled.moewb");
  writeRealTrace(path, 20'000);
  std::string bytes = testing::readFile(path);
  ASSERT_GT(bytes.size(), 3u * 4096u);
  for (size_t i = 2 * 4096; i < bytes.size(); i += 97) bytes[i] = char(0xA5);
  testing::writeFile(path, bytes);
  // Open may already notice; otherwise the first full read must.
  auto reader = TraceReader::open(path);
  Status status = reader.status();
  if (reader.isOk()) {
    auto slices = (*reader)->slices(TimeWindow::all());
    status = slices.status();
    if (status.isOk()) status = (*reader)->phaseTotals().status();
  }
  ASSERT_FALSE(status.isOk()) << "scribbled pages went unnoticed";
  EXPECT_EQ(status.code(), StatusCode::kDataLoss) << status.toString();
  EXPECT_NE(status.message().find(path), std::string::npos) << status.message();
}

}  // namespace
}  // namespace moewb::storage
