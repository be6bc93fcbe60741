// GPU stream lanes in the GUI: layout and hit testing as pure functions, labels and colours, the
// details model under the model tester, and the trace document on a trace with GPU capture (host
// lanes without GPU slices, lanes per window, a selected kernel's details and expert load).
#include "moewb/gui/gpu_timeline.h"

#include <gtest/gtest.h>

#include <QTemporaryDir>

#include "model_check.h"
#include "moewb/gui/gpu_details_model.h"
#include "moewb/gui/trace_document.h"
#include "test_trace.h"

namespace moewb::gui {
namespace {

storage::GpuLaneItem item(int64_t id, int64_t startNs, int64_t endNs, const char* category,
                          int32_t count = 1) {
  storage::GpuLaneItem i;
  i.id = SliceId(id);
  i.startNs = startNs;
  i.endNs = endNs;
  i.category = category;
  i.count = count;
  i.name = "kernel_" + std::to_string(id) + "(float*)";
  return i;
}

TEST(GpuTimeline, LayoutClipsWidensAndDropsOutside) {
  std::vector<storage::GpuLane> lanes(2);
  lanes[0].items = {item(1, -500, 100, "kernel"),  // starts left of the window
                    item(2, 200, 201, "kernel"),   // 0.1 px: widened to 1 px
                    item(3, 400, 900, "memcpy"),
                    item(4, 950, 2000, "kernel"),    // ends right of the window
                    item(5, 3000, 4000, "kernel")};  // outside
  lanes[1].items = {item(6, 0, 1000, "memset")};
  const TimelineGeometry g{0, 1000, 100.0};  // 10 ns per px
  const auto items = layoutGpuItems(lanes, g);
  ASSERT_EQ(items.size(), 5u);
  EXPECT_EQ(items[0], (GpuDrawItem{0, 0, -1.0, 10.0}));
  EXPECT_EQ(items[1], (GpuDrawItem{0, 1, 20.0, 21.0}));
  EXPECT_EQ(items[2], (GpuDrawItem{0, 2, 40.0, 90.0}));
  EXPECT_EQ(items[3], (GpuDrawItem{0, 3, 95.0, 101.0}));
  EXPECT_EQ(items[4], (GpuDrawItem{1, 0, 0.0, 100.0}));
}

TEST(GpuTimeline, HitTestFindsTheItemUnderX) {
  std::vector<storage::GpuLane> lanes(2);
  lanes[0].items = {item(1, 0, 100, "kernel"), item(2, 200, 201, "kernel"),
                    item(3, 400, 900, "memcpy")};
  lanes[1].items = {item(4, 0, 1000, "memset")};
  const auto items = layoutGpuItems(lanes, {0, 1000, 100.0});
  auto at = [&](int lane, double x) {
    const GpuDrawItem* d = gpuItemAt(items, lane, x);
    return d ? lanes[size_t(d->lane)].items[size_t(d->item)].id.value : -1;
  };
  EXPECT_EQ(at(0, 0.0), 1);
  EXPECT_EQ(at(0, 9.99), 1);
  EXPECT_EQ(at(0, 10.0), -1);
  EXPECT_EQ(at(0, 20.5), 2);  // the widened 1 px item
  EXPECT_EQ(at(0, 60.0), 3);
  EXPECT_EQ(at(0, 95.0), -1);
  EXPECT_EQ(at(1, 50.0), 4);
  EXPECT_EQ(at(2, 50.0), -1);
  EXPECT_EQ(gpuItemAt({}, 0, 1.0), nullptr);
}

TEST(GpuTimeline, LabelsAndColours) {
  storage::GpuLaneItem k = item(1, 0, 10, "kernel");
  EXPECT_EQ(gpuItemLabel(k), "kernel_1(float*)");
  k.shortName = "kernel_1";
  EXPECT_EQ(gpuItemLabel(k), "kernel_1");
  EXPECT_EQ(gpuItemLabel(item(1, 0, 10, "kernel", 12)), "12 kernels");
  EXPECT_EQ(gpuItemLabel(item(1, 0, 10, "memcpy", 3)), "3 copies");
  EXPECT_EQ(gpuItemLabel(item(1, 0, 10, "mixed", 5)), "5 GPU slices");
  EXPECT_NE(gpuCategoryColor("kernel"), gpuCategoryColor("memcpy"));
  EXPECT_NE(gpuCategoryColor("memcpy"), gpuCategoryColor("memset"));
  EXPECT_NE(gpuCategoryColor("api"), gpuCategoryColor("kernel"));
  EXPECT_NE(gpuCategoryColor("sync"), gpuCategoryColor("mixed"));
  EXPECT_EQ(gpuCategoryColor("mixed"), gpuCategoryColor("nvtx"));  // anything else: grey
  EXPECT_EQ(gpuItemLabel(item(1, 0, 10, "api", 4)), "4 API calls");
  storage::TrackRow track{TrackId(3), "GPU 1 stream 7", "stream", 1, 7};
  EXPECT_EQ(gpuLaneLabel(track), "rank 1 · GPU 1 stream 7");
  track.rank = 0;
  EXPECT_EQ(gpuLaneLabel(track), "GPU 1 stream 7");
}

storage::GpuSliceDetails kernelDetails() {
  storage::GpuSliceDetails d;
  d.slice = {SliceId(9), TrackId(2), 1'500, 2'000, "gemm<bf16>(Args)", "kernel", 4, 1, 77, 0};
  d.track = {TrackId(2), "GPU 0 stream 7", "stream", 0, 7};
  d.kernel = storage::GpuKernelRow{0, 7,  64,   2,    1,         256,    1,
                                   1, 96, 2048, 4096, "_Z4gemm", "gemm", "experts.fwd"};
  d.apiCall =
      storage::SliceRow{SliceId(8), TrackId(1), 1'000, 300, "cudaLaunchKernel", "api", 4, 1, 77, 0};
  d.apiDetails = storage::CudaApiRow{"runtime", 211, 4242, 0, "experts.fwd"};
  return d;
}

TEST(GpuDetailsModel, KernelDetailsAndExpertLoadPassModelTester) {
  GpuDetailsModel model;
  testing::ModelCheck check(&model);
  EXPECT_TRUE(model.isEmpty());
  storage::LayerLoad load;
  load.step = 4;
  load.layer = 1;
  load.tokens = {10, 50, 20, 0};
  load.dropped = {0, 3, 0, 0};
  load.totalTokens = 80;
  load.hottestExpert = 1;
  load.maxOverMean = 2.5;
  model.setDetails(kernelDetails(), load, 1'000);
  EXPECT_TRUE(check.failures().isEmpty()) << check.failures().join('\n').toStdString();
  EXPECT_EQ(model.columnCount(), 2);
  EXPECT_EQ(model.value("name"), "gemm<bf16>(Args)");
  EXPECT_EQ(model.value("grid"), "64 × 2 × 1");
  EXPECT_EQ(model.value("block"), "256 × 1 × 1");
  EXPECT_EQ(model.value("threads"), "32768");
  EXPECT_EQ(model.value("registers / thread"), "96");
  EXPECT_EQ(model.value("stream"), "GPU 0 stream 7");
  EXPECT_EQ(model.value("step"), "4");
  EXPECT_EQ(model.value("layer"), "1");
  EXPECT_EQ(model.value("phase"), "experts.fwd");
  EXPECT_EQ(model.value("correlation id"), "77");
  EXPECT_TRUE(model.value("launched by").startsWith("cudaLaunchKernel"))
      << model.value("launched by").toStdString();
  EXPECT_EQ(model.value("API thread"), "4242");
  EXPECT_EQ(model.value("max / mean"), "2.50");
  EXPECT_EQ(model.value("hottest expert"), "1 (50 tokens)");
  EXPECT_EQ(model.value("expert 1"), "50 (3 dropped)");
  EXPECT_EQ(model.value("expert 3"), "0");
  // Section rows are marked and bold.
  bool sawLoadSection = false;
  for (int r = 0; r < model.rowCount(); ++r) {
    const QModelIndex index = model.index(r, 0);
    if (model.data(index, GpuDetailsModel::kSectionRole).toBool() &&
        model.data(index, Qt::DisplayRole).toString() == "Expert load · step 4 · layer 1") {
      sawLoadSection = true;
      EXPECT_TRUE(model.data(index, Qt::FontRole).isValid());
    }
  }
  EXPECT_TRUE(sawLoadSection);
  // A copy: bytes, kind and bandwidth instead of launch geometry.
  storage::GpuSliceDetails copy = kernelDetails();
  copy.kernel.reset();
  copy.slice.category = "memcpy";
  copy.memcpy = storage::GpuMemcpyRow{0, 7, 1, 2, 3, 8'000, "step"};
  copy.apiCall.reset();
  model.setDetails(copy, std::nullopt, 0);
  EXPECT_EQ(model.value("kind"), "HtoD");
  EXPECT_EQ(model.value("bandwidth"), "4.00 GB/s");
  EXPECT_EQ(model.value("grid"), "");
  EXPECT_EQ(model.value("launched by"), "not captured");
  model.clear();
  EXPECT_TRUE(model.isEmpty());
  EXPECT_TRUE(check.failures().isEmpty()) << check.failures().join('\n').toStdString();
}

class GpuDocument : public ::testing::Test {
 protected:
  void SetUp() override {
    const QString file = m_dir.filePath(QStringLiteral("gpu.sqlite"));
    auto trace = testing::TestTrace::create(file.toStdString(), 2, 4);
    ASSERT_TRUE(trace.isOk()) << trace.status().toString();
    trace.value()->setGpuActivity(true);
    for (int s = 0; s < 3; ++s) ASSERT_TRUE(trace.value()->addStep(s).isOk());
    ASSERT_TRUE(trace.value()->finish().isOk());
    m_slicesPerStep = trace.value()->slicesPerStep();
    ASSERT_TRUE(m_doc.open(file).isOk());
  }
  QTemporaryDir m_dir;
  TraceDocument m_doc;
  int64_t m_slicesPerStep = 0;
};

TEST_F(GpuDocument, HostTimelineLeavesGpuSlicesToTheLanes) {
  EXPECT_EQ(m_doc.timeline().sliceCount(), 3 * m_slicesPerStep);
  // The API thread's lane first, then the streams.
  ASSERT_EQ(m_doc.gpuLaneTracks().size(), 3u);
  EXPECT_EQ(m_doc.gpuLaneTracks()[0].kind, storage::kTrackKindCudaApi);
  EXPECT_EQ(m_doc.gpuLaneTracks()[1].name, "GPU 0 stream 7");
  EXPECT_EQ(m_doc.gpuLaneTracks()[2].name, "GPU 0 stream 13");
  // Step 1 zoomed in (1 ns buckets): 2 gemm + 20 elementwise kernels on stream 7; memcpy and
  // memset on stream 13.
  const int64_t step1 = testing::TestTrace::kOriginNs + testing::TestTrace::kStepNs;
  auto lanes = m_doc.gpuLanes({step1, step1 + testing::TestTrace::kStepNs},
                              int(testing::TestTrace::kStepNs));
  ASSERT_TRUE(lanes.isOk()) << lanes.status().toString();
  ASSERT_EQ(lanes->size(), 3u);
  EXPECT_FALSE((*lanes)[0].items.empty());  // the launches
  EXPECT_EQ((*lanes)[0].items[0].category, storage::kCategoryApi);
  EXPECT_EQ((*lanes)[1].items.size(), 22u);
  EXPECT_EQ((*lanes)[2].items.size(), 2u);
  EXPECT_EQ((*lanes)[1].items[0].shortName, "grouped_gemm_fwd_kernel");
  // The whole run on 100 px: the elementwise bursts fold.
  lanes = m_doc.gpuLanes(m_doc.timeBounds(), 100);
  ASSERT_TRUE(lanes.isOk());
  int folded = 0;
  for (const auto& i : (*lanes)[1].items) folded += i.isFolded() ? 1 : 0;
  EXPECT_GE(folded, 3);
}

TEST_F(GpuDocument, SelectingAKernelShowsLaunchAndExpertLoad) {
  const int64_t step2 = testing::TestTrace::kOriginNs + 2 * testing::TestTrace::kStepNs;
  auto lanes = m_doc.gpuLanes({step2, step2 + testing::TestTrace::kStepNs}, 100000);
  ASSERT_TRUE(lanes.isOk());
  const storage::GpuLaneItem& gemm = (*lanes)[1].items[1];  // layer 1
  ASSERT_EQ(gemm.layer, 1);
  testing::ModelCheck check(m_doc.gpuDetailsModel());
  ASSERT_TRUE(m_doc.selectGpuSlice(gemm.id).isOk());
  GpuDetailsModel* model = m_doc.gpuDetailsModel();
  EXPECT_EQ(model->value("grid"), "64 × 2 × 1");
  EXPECT_EQ(model->value("step"), "2");
  EXPECT_EQ(model->value("layer"), "1");
  EXPECT_EQ(model->value("correlation id"), "2011");
  EXPECT_TRUE(model->value("launched by").startsWith("cudaLaunchKernel"));
  EXPECT_EQ(model->value("expert 0"), QString::number(testing::TestTrace::tokensFor(2, 1, 0)));
  EXPECT_EQ(model->value("hottest expert").section(' ', 0, 0), "0");
  // A host slice id is not GPU work: the model empties.
  ASSERT_TRUE(m_doc.selectGpuSlice(SliceId(1)).isOk());
  EXPECT_TRUE(model->isEmpty());
  EXPECT_TRUE(check.failures().isEmpty()) << check.failures().join('\n').toStdString();
  m_doc.close();
  EXPECT_TRUE(m_doc.gpuLaneTracks().empty());
}

}  // namespace
}  // namespace moewb::gui
