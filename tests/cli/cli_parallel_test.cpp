// `moewb run --ranks N`: in-process ranks with EP x FSDP train to the single-rank losses and write
// one trace with every rank's steps, collectives and the all-to-all traffic matrix; settings that
// need one rank are refused with exit code 2 and no file.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <cmath>
#include <string>
#include <vector>

#include "cli_process.h"

namespace moewb::cli::testing {
namespace {

// The first column of every row of `sql` as text.
std::vector<std::string> query(const std::string& path, const std::string& sql) {
  std::vector<std::string> out;
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) {
    sqlite3_close(db);
    return out;
  }
  sqlite3_stmt* stmt = nullptr;
  if (sqlite3_prepare_v2(db, sql.c_str(), -1, &stmt, nullptr) == SQLITE_OK) {
    while (sqlite3_step(stmt) == SQLITE_ROW) {
      const unsigned char* text = sqlite3_column_text(stmt, 0);
      out.push_back(text != nullptr ? reinterpret_cast<const char*>(text) : "");
    }
  }
  sqlite3_finalize(stmt);
  sqlite3_close(db);
  return out;
}

std::string one(const std::string& path, const std::string& sql) {
  std::vector<std::string> rows = query(path, sql);
  return rows.empty() ? "<no row>" : rows.front();
}

TEST(CliParallel, RanksTrainToTheSingleRankLossesAndTraceEveryRank) {
  TempDir dir("cli-parallel");
  const std::string base = "run --config " + tinyConfig() +
                           " --quiet --steps 6 --set model.seq_len=16 --set run.threads=1 ";
  ProcessResult single = runMoewb(base + "--out " + dir.file("one.sqlite"), dir.path());
  ASSERT_EQ(single.exitCode, 0) << single.err;
  const std::string trace = dir.file("four.sqlite");
  ProcessResult ranks = runMoewb(
      base + "--ranks 4 --set parallel.ep=2 --set parallel.fsdp=2 --out " + trace, dir.path());
  ASSERT_EQ(ranks.exitCode, 0) << ranks.err;
  EXPECT_NE(ranks.err.find("4 in-process ranks: ep = 2, fsdp = 2, replicate = 2"),
            std::string::npos)
      << ranks.err;

  const std::string lastLoss = "SELECT loss + aux_loss FROM step WHERE rank = 0 AND step = 5";
  const double want = std::stod(one(dir.file("one.sqlite"), lastLoss));
  EXPECT_NEAR(std::stod(one(trace, lastLoss)), want, 1e-4 * want);
  EXPECT_EQ(one(trace, "SELECT world_size || ' ' || status FROM run"), "4 completed");
  EXPECT_EQ(one(trace, "SELECT count(*) FROM step"), "24");
  EXPECT_EQ(one(trace, "SELECT count(DISTINCT rank) FROM expert_load"), "4");
  EXPECT_EQ(one(trace, "SELECT count(*) FROM track WHERE kind = 'comm'"), "4");
  // Every collective of every group, with sequence numbers that agree across the peers.
  EXPECT_EQ(query(trace, "SELECT DISTINCT comm_group FROM collective ORDER BY 1"),
            (std::vector<std::string>{"ep", "expert_dp", "fsdp", "replicate", "world"}));
  EXPECT_EQ(one(trace, "SELECT count(*) FROM (SELECT comm_group, peers, seq, "
                       "count(DISTINCT op) AS ops FROM collective GROUP BY 1, 2, 3) "
                       "WHERE ops != 1"),
            "0");
  EXPECT_EQ(one(trace, "SELECT count(*) FROM slice s JOIN string c ON c.id = s.category "
                       "WHERE c.text = 'collective'"),
            one(trace, "SELECT count(*) FROM collective"));
  // The traffic matrix: 6 steps x 2 layers x 4 phases x 4 sources x 2 EP peers; what a rank
  // dispatched to a peer comes back from it in the combine.
  EXPECT_EQ(one(trace, "SELECT count(*) FROM a2a_traffic"), "384");
  EXPECT_EQ(one(trace, "SELECT count(*) FROM a2a_traffic d JOIN a2a_traffic c "
                       "ON c.step = d.step AND c.layer = d.layer AND c.src_rank = d.dst_rank "
                       "AND c.dst_rank = d.src_rank AND c.phase = 'combine' "
                       "WHERE d.phase = 'dispatch' AND c.bytes = d.bytes"),
            "96");
  EXPECT_EQ(one(trace, "SELECT count(*) FROM a2a_traffic WHERE src_rank / 2 != dst_rank / 2"),
            "0");
  // `moewb info` counts steps, not rank-steps.
  ProcessResult info = runMoewb("info --no-config " + trace, dir.path());
  ASSERT_EQ(info.exitCode, 0) << info.err;
  EXPECT_NE(info.out.find("steps    6 committed (0..5) on 4 ranks (24 rank-steps)"),
            std::string::npos)
      << info.out;
}

TEST(CliParallel, SettingsThatNeedOneRankExitTwoAndWriteNothing) {
  TempDir dir("cli-parallel-bad");
  const std::string base = "run --config " + tinyConfig() + " --quiet --steps 2 ";
  ProcessResult batch = runMoewb(base + "--ranks 3 --out " + dir.file("a.sqlite"), dir.path());
  EXPECT_EQ(batch.exitCode, 2);
  EXPECT_NE(batch.err.find("data.batch_size"), std::string::npos) << batch.err;
  EXPECT_FALSE(std::filesystem::exists(dir.file("a.sqlite")));
  // Checkpoints work on in-process ranks (cli_test.cpp); alignment dumps do not.
  ProcessResult dump = runMoewb(base + "--ranks 2 --dump-steps 0:1 --out " +
                                    dir.file("b.sqlite"), dir.path());
  EXPECT_EQ(dump.exitCode, 2);
  EXPECT_NE(dump.err.find("--dump-steps"), std::string::npos) << dump.err;
  EXPECT_FALSE(std::filesystem::exists(dir.file("b.sqlite")));
  ProcessResult ep = runMoewb(base + "--ranks 2 --set parallel.ep=3 --out " +
                                  dir.file("c.sqlite"), dir.path());
  EXPECT_EQ(ep.exitCode, 2);
  EXPECT_NE(ep.err.find("parallel.ep"), std::string::npos) << ep.err;
}

}  // namespace
}  // namespace moewb::cli::testing
