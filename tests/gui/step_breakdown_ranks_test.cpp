// The Step breakdown of parallel traces (step_breakdown.h): one sweep per rank, the slowest rank
// per step with the median rank beside it, and one rank's view; on a trace with one rank made
// slower per step (slow_rank_trace.h) and on a real 4-rank run of the engine, checked against
// the ranks' own step rows.
#include <gtest/gtest.h>

#include <QTemporaryDir>
#include <algorithm>
#include <map>
#include <numeric>

#include "moewb/gui/step_breakdown.h"
#include "moewb/storage/trace_reader.h"
#include "parallel_trace.h"
#include "slow_rank_trace.h"

namespace moewb::gui {
namespace {

using C = TimeCategory;
namespace t = moewb::gui::testing;

int64_t sum(const CategoryNs& ns) {
  return std::accumulate(ns.begin(), ns.end(), int64_t(0));
}

Result<StepBreakdownSet> readFile(const std::string& path) {
  auto reader = storage::TraceReader::open(path);
  if (!reader.isOk()) return reader.status();
  return readStepBreakdowns(**reader);
}

StepBreakdown step(int64_t s, int32_t rank, int64_t durNs) {
  StepBreakdown b;
  b.step = s;
  b.rank = rank;
  b.durNs = durNs;
  b.ns[size_t(C::kOther)] = durNs;
  return b;
}

TEST(StepBreakdownRanks, SlowestPerStepPicksTheLongestAndTheMedianRank) {
  // Three ranks; rank 1 has not committed step 2 yet (a live run).
  const std::vector<std::vector<StepBreakdown>> byRank = {
      {step(0, 0, 10), step(1, 0, 30), step(2, 0, 5)},
      {step(0, 1, 12), step(1, 1, 30)},
      {step(0, 2, 11), step(1, 2, 20), step(2, 2, 9)},
  };
  const std::vector<StepBreakdown> slowest = slowestPerStep(byRank);
  ASSERT_EQ(slowest.size(), 2u);  // step 2 waits for rank 1
  EXPECT_EQ(slowest[0].step, 0);
  EXPECT_EQ(slowest[0].rank, 1);
  EXPECT_EQ(slowest[0].durNs, 12);
  EXPECT_EQ(slowest[0].rankCount, 3);
  EXPECT_EQ(slowest[0].medianRank, 2);
  EXPECT_EQ(slowest[0].medianDurNs, 11);
  EXPECT_EQ(slowest[1].rank, 0);  // a tie of ranks 0 and 1: the lower rank
  EXPECT_EQ(slowest[1].medianDurNs, 30);
  EXPECT_EQ(slowest[1].ns[size_t(C::kOther)], 30);
  // Two ranks: the median is the lower middle (the faster one).
  const auto two = slowestPerStep({{step(4, 0, 7)}, {step(4, 3, 9)}});
  ASSERT_EQ(two.size(), 1u);
  EXPECT_EQ(two[0].rank, 3);
  EXPECT_EQ(two[0].medianRank, 0);
  EXPECT_EQ(two[0].medianDurNs, 7);
  EXPECT_TRUE(slowestPerStep({}).empty());
}

TEST(StepBreakdownRanks, ReaderPicksTheSlowedRankPerStep) {
  QTemporaryDir dir;
  const std::string path = dir.filePath(QStringLiteral("slow.sqlite")).toStdString();
  const Status written = t::writeSlowRankTrace(path);
  ASSERT_TRUE(written.isOk()) << written.toString();
  auto set = readFile(path);
  ASSERT_TRUE(set.isOk()) << set.status().toString();
  EXPECT_EQ(set->source, BreakdownSource::kHostPhases);
  ASSERT_EQ(set->ranks, (std::vector<int32_t>{0, 1, 2, 3}));
  ASSERT_TRUE(set->isParallel());
  EXPECT_FALSE(set->shownRank.has_value());
  ASSERT_EQ(set->byRank.size(), 4u);
  ASSERT_EQ(set->steps.size(), size_t(t::kSlowRankSteps));
  for (const StepBreakdown& b : set->steps) {
    SCOPED_TRACE("step " + std::to_string(b.step));
    const int32_t expected = t::slowRankExpected(b.step);
    const int64_t extra = t::slowRankExtraNs(b.step, expected);
    EXPECT_EQ(b.rank, expected);
    EXPECT_EQ(b.durNs, t::kSlowRankBaseNs + extra);
    EXPECT_EQ(b.rankCount, t::kSlowRankWorld);
    EXPECT_EQ(b.medianDurNs, t::kSlowRankBaseNs);  // at most two ranks are slowed per step
    EXPECT_EQ(t::slowRankExtraNs(b.step, b.medianRank), 0);
    // The bar is the slow rank's own breakdown: its extra time is in its experts part.
    EXPECT_EQ(b.ns[size_t(C::kExperts)], t::kSlowRankExpertsNs + extra);
    EXPECT_EQ(b.ns[size_t(C::kAllToAll)], 200'000);
    EXPECT_EQ(b.ns[size_t(C::kMixer)], 300'000);
    EXPECT_EQ(b.ns[size_t(C::kOptimizer)], 300'000);
    EXPECT_EQ(sum(b.ns), b.durNs);
  }
  // One rank's view: that rank's steps, its own durations.
  for (int32_t r = 0; r < t::kSlowRankWorld; ++r) {
    const StepBreakdownSet one = shownBreakdown(*set, r);
    ASSERT_EQ(one.shownRank, std::optional<int32_t>(r));
    EXPECT_TRUE(one.byRank.empty());  // the view keeps no copy of every rank
    EXPECT_EQ(one.ranks, set->ranks);
    ASSERT_EQ(one.steps.size(), size_t(t::kSlowRankSteps));
    for (const StepBreakdown& b : one.steps) {
      EXPECT_EQ(b.rank, r);
      EXPECT_EQ(b.durNs, t::kSlowRankBaseNs + t::slowRankExtraNs(b.step, r));
      EXPECT_EQ(b.ns[size_t(C::kExperts)], t::kSlowRankExpertsNs + t::slowRankExtraNs(b.step, r));
    }
    // A view (no byRank) cannot change its rank: it stays as it is.
    const StepBreakdownSet view = shownBreakdown(one, std::nullopt);
    EXPECT_EQ(view.shownRank, std::optional<int32_t>(r));
    EXPECT_EQ(view.steps.front().rank, r);
  }
  const StepBreakdownSet again = shownBreakdown(*set, std::nullopt);
  ASSERT_EQ(again.steps.size(), set->steps.size());
  EXPECT_EQ(again.steps[1].rank, 2);
  const StepBreakdownSet missing = shownBreakdown(*set, 9);  // not a rank: unchanged
  EXPECT_FALSE(missing.shownRank.has_value());
  EXPECT_EQ(missing.steps[1].rank, 2);
}

TEST(StepBreakdownRanks, RealFourRankRunPicksTheRankWithTheLongestStepRow) {
  QTemporaryDir dir;
  const std::string path = dir.filePath(QStringLiteral("ep4.sqlite")).toStdString();
  const Status written = moewb::testing::writeParallelTrace(path, 4, 4, 4);
  ASSERT_TRUE(written.isOk()) << written.toString();
  auto set = readFile(path);
  ASSERT_TRUE(set.isOk()) << set.status().toString();
  ASSERT_EQ(set->ranks, (std::vector<int32_t>{0, 1, 2, 3}));
  // The ranks' own step rows: per step, duration per rank.
  auto reader = storage::TraceReader::open(path);
  ASSERT_TRUE(reader.isOk());
  auto runs = (*reader)->runs();
  ASSERT_TRUE(runs.isOk() && !runs->empty());
  auto rows = (*reader)->steps(runs->front().id);
  ASSERT_TRUE(rows.isOk());
  std::map<int64_t, std::map<int32_t, int64_t>> durNs;  // step -> rank -> duration
  for (const storage::StepRow& r : *rows) durNs[r.step][r.rank] = r.endNs - r.startNs;
  ASSERT_EQ(set->steps.size(), durNs.size());
  for (const StepBreakdown& b : set->steps) {
    SCOPED_TRACE("step " + std::to_string(b.step));
    const auto& ranks = durNs.at(b.step);
    ASSERT_EQ(ranks.size(), 4u);
    int32_t longest = 0;
    std::vector<int64_t> sorted;
    for (const auto& [rank, ns] : ranks) {
      if (ns > ranks.at(longest)) longest = rank;
      sorted.push_back(ns);
    }
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(b.rank, longest);
    EXPECT_EQ(b.durNs, ranks.at(longest));
    EXPECT_EQ(b.rankCount, 4);
    EXPECT_EQ(b.medianDurNs, sorted[1]);
    EXPECT_EQ(ranks.at(b.medianRank), b.medianDurNs);
    EXPECT_EQ(sum(b.ns), b.durNs);
    // The bar is that rank's own breakdown (its byRank entry), not rank 0's.
    const auto& own = set->byRank[size_t(b.rank)];
    auto it = std::find_if(own.begin(), own.end(),
                           [&](const StepBreakdown& x) { return x.step == b.step; });
    ASSERT_NE(it, own.end());
    EXPECT_EQ(it->ns, b.ns);
    EXPECT_GT(b.ns[size_t(C::kAllToAll)], 0);
    EXPECT_GT(b.ns[size_t(C::kExperts)], 0);
  }
  for (int32_t r = 0; r < 4; ++r) {
    for (const StepBreakdown& b : shownBreakdown(*set, r).steps) {
      EXPECT_EQ(b.durNs, durNs.at(b.step).at(r)) << "rank " << r << " step " << b.step;
    }
  }
}

}  // namespace
}  // namespace moewb::gui
