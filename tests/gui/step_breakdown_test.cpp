// The per-step time breakdown (step_breakdown.h) and the bookmark store (bookmark_model.h):
// the category mapping, the priority sweep, the one-pass reader on host, GPU and real parallel
// traces (against sums taken from the reader's own slice queries), the pixel-column layout at
// 100k steps, the last-N-steps window, and bookmarks saved in (temporary) Qt settings.
#include <gtest/gtest.h>

#include <QSettings>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QTest>
#include <numeric>

#include "model_check.h"
#include "moewb/gui/bookmark_model.h"
#include "moewb/gui/step_breakdown.h"
#include "moewb/gui/step_breakdown_model.h"
#include "moewb/gui/trace_document.h"
#include "moewb/storage/gpu_rows.h"
#include "parallel_trace.h"
#include "test_trace.h"

namespace moewb::gui {
namespace {

using C = TimeCategory;
using moewb::gui::testing::TestTrace;

int64_t sum(const CategoryNs& ns) {
  return std::accumulate(ns.begin(), ns.end(), int64_t(0));
}

TEST(StepBreakdown, ClassifyWorkMapsPhasesKernelsAndCollectives) {
  // Host phases by name.
  EXPECT_EQ(classifyWork("attention.fwd", "phase", ""), C::kMixer);
  EXPECT_EQ(classifyWork("kda.bwd", "phase", ""), C::kMixer);
  EXPECT_EQ(classifyWork("sparse_attention.fwd", "phase", ""), C::kMixer);
  for (const char* p : {"router.fwd", "permute.bwd", "experts.fwd", "combine.bwd"}) {
    EXPECT_EQ(classifyWork(p, "phase", ""), C::kExperts) << p;
  }
  EXPECT_EQ(classifyWork("optimizer", "phase", ""), C::kOptimizer);
  EXPECT_EQ(classifyWork("loss.fwd", "phase", ""), C::kLoss);
  EXPECT_EQ(classifyWork("embedding.fwd", "phase", ""), C::kOther);
  EXPECT_EQ(classifyWork("forward", "phase", ""), C::kOther);
  EXPECT_EQ(classifyWork("attention_like.fwd", "phase", ""), C::kOther);  // not a prefix match
  // Collectives by op.
  EXPECT_EQ(classifyWork("all_to_all_v", "collective", ""), C::kAllToAll);
  EXPECT_EQ(classifyWork("all_reduce", "collective", ""), C::kCollective);
  EXPECT_EQ(classifyWork("reduce_scatter", "collective", ""), C::kCollective);
  // GPU work by its engine phase, not its name.
  EXPECT_EQ(classifyWork("void gemm<128>(Args)", "kernel", "experts.bwd"), C::kExperts);
  EXPECT_EQ(classifyWork("flash_fwd_kernel", "kernel", "attention.fwd"), C::kMixer);
  EXPECT_EQ(classifyWork("attention.fwd", "kernel", "step"), C::kOther);
  EXPECT_EQ(classifyWork("memcpy HtoD", "memcpy", ""), C::kOther);
  EXPECT_EQ(classifyWork("adam_kernel", "kernel", "optimizer"), C::kOptimizer);
  // NCCL kernels: all-to-all for send/recv or the EP phases, else other collectives.
  EXPECT_EQ(classifyWork("ncclDevKernel_SendRecv(ncclDevComm*)", "kernel", "step"), C::kAllToAll);
  EXPECT_EQ(classifyWork("ncclKernel_AllReduce_RING", "kernel", "dispatch.fwd"), C::kAllToAll);
  EXPECT_EQ(classifyWork("ncclDevKernel_AllReduce_Sum_f32", "kernel", "optimizer"),
            C::kCollective);
  for (int c = 0; c < kTimeCategoryCount; ++c) {
    EXPECT_STRNE(timeCategoryName(TimeCategory(c)), "");
    EXPECT_TRUE(timeCategoryColor(TimeCategory(c)).isValid());
  }
}

TEST(StepBreakdown, AttributeStepGivesEachInstantToOneCategoryByPriority) {
  // [0, 100): experts 10-50, all-to-all 30-60 (overlapping), mixer 70-80, a slice past the end.
  const std::vector<WorkInterval> work = {
      {10, 50, C::kExperts}, {30, 60, C::kAllToAll}, {70, 80, C::kMixer}, {95, 130, C::kLoss}};
  const CategoryNs host = attributeStep(work, 0, 100, BreakdownSource::kHostPhases);
  EXPECT_EQ(host[size_t(C::kAllToAll)], 30);  // communication wins on the host
  EXPECT_EQ(host[size_t(C::kExperts)], 20);
  EXPECT_EQ(host[size_t(C::kMixer)], 10);
  EXPECT_EQ(host[size_t(C::kLoss)], 5);       // clipped at the step's end
  EXPECT_EQ(host[size_t(C::kOther)], 35);     // 0-10, 60-70, 80-95
  EXPECT_EQ(host[size_t(C::kGpuIdle)], 0);
  EXPECT_EQ(sum(host), 100);
  const CategoryNs gpu = attributeStep(work, 0, 100, BreakdownSource::kGpuKernels);
  EXPECT_EQ(gpu[size_t(C::kExperts)], 40);    // compute wins on the GPU
  EXPECT_EQ(gpu[size_t(C::kAllToAll)], 10);   // only the exposed 50-60
  EXPECT_EQ(gpu[size_t(C::kGpuIdle)], 35);
  EXPECT_EQ(gpu[size_t(C::kOther)], 0);
  EXPECT_EQ(sum(gpu), 100);
  EXPECT_EQ(sum(attributeStep({}, 5, 5, BreakdownSource::kHostPhases)), 0);
  EXPECT_EQ(attributeStep({}, 0, 7, BreakdownSource::kGpuKernels)[size_t(C::kGpuIdle)], 7);
}

class StepBreakdownTrace : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(m_dir.isValid());
    m_path = m_dir.filePath(QStringLiteral("t.sqlite")).toStdString();
  }
  Result<StepBreakdownSet> read() {
    auto reader = storage::TraceReader::open(m_path);
    if (!reader.isOk()) return reader.status();
    return readStepBreakdowns(**reader);
  }
  QTemporaryDir m_dir;
  std::string m_path;
};

TEST_F(StepBreakdownTrace, HostPhasesAddUpToEachStepAndMatchTheSlices) {
  auto trace = TestTrace::create(m_path, 3, 4);
  ASSERT_TRUE(trace.isOk());
  for (int64_t s = 0; s < 4; ++s) ASSERT_TRUE((*trace)->addStep(s).isOk());
  auto set = read();
  ASSERT_TRUE(set.isOk()) << set.status().toString();
  EXPECT_EQ(set->source, BreakdownSource::kHostPhases);
  ASSERT_EQ(set->steps.size(), 4u);
  // The test trace's phases do not overlap: each category is the plain sum of its slices.
  auto reader = storage::TraceReader::open(m_path);
  ASSERT_TRUE(reader.isOk());
  for (const StepBreakdown& b : set->steps) {
    EXPECT_EQ(b.durNs, TestTrace::kStepNs);
    EXPECT_EQ(sum(b.ns), b.durNs) << "step " << b.step;
    CategoryNs expected{};
    auto slices = (*reader)->slices({b.startNs, b.startNs + b.durNs});
    ASSERT_TRUE(slices.isOk());
    for (const storage::SliceRow& s : *slices) {
      if (s.step != b.step || (s.depth < 2 && s.name != "optimizer")) continue;
      expected[size_t(classifyWork(s.name, s.category, ""))] += s.durNs;
    }
    for (C c : {C::kMixer, C::kExperts, C::kOptimizer, C::kLoss}) {
      EXPECT_EQ(b.ns[size_t(c)], expected[size_t(c)]) << timeCategoryName(c);
      EXPECT_GT(b.ns[size_t(c)], 0) << timeCategoryName(c);
    }
    EXPECT_EQ(b.ns[size_t(C::kGpuIdle)], 0);
    EXPECT_EQ(b.ns[size_t(C::kOptimizer)], 200'000);
    EXPECT_EQ(b.ns[size_t(C::kLoss)], 40'000);
  }
}

TEST_F(StepBreakdownTrace, GpuKernelsByPhaseAndTheIdleRest) {
  auto trace = TestTrace::create(m_path, 2, 4);
  ASSERT_TRUE(trace.isOk());
  (*trace)->setGpuActivity(true);
  for (int64_t s = 0; s < 3; ++s) ASSERT_TRUE((*trace)->addStep(s).isOk());
  auto set = read();
  ASSERT_TRUE(set.isOk()) << set.status().toString();
  EXPECT_EQ(set->source, BreakdownSource::kGpuKernels);
  ASSERT_EQ(set->steps.size(), 3u);
  for (const StepBreakdown& b : set->steps) {
    EXPECT_EQ(sum(b.ns), TestTrace::kStepNs);
    // Per layer one experts.fwd GEMM; the memcpy, memset and 20 elementwise kernels of phase
    // "step"; nothing else runs, so the rest is idle.
    EXPECT_EQ(b.ns[size_t(C::kExperts)], 2 * TestTrace::kGpuKernelNs);
    EXPECT_EQ(b.ns[size_t(C::kOther)], 50'000 + 10'000 + 20 * 1'000);
    EXPECT_EQ(b.ns[size_t(C::kGpuIdle)],
              TestTrace::kStepNs - 2 * TestTrace::kGpuKernelNs - 80'000);
    EXPECT_EQ(b.ns[size_t(C::kMixer)], 0);  // host phases do not count with GPU capture
  }
  std::atomic<bool> cancel{true};
  auto reader = storage::TraceReader::open(m_path);
  ASSERT_TRUE(reader.isOk());
  auto stopped = readStepBreakdowns(**reader, &cancel);
  ASSERT_FALSE(stopped.isOk());
  EXPECT_EQ(stopped.status().code(), StatusCode::kCancelled);
}

TEST_F(StepBreakdownTrace, RealParallelRunCountsRankZerosAllToAll) {
  const Status written = moewb::testing::writeParallelTrace(m_path, 2, 2, 3);
  ASSERT_TRUE(written.isOk()) << written.toString();
  auto set = read();
  ASSERT_TRUE(set.isOk()) << set.status().toString();
  ASSERT_EQ(set->ranks, (std::vector<int32_t>{0, 1}));
  ASSERT_EQ(set->byRank.size(), 2u);
  ASSERT_EQ(set->byRank[0].size(), 3u);  // rank 0's steps
  auto reader = storage::TraceReader::open(m_path);
  ASSERT_TRUE(reader.isOk());
  auto tracks = (*reader)->tracks();
  ASSERT_TRUE(tracks.isOk());
  for (const StepBreakdown& b : set->byRank[0]) {
    EXPECT_EQ(sum(b.ns), b.durNs);
    for (C c : {C::kMixer, C::kExperts, C::kAllToAll, C::kOptimizer}) {
      EXPECT_GT(b.ns[size_t(c)], 0) << timeCategoryName(c) << " step " << b.step;
    }
    // All-to-all has the highest priority and one comm track runs one at a time: its part is
    // the sum of rank 0's all-to-all slices clipped to the step.
    int64_t a2a = 0;
    auto slices = (*reader)->slices({b.startNs, b.startNs + b.durNs});
    ASSERT_TRUE(slices.isOk());
    for (const storage::SliceRow& s : *slices) {
      int32_t rank = -1;
      for (const storage::TrackRow& t : *tracks) {
        if (t.id == s.track) rank = t.rank;
      }
      if (rank != 0 || classifyWork(s.name, s.category, "") != C::kAllToAll ||
          s.category != storage::kCategoryCollective) {
        continue;
      }
      a2a += std::min(s.startNs + s.durNs, b.startNs + b.durNs) - std::max(s.startNs, b.startNs);
    }
    EXPECT_EQ(b.ns[size_t(C::kAllToAll)], a2a);
  }
}

TEST(StepBreakdown, ColumnsOfOneBarPerStepOrPerPixelColumn) {
  std::vector<StepBreakdown> steps(100'000);
  for (size_t i = 0; i < steps.size(); ++i) {
    steps[i].step = int64_t(i);
    steps[i].durNs = i == 54'321 ? 9'000 : 1'000;  // one spike
    steps[i].ns[size_t(C::kExperts)] = steps[i].durNs - 200;
    steps[i].ns[size_t(C::kOther)] = 200;
  }
  // Few steps: one bar each, equally wide.
  auto few = columnsOf(steps, 10, 19, 400);
  ASSERT_EQ(few.size(), 10u);
  EXPECT_EQ(few[0].first, 10u);
  EXPECT_EQ(few[9].last, 19u);
  EXPECT_DOUBLE_EQ(few[3].x1 - few[3].x0, 40.0);
  EXPECT_DOUBLE_EQ(few[0].meanNs[size_t(C::kOther)], 200.0);
  // 100k steps over 500 px: 500 columns of 200 steps, means per step, the spike is the slowest.
  auto many = columnsOf(steps, 0, steps.size() - 1, 500);
  ASSERT_EQ(many.size(), 500u);
  size_t covered = 0;
  for (const BreakdownColumn& c : many) covered += c.last - c.first + 1;
  EXPECT_EQ(covered, steps.size());
  const BreakdownColumn& spike = many[54'321 / 200];
  EXPECT_EQ(spike.slowest, 54'321u);
  EXPECT_DOUBLE_EQ(spike.maxDurNs, 9'000.0);
  EXPECT_DOUBLE_EQ(spike.meanNs[size_t(C::kExperts)], (199.0 * 800 + 8'800) / 200.0);
  // Up to one step per pixel: still one bar each.
  auto dense = columnsOf(steps, 0, 299, 400);
  ASSERT_EQ(dense.size(), 300u);
  EXPECT_EQ(dense[299].first, 299u);
  EXPECT_DOUBLE_EQ(dense[299].x1, 400.0);
  EXPECT_TRUE(columnsOf(steps, 5, 4, 100).empty());
  EXPECT_TRUE(columnsOf(steps, 0, 10, 0.5).empty());
}

TEST(StepBreakdown, LastStepsWindowTakesRankZeroRows) {
  std::vector<storage::StepRow> rows;
  for (int64_t s = 0; s < 10; ++s) {
    for (int32_t rank = 0; rank < 2; ++rank) {
      storage::StepRow r;
      r.step = s;
      r.rank = rank;
      r.startNs = s * 100 + rank;  // rank 1 a little later
      r.endNs = s * 100 + 90 + rank * 5;
      rows.push_back(r);
    }
  }
  auto w = lastStepsWindow(rows, 3);
  ASSERT_TRUE(w.has_value());
  EXPECT_EQ(w->firstStep, 7);
  EXPECT_EQ(w->lastStep, 9);
  EXPECT_EQ(w->startNs, 700);
  EXPECT_EQ(w->endNs, 990);
  auto all = lastStepsWindow(rows, 50);
  ASSERT_TRUE(all.has_value());
  EXPECT_EQ(all->firstStep, 0);
  EXPECT_FALSE(lastStepsWindow({}, 5).has_value());
}

TEST_F(StepBreakdownTrace, ModelReadsOffTheGuiThreadAndFollowsRefreshes) {
  auto trace = TestTrace::create(m_path, 2, 4);
  ASSERT_TRUE(trace.isOk());
  for (int64_t s = 0; s < 3; ++s) ASSERT_TRUE((*trace)->addStep(s).isOk());
  TraceDocument doc;
  StepBreakdownModel model;
  model.setDocument(&doc);
  QSignalSpy changed(&model, &StepBreakdownModel::changed);
  ASSERT_TRUE(doc.open(QString::fromStdString(m_path)).isOk());
  EXPECT_TRUE(model.isBusy());  // the read runs on the worker
  ASSERT_TRUE(QTest::qWaitFor([&] { return !model.isBusy(); }, 10'000));
  ASSERT_EQ(model.data().steps.size(), 3u);
  for (int64_t s = 3; s < 5; ++s) ASSERT_TRUE((*trace)->addStep(s).isOk());
  ASSERT_TRUE(doc.refresh().isOk());
  ASSERT_TRUE(QTest::qWaitFor([&] { return model.data().steps.size() == 5; }, 10'000));
  EXPECT_EQ(model.data().steps.back().step, 4);
  doc.close();
  EXPECT_TRUE(model.data().steps.empty());
  EXPECT_GE(changed.count(), 3);
}

class BookmarkSettings : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(m_dir.isValid());
    QSettings::setPath(QSettings::NativeFormat, QSettings::UserScope, m_dir.path());
    QSettings::setPath(QSettings::IniFormat, QSettings::UserScope, m_dir.path());
  }
  QTemporaryDir m_dir;
};

TEST_F(BookmarkSettings, SavedPerTraceAndReadBack) {
  const QString a = m_dir.filePath(QStringLiteral("a.sqlite"));
  const QString b = m_dir.filePath(QStringLiteral("b.sqlite"));
  EXPECT_FALSE(BookmarkModel::settingsKey(a).mid(10).contains(QLatin1Char('/')));
  BookmarkModel model;
  const moewb::gui::testing::ModelCheck check(&model);
  model.load(a);
  const Bookmark range{QStringLiteral("slow step"), 5'000'000'123, 5'002'000'000,
                       4'000'000'000, 6'000'000'000, 0};
  const Bookmark point{QStringLiteral("spike"), 5'100'000'000, 5'100'000'000,
                       5'000'000'000, 5'200'000'000, -1};
  model.add(range);
  model.add(point);
  BookmarkModel again;
  again.load(a);
  ASSERT_EQ(again.bookmarks().size(), 2u);
  EXPECT_EQ(again.bookmarks()[0], range);
  EXPECT_EQ(again.bookmarks()[1], point);
  EXPECT_EQ(again.data(again.index(0), Qt::DisplayRole).toString(), QStringLiteral("slow step"));
  again.load(b);  // another trace has its own (none)
  EXPECT_EQ(again.rowCount(), 0);
  ASSERT_TRUE(model.remove(0));
  EXPECT_FALSE(model.remove(5));
  again.load(a);
  ASSERT_EQ(again.bookmarks().size(), 1u);
  EXPECT_EQ(again.bookmarks()[0].name, QStringLiteral("spike"));
  // A value that is not our JSON array is ignored.
  {
    QSettings s{QStringLiteral("MoE Workbench"), QStringLiteral("moewb-gui")};
    s.setValue(BookmarkModel::settingsKey(b), QStringLiteral("{not json"));
  }
  again.load(b);
  EXPECT_EQ(again.rowCount(), 0);
  EXPECT_TRUE(check.failures().isEmpty()) << check.failures().join(QLatin1Char('\n')).toStdString();
}

}  // namespace
}  // namespace moewb::gui
