// `moewb merge`: a trace of 2 in-process ranks is split into one file per rank (as a
// multi-process run writes them), rank 1's clock moved by +5 s; merging them gives back the
// rows of the original trace on rank 0's clock, which `moewb info` reads. Refusals exit with 2
// and name the file, and write nothing.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "cli_process.h"

namespace moewb::cli::testing {
namespace {

constexpr int64_t kShiftNs = 5'000'000'000;  // rank 1's clock runs 5 s ahead

// Runs `sql` on `path`; the first column of the first row as text ("" without rows), or
// "error: ..." when it fails.
std::string sqlOne(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  std::string out;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE, nullptr) != SQLITE_OK) {
    out = std::string("error: ") + sqlite3_errmsg(db);
    sqlite3_close(db);
    return out;
  }
  sqlite3_stmt* stmt = nullptr;
  const char* tail = sql.c_str();
  while (*tail != '\0') {
    if (sqlite3_prepare_v2(db, tail, -1, &stmt, &tail) != SQLITE_OK) {
      out = std::string("error: ") + sqlite3_errmsg(db);
      break;
    }
    if (stmt == nullptr) break;
    int rc = sqlite3_step(stmt);
    if (rc == SQLITE_ROW && out.empty()) {
      const unsigned char* text = sqlite3_column_text(stmt, 0);
      out = text != nullptr ? reinterpret_cast<const char*>(text) : "NULL";
    }
    while (rc == SQLITE_ROW) rc = sqlite3_step(stmt);
    if (rc != SQLITE_DONE) out = std::string("error: ") + sqlite3_errmsg(db);
    sqlite3_finalize(stmt);
  }
  sqlite3_close(db);
  return out;
}

// Keeps only rank `rank`'s rows of a copy of `whole` and adds `shiftNs` to its timestamps.
std::string splitRank(const std::string& whole, const std::filesystem::path& dir, int rank,
                      int64_t shiftNs) {
  const std::string path = (dir / ("t.rank" + std::to_string(rank) + ".db")).string();
  std::filesystem::copy_file(whole, path);
  const std::string r = std::to_string(rank), s = std::to_string(shiftNs);
  const std::string other = "(SELECT id FROM track WHERE rank != " + r + ")";
  const std::string result = sqlOne(
      path,
      "DELETE FROM slice WHERE track IN " + other + ";" + "DELETE FROM counter WHERE track IN " +
          other + ";" + "DELETE FROM memory_event WHERE track IN " + other + ";" +
          "DELETE FROM collective WHERE rank != " + r + ";" + "DELETE FROM step WHERE rank != " +
          r + ";" + "DELETE FROM expert_load WHERE rank != " + r + ";" +
          "DELETE FROM a2a_traffic WHERE src_rank != " + r + ";" +
          "DELETE FROM track WHERE rank != " + r + ";" + "UPDATE slice SET start_ns = start_ns + " +
          s + ";" + "UPDATE counter SET ts_ns = ts_ns + " + s + ";" +
          "UPDATE memory_event SET ts_ns = ts_ns + " + s + ";" +
          "UPDATE collective SET start_ns = start_ns + " + s + ";" +
          "UPDATE step SET start_ns = start_ns + " + s + ", end_ns = end_ns + " + s + ";" +
          "UPDATE run SET start_ns = start_ns + " + s + ", end_ns = end_ns + " + s + ";");
  EXPECT_EQ(result.rfind("error", 0), std::string::npos) << result;
  return path;
}

class CliMerge : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    s_dir = new TempDir("cli-merge");
    s_whole = s_dir->file("whole.db");
    ProcessResult run = runMoewb("run --config " + tinyConfig() +
                                     " --quiet --steps 3 --set model.seq_len=16 --set "
                                     "run.threads=1 --ranks 2 --set parallel.ep=2 --out " +
                                     s_whole,
                                 s_dir->path());
    ASSERT_EQ(run.exitCode, 0) << run.err;
    s_rank0 = splitRank(s_whole, s_dir->path(), 0, 0);
    s_rank1 = splitRank(s_whole, s_dir->path(), 1, kShiftNs);
  }
  static void TearDownTestSuite() {
    delete s_dir;
    s_dir = nullptr;
  }

  static TempDir* s_dir;
  static std::string s_whole, s_rank0, s_rank1;
};

TempDir* CliMerge::s_dir = nullptr;
std::string CliMerge::s_whole, CliMerge::s_rank0, CliMerge::s_rank1;

// A trace that lost a table every trace has is damaged input: info, export and merge refuse it
// with exit 2 and a message naming the table (not exit 1 with SQLite's "no such table").
TEST_F(CliMerge, DamagedTraceIsBadInputForInfoExportAndMerge) {
  const std::string damaged = s_dir->file("damaged.db");
  std::filesystem::copy_file(s_rank1, damaged, std::filesystem::copy_options::overwrite_existing);
  ASSERT_EQ(sqlOne(damaged, "DROP TABLE expert_load;"), "");
  const std::vector<std::string> commands = {
      "info --no-config " + damaged,
      "export --chrome " + s_dir->file("damaged.json") + " " + damaged,
      "merge -o " + s_dir->file("damaged-merged.db") + " " + s_rank0 + " " + damaged};
  for (const std::string& command : commands) {
    ProcessResult result = runMoewb(command, s_dir->path());
    EXPECT_EQ(result.exitCode, 2) << command << "\n" << result.err;
    EXPECT_NE(result.err.find("lacks the table(s) expert_load"), std::string::npos)
        << command << "\n" << result.err;
  }
}

TEST_F(CliMerge, JoinsTheRankFilesOnRankZerosClock) {
  const std::string out = s_dir->file("merged.db");
  ProcessResult merge = runMoewb("merge -o " + out + " " + s_rank1 + " " + s_rank0, s_dir->path());
  ASSERT_EQ(merge.exitCode, 0) << merge.err;
  EXPECT_NE(merge.out.find("rank 0  " + s_rank0), std::string::npos) << merge.out;
  EXPECT_NE(merge.out.find("rank 1  " + s_rank1), std::string::npos) << merge.out;
  // Threads finish a collective some microseconds apart: the offset is -5 s give or take that.
  EXPECT_TRUE(merge.out.find("(-4.99") != std::string::npos ||
              merge.out.find("(-5.00") != std::string::npos)
      << merge.out;
  EXPECT_NE(merge.out.find("shared collectives"), std::string::npos) << merge.out;
  EXPECT_NE(merge.out.find("wrote " + out + " (2 of 2 ranks"), std::string::npos) << merge.out;

  const double offsetNs =
      std::stod(sqlOne(out, "SELECT value FROM meta WHERE key = 'clock_offset_ns.rank1'"));
  EXPECT_NEAR(offsetNs, double(-kShiftNs), 1e6);
  for (const char* table :
       {"slice", "track", "step", "collective", "expert_load", "a2a_traffic", "counter"}) {
    const std::string countSql = std::string("SELECT count(*) FROM ") + table;
    EXPECT_EQ(sqlOne(out, countSql), sqlOne(s_whole, countSql)) << table;
  }
  // Every step of rank 1 back where the in-process run had it, within 1 ms.
  EXPECT_EQ(sqlOne(out, "ATTACH '" + s_whole +
                            "' AS whole; SELECT count(*) FROM step m JOIN "
                            "whole.step w USING (rank, step) WHERE abs(m.start_ns - w.start_ns) < "
                            "1000000 AND abs(m.end_ns - w.end_ns) < 1000000"),
            sqlOne(s_whole, "SELECT count(*) FROM step"));

  ProcessResult info = runMoewb("info " + out, s_dir->path());
  ASSERT_EQ(info.exitCode, 0) << info.err;
  EXPECT_NE(info.out.find("ranks 2"), std::string::npos) << info.out;
  EXPECT_NE(info.out.find("steps    3 committed (0..2) on 2 ranks (6 rank-steps)"),
            std::string::npos)
      << info.out;
}

TEST_F(CliMerge, RefusesAnExistingOutputAndFilesThatAreNotTracesWithExitCode2) {
  const std::string out = s_dir->file("exists.db");
  {
    std::ofstream keep(out);
    keep << "keep";
  }
  ProcessResult exists = runMoewb("merge -o " + out + " " + s_rank0 + " " + s_rank1, s_dir->path());
  EXPECT_EQ(exists.exitCode, 2);
  EXPECT_NE(exists.err.find("'" + out + "' already exists"), std::string::npos) << exists.err;
  EXPECT_NE(exists.err.find("--force"), std::string::npos) << exists.err;
  EXPECT_EQ(readFile(out), "keep");

  const std::string notes = s_dir->file("notes.txt");
  {
    std::ofstream text(notes);
    text << "not a trace\n";
  }
  const std::string fresh = s_dir->file("fresh.db");
  ProcessResult bad = runMoewb("merge -o " + fresh + " " + s_rank0 + " " + notes, s_dir->path());
  EXPECT_EQ(bad.exitCode, 2);
  EXPECT_NE(bad.err.find(notes), std::string::npos) << bad.err;
  EXPECT_FALSE(std::filesystem::exists(fresh));

  // --force replaces a trace, never a file that is not one (issue 19, item 2).
  ProcessResult refused =
      runMoewb("merge --force -o " + out + " " + s_rank0 + " " + s_rank1, s_dir->path());
  EXPECT_EQ(refused.exitCode, 2);
  EXPECT_NE(refused.err.find("not a moewb trace"), std::string::npos) << refused.err;
  EXPECT_EQ(readFile(out), "keep");
  const std::string merged = s_dir->file("merged-twice.sqlite");
  ASSERT_EQ(runMoewb("merge -o " + merged + " " + s_rank0 + " " + s_rank1, s_dir->path()).exitCode,
            0);
  ProcessResult forced =
      runMoewb("merge --force -o " + merged + " " + s_rank0 + " " + s_rank1, s_dir->path());
  EXPECT_EQ(forced.exitCode, 0) << forced.err;
  EXPECT_EQ(sqlOne(merged, "SELECT count(*) FROM run"), "1");
  // The output cannot be one of the inputs.
  ProcessResult self =
      runMoewb("merge --force -o " + s_rank0 + " " + s_rank0 + " " + s_rank1, s_dir->path());
  EXPECT_EQ(self.exitCode, 2);
  EXPECT_NE(self.err.find("input file itself"), std::string::npos) << self.err;
}

}  // namespace
}  // namespace moewb::cli::testing
