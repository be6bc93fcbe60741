// The range selection's models: aggregateHostSlices (counts, totals, self time, clipping at the
// range edges), storage::gpuWorkInRange and SelectionModel on a trace with GPU capture (kernels,
// copies and memsets grouped by name, clipped), and TimelineSearch (case-insensitive matches,
// next / previous with wrap-around).
#include "moewb/gui/range_aggregate.h"

#include <gtest/gtest.h>

#include <QSignalSpy>
#include <QTemporaryDir>

#include "model_check.h"
#include "moewb/gui/selection_model.h"
#include "moewb/gui/timeline_search.h"
#include "moewb/gui/trace_document.h"
#include "moewb/storage/range_queries.h"
#include "test_trace.h"

namespace moewb::gui {
namespace {

storage::SliceRow slice(int64_t startNs, int64_t durNs, const std::string& name, int32_t depth,
                        int64_t track = 1) {
  storage::SliceRow r;
  r.track = TrackId(track);
  r.startNs = startNs;
  r.durNs = durNs;
  r.name = name;
  r.depth = depth;
  return r;
}

// step [0, 100) > forward [10, 40) > experts [12, 20); step > backward [50, 90) > experts
// [55, 60); a second track with "Experts.other" [0, 30) and an instant "mark" at 35.
TimelineData nestedData() {
  TimelineData data;
  data.addSlices({slice(0, 100, "step", 0), slice(10, 30, "forward", 1),
                  slice(50, 40, "backward", 1), slice(12, 8, "experts", 2),
                  slice(55, 5, "experts", 2), slice(0, 30, "Experts.other", 0, 2),
                  slice(35, 0, "mark", 1, 2)});
  return data;
}

const RangeAggregateRow* find(const std::vector<RangeAggregateRow>& rows, const std::string& name) {
  for (const RangeAggregateRow& r : rows) {
    if (r.name == name) return &r;
  }
  return nullptr;
}

TEST(RangeAggregate, CountsTotalsAndSelfTimeClippedToTheRange) {
  const TimelineData data = nestedData();
  const auto rows = aggregateHostSlices(data, {30, 70});
  // step: clipped to [30, 70) = 40; its children inside: forward [30, 40) 10, backward [50, 70)
  // 20, so self 10.
  const RangeAggregateRow* step = find(rows, "step");
  ASSERT_NE(step, nullptr);
  EXPECT_EQ(step->count, 1);
  EXPECT_EQ(step->totalNs, 40);
  EXPECT_EQ(step->selfNs, 10);
  EXPECT_EQ(step->maxNs, 40);
  EXPECT_EQ(step->longest, (TimeRange{0, 100}));  // the whole slice, not the clipped part
  const RangeAggregateRow* forward = find(rows, "forward");
  ASSERT_NE(forward, nullptr);
  EXPECT_EQ(forward->totalNs, 10);
  EXPECT_EQ(forward->selfNs, 10);  // its experts child [12, 20) lies before the range
  const RangeAggregateRow* backward = find(rows, "backward");
  ASSERT_NE(backward, nullptr);
  EXPECT_EQ(backward->totalNs, 20);
  EXPECT_EQ(backward->selfNs, 15);  // minus experts [55, 60)
  const RangeAggregateRow* experts = find(rows, "experts");
  ASSERT_NE(experts, nullptr);
  EXPECT_EQ(experts->count, 1);  // [12, 20) is outside
  EXPECT_EQ(experts->totalNs, 5);
  EXPECT_EQ(experts->kind, "host");
  EXPECT_EQ(find(rows, "Experts.other"), nullptr);     // ends at 30: touches the range, no overlap
  const RangeAggregateRow* mark = find(rows, "mark");  // an instant strictly inside counts
  ASSERT_NE(mark, nullptr);
  EXPECT_EQ(mark->count, 1);
  EXPECT_EQ(mark->totalNs, 0);
  // Ordered by total, largest first.
  EXPECT_EQ(rows.front().name, "step");
  EXPECT_DOUBLE_EQ(step->shareOf(40), 1.0);
}

TEST(RangeAggregate, FullRangeAndEmptyRange) {
  const TimelineData data = nestedData();
  const auto rows = aggregateHostSlices(data, data.bounds());
  const RangeAggregateRow* experts = find(rows, "experts");
  ASSERT_NE(experts, nullptr);
  EXPECT_EQ(experts->count, 2);
  EXPECT_EQ(experts->totalNs, 13);
  EXPECT_EQ(experts->maxNs, 8);
  EXPECT_EQ(experts->longest, (TimeRange{12, 20}));
  EXPECT_EQ(find(rows, "step")->selfNs, 100 - 30 - 40);
  int64_t count = 0;
  for (const RangeAggregateRow& r : rows) count += r.count;
  EXPECT_EQ(count, data.sliceCount());
  EXPECT_TRUE(aggregateHostSlices(data, {50, 50}).empty());
  EXPECT_TRUE(aggregateHostSlices(data, {200, 300}).empty());
}

TEST(RangeAggregate, LongSliceBeforeTheRangeDoesNotHideLaterOnes) {
  // A long slice keeps the lane's running end maximum high: the slices after it that end before
  // the range must still be left out, those inside counted.
  TimelineData data;
  data.addSlices({slice(0, 1000, "long", 0), slice(1, 2, "early", 0), slice(500, 10, "in", 0)});
  const auto rows = aggregateHostSlices(data, {400, 600});
  EXPECT_EQ(find(rows, "early"), nullptr);
  ASSERT_NE(find(rows, "in"), nullptr);
  EXPECT_EQ(find(rows, "long")->totalNs, 200);
}

class GpuRange : public ::testing::Test {
 protected:
  void SetUp() override {
    m_file = m_dir.filePath(QStringLiteral("gpu.sqlite"));
    auto trace = testing::TestTrace::create(m_file.toStdString(), 4, 8);
    ASSERT_TRUE(trace.isOk()) << trace.status().toString();
    trace.value()->setGpuActivity(true);
    for (int s = 0; s < 3; ++s) ASSERT_TRUE(trace.value()->addStep(s).isOk());
    ASSERT_TRUE(trace.value()->finish().isOk());
  }
  static constexpr int64_t kStep1Ns = testing::TestTrace::kOriginNs + testing::TestTrace::kStepNs;
  QTemporaryDir m_dir;
  QString m_file;
};

const storage::RangeNameTotal* findGpu(const std::vector<storage::RangeNameTotal>& rows,
                                       const std::string& shortName) {
  for (const auto& r : rows) {
    if (r.shortName == shortName || (r.shortName.empty() && r.name == shortName)) return &r;
  }
  return nullptr;
}

TEST_F(GpuRange, QueryGroupsGpuWorkByNameAndClips) {
  using testing::TestTrace;
  auto whole =
      storage::gpuWorkInRange(m_file.toStdString(), {kStep1Ns, kStep1Ns + TestTrace::kStepNs});
  ASSERT_TRUE(whole.isOk()) << whole.status().toString();
  const auto* gemm = findGpu(*whole, "grouped_gemm_fwd_kernel");
  ASSERT_NE(gemm, nullptr);
  EXPECT_EQ(gemm->category, "kernel");
  EXPECT_EQ(gemm->count, 4);
  EXPECT_EQ(gemm->totalNs, 4 * TestTrace::kGpuKernelNs);
  EXPECT_EQ(whole->front().shortName, "grouped_gemm_fwd_kernel");  // largest total first
  const auto* elementwise = findGpu(*whole, "elementwise");
  ASSERT_NE(elementwise, nullptr);
  EXPECT_EQ(elementwise->count, 20);
  EXPECT_EQ(elementwise->totalNs, 20'000);
  ASSERT_NE(findGpu(*whole, "memcpy HtoD"), nullptr);
  EXPECT_EQ(findGpu(*whole, "memcpy HtoD")->totalNs, 50'000);
  ASSERT_NE(findGpu(*whole, "memset"), nullptr);
  EXPECT_EQ(findGpu(*whole, "memset")->category, "memset");
  // Cut layer 0's gemm in half: it still counts once, with the 100 us inside; the longest
  // occurrence is another layer's whole kernel.
  const int64_t cutNs = kStep1Ns + TestTrace::kGpuKernelOffsetNs + TestTrace::kGpuKernelNs / 2;
  auto cut = storage::gpuWorkInRange(m_file.toStdString(), {cutNs, kStep1Ns + 1'400'000});
  ASSERT_TRUE(cut.isOk()) << cut.status().toString();
  gemm = findGpu(*cut, "grouped_gemm_fwd_kernel");
  ASSERT_NE(gemm, nullptr);
  EXPECT_EQ(gemm->count, 4);
  EXPECT_EQ(gemm->totalNs, 3 * TestTrace::kGpuKernelNs + TestTrace::kGpuKernelNs / 2);
  EXPECT_EQ(gemm->maxNs, TestTrace::kGpuKernelNs);
  EXPECT_EQ(gemm->longestEndNs - gemm->longestStartNs, TestTrace::kGpuKernelNs);
  EXPECT_EQ(findGpu(*cut, "elementwise"), nullptr);  // at +1600 us, after the range
  auto none = storage::gpuWorkInRange(m_file.toStdString(), {kStep1Ns, kStep1Ns});
  ASSERT_TRUE(none.isOk());
  EXPECT_TRUE(none->empty());
  EXPECT_FALSE(storage::gpuWorkInRange("/nonexistent/x.sqlite", {0, 1}).isOk());
}

TEST_F(GpuRange, SelectionModelJoinsHostAndGpuRows) {
  using testing::TestTrace;
  TraceDocument doc;
  ASSERT_TRUE(doc.open(m_file).isOk());
  SelectionModel model;
  testing::ModelCheck check(&model);
  model.setDocument(&doc);
  QSignalSpy done(&model, &SelectionModel::aggregated);
  model.setRange({kStep1Ns, kStep1Ns + TestTrace::kStepNs});
  EXPECT_TRUE(model.isBusy());
  ASSERT_TRUE(done.wait(10'000));
  EXPECT_FALSE(model.isBusy());
  const int step = model.rowOf("step");
  ASSERT_GE(step, 0);
  EXPECT_EQ(model.rows()[size_t(step)].count, 1);
  const int experts = model.rowOf("experts.fwd");
  ASSERT_GE(experts, 0);
  EXPECT_EQ(model.rows()[size_t(experts)].count, 4);  // one per layer
  const int gemm = model.rowOf("grouped_gemm_fwd_kernel", "kernel");
  ASSERT_GE(gemm, 0);
  EXPECT_EQ(model.index(gemm, SelectionModel::kCount).data().toString(), QStringLiteral("4"));
  EXPECT_EQ(model.index(gemm, SelectionModel::kTotal).data(SelectionModel::kSortRole).toLongLong(),
            4 * TestTrace::kGpuKernelNs);
  EXPECT_EQ(model.index(gemm, SelectionModel::kShare).data().toString(), QStringLiteral("40.0%"));
  EXPECT_EQ(model.longestOccurrence(gemm).durNs(), TestTrace::kGpuKernelNs);
  EXPECT_TRUE(model.summaryText().contains(QStringLiteral("2.00 ms selected")))
      << model.summaryText().toStdString();
  // A newer range replaces the answer of an older one still on the worker.
  model.setRange({kStep1Ns, kStep1Ns + 1'000});
  model.setRange({kStep1Ns, kStep1Ns + 100'000});
  ASSERT_TRUE(done.wait(10'000));
  while (model.isBusy()) ASSERT_TRUE(done.wait(10'000));
  EXPECT_GE(model.rowOf("memcpy HtoD", "memcpy"), 0);
  EXPECT_LT(model.rowOf("grouped_gemm_fwd_kernel", "kernel"), 0);
  model.clear();
  EXPECT_EQ(model.rowCount(), 0);
  EXPECT_FALSE(model.range().has_value());
  EXPECT_TRUE(check.failures().isEmpty()) << check.failures().join('\n').toStdString();
}

TEST(TimelineSearch, FindsCaseInsensitiveSubstringsAndSteps) {
  const TimelineData data = nestedData();
  TimelineSearch search;
  search.run(data, QStringLiteral("EXPERTS"));
  ASSERT_EQ(search.matches().size(), 3u);     // experts x2 and Experts.other
  EXPECT_EQ(search.matches()[0].startNs, 0);  // Experts.other
  EXPECT_EQ(search.matches()[1].startNs, 12);
  EXPECT_EQ(search.matches()[2].startNs, 55);
  EXPECT_EQ(search.current(), -1);
  EXPECT_EQ(search.step(true, 10), 1);  // first match at or after t = 10
  EXPECT_EQ(search.step(true, 0), 2);
  EXPECT_EQ(search.step(true, 0), 0);   // wraps
  EXPECT_EQ(search.step(false, 0), 2);  // wraps back
  const SearchMatch& m = search.matches()[1];
  EXPECT_TRUE(search.isMatch(size_t(m.lane), m.index));
  EXPECT_FALSE(search.isMatch(0, 0));  // step
  search.setCurrent(-1);
  EXPECT_EQ(search.step(false, 12), 0);  // last match before t = 12
  search.run(data, QStringLiteral("nothing"));
  EXPECT_TRUE(search.matches().empty());
  EXPECT_EQ(search.step(true, 0), -1);
  search.run(data, QString());
  EXPECT_TRUE(search.matches().empty());
  EXPECT_EQ(search.dataRevision(), data.revision());
}

}  // namespace
}  // namespace moewb::gui
