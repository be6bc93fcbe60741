// Flow arrows from a CUDA API call to the GPU work it launched (timeline_flow.h,
// timeline_view_flows.cpp): the arrow's geometry, jump window and delay text as pure functions;
// findFlow on traces written through the storage writer (TestTrace's GPU rows, and odd rows: a
// correlation id shared across ranks, two calls with one id, extreme times); and a real
// TimelineView driven with QTest: a click on a launch draws the arrow to its kernel, a click on a
// kernel back to its launch, ] and [ and a click on the arrow jump and move the view, a slice
// without a partner draws nothing.
#include "moewb/gui/timeline_flow.h"

#include <gtest/gtest.h>

#include <QApplication>
#include <QElapsedTimer>
#include <QImage>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QTest>
#include <QThread>
#include <limits>
#include <map>

#include "moewb/gui/trace_document.h"
#include "moewb/storage/gpu_rows.h"
#include "moewb/storage/trace_reader.h"
#include "moewb/storage/trace_writer.h"
#include "test_trace.h"
#include "theme.h"
#include "timeline_view.h"
#include "window_wait.h"

namespace moewb::gui {
namespace {

using testing::TestTrace;

TimelineFlow makeFlow(int64_t launchNs, int64_t workNs) {
  TimelineFlow f;
  f.correlationId = 7;
  f.launch = {SliceId(1), TrackId(1), launchNs, launchNs + 5'000, "cudaLaunchKernel", "api", 0};
  f.work = {SliceId(2), TrackId(2), workNs, workNs + 100'000, "gemm", "kernel", 0};
  return f;
}

TEST(TimelineFlowGeometry, ArrowInsideGoesFromLaunchStartToWorkStart) {
  const TimelineGeometry g{1'000'000, 2'000'000, 1000};  // 1 us per px
  const FlowArrow a = layoutFlowArrow(makeFlow(1'100'000, 1'300'000), g, 50, 80);
  ASSERT_TRUE(a.visible);
  EXPECT_DOUBLE_EQ(a.x0, 100);
  EXPECT_DOUBLE_EQ(a.y0, 50);
  EXPECT_DOUBLE_EQ(a.x1, 300);
  EXPECT_DOUBLE_EQ(a.y1, 80);
  EXPECT_EQ(a.launchSide, FlowSide::kInside);
  EXPECT_EQ(a.workSide, FlowSide::kInside);
  EXPECT_NEAR(flowArrowDistance(a, 200, 65), 0, 1e-9);   // the midpoint
  EXPECT_NEAR(flowArrowDistance(a, 100, 40), 10, 1e-9);  // 10 px above the launch end
  EXPECT_GT(flowArrowDistance(a, 600, 65), 250);
}

TEST(TimelineFlowGeometry, EndOffScreenIsClippedToTheEdgeAlongTheLine) {
  const TimelineGeometry g{1'000'000, 2'000'000, 1000};
  // Work 500 px beyond the right edge: the arrow ends at x = 1000, 2/3 of the way down.
  FlowArrow a = layoutFlowArrow(makeFlow(1'000'000 + 0, 2'500'000), g, 0, 150);
  ASSERT_TRUE(a.visible);
  EXPECT_EQ(a.workSide, FlowSide::kRight);
  EXPECT_EQ(a.launchSide, FlowSide::kInside);
  EXPECT_DOUBLE_EQ(a.x1, 1000);
  EXPECT_NEAR(a.y1, 100, 1e-9);
  // Launch 100 px before the left edge, work at x = 100: starts at x = 0, half-way down.
  a = layoutFlowArrow(makeFlow(900'000, 1'100'000), g, 0, 100);
  ASSERT_TRUE(a.visible);
  EXPECT_EQ(a.launchSide, FlowSide::kLeft);
  EXPECT_DOUBLE_EQ(a.x0, 0);
  EXPECT_NEAR(a.y0, 50, 1e-9);
  // Both ends beyond the same edge: nothing to draw, nothing to hit.
  a = layoutFlowArrow(makeFlow(2'100'000, 2'300'000), g, 0, 100);
  EXPECT_FALSE(a.visible);
  EXPECT_EQ(a.launchSide, FlowSide::kRight);
  EXPECT_TRUE(std::isinf(flowArrowDistance(a, 0, 0)));
  // Ends on both sides: the line crosses the whole plot.
  a = layoutFlowArrow(makeFlow(0, 3'000'000), g, 0, 300);
  ASSERT_TRUE(a.visible);
  EXPECT_DOUBLE_EQ(a.x0, 0);
  EXPECT_DOUBLE_EQ(a.x1, 1000);
  EXPECT_NEAR(a.y0, 100, 1e-9);
  EXPECT_NEAR(a.y1, 200, 1e-9);
}

TEST(TimelineFlowGeometry, JumpKeepsShowsBothOrCentresOnTheTarget) {
  const TimelineFlow f = makeFlow(1'100'000, 1'300'000);  // spans 1.1 .. 1.4 ms
  // Both ends inside: the window stays.
  const TimelineGeometry wide{1'000'000, 2'000'000, 1000};
  EXPECT_EQ(flowJumpRange(f, f.work, wide), (TimeRange{1'000'000, 2'000'000}));
  // A 1 ms window elsewhere: same length, centred on the ends (1.25 ms).
  const TimelineGeometry away{5'000'000, 6'000'000, 1000};
  EXPECT_EQ(flowJumpRange(f, f.work, away), (TimeRange{750'000, 1'750'000}));
  // A 100 us window on the launch: zoomed out to both ends with 10% margins (300 us * 1.2).
  const TimelineGeometry narrow{1'090'000, 1'190'000, 1000};
  EXPECT_EQ(flowJumpRange(f, f.work, narrow), (TimeRange{1'070'000, 1'430'000}));
  // A 10 us window: both would zoom out 36x (> kFlowMaxJumpZoomOut), so the target's start is
  // centred instead.
  const TimelineGeometry tiny{1'095'000, 1'105'000, 1000};
  EXPECT_EQ(flowJumpRange(f, f.work, tiny), (TimeRange{1'295'000, 1'305'000}));
  const TimelineGeometry later{1'500'000, 1'510'000, 1000};
  EXPECT_EQ(flowJumpRange(f, f.launch, later), (TimeRange{1'095'000, 1'105'000}));
}

TEST(TimelineFlowGeometry, DelayTextAndSaturation) {
  EXPECT_EQ(flowDelayText(makeFlow(1'000'000, 2'840'000)), "launched 1.84 ms before it started");
  EXPECT_EQ(flowDelayText(makeFlow(1'003'000, 1'000'000)),
            "started 3.00 us before its launch call (the clocks disagree)");
  // Times from an untrusted file: the delay saturates instead of overflowing.
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
  TimelineFlow odd;
  odd.launch.startNs = kMin;
  odd.work.startNs = kMax;
  EXPECT_EQ(odd.queueDelayNs(), kMax);
  std::swap(odd.launch.startNs, odd.work.startNs);
  EXPECT_EQ(odd.queueDelayNs(), kMin);
  EXPECT_EQ(flowDelayText(odd).rfind("started ", 0), 0u);
  // Launch far right, work far left: they straddle the plot, so the line crosses all of it.
  const FlowArrow a = layoutFlowArrow(odd, {0, 1'000, 100}, 0, 10);
  ASSERT_TRUE(a.visible);
  EXPECT_DOUBLE_EQ(a.x0, 100);
  EXPECT_DOUBLE_EQ(a.x1, 0);
  EXPECT_EQ(a.launchSide, FlowSide::kRight);
  EXPECT_EQ(a.workSide, FlowSide::kLeft);
}

// The GPU slices of a trace by (category, correlation id), and by name for the uncorrelated.
struct GpuSlices {
  std::map<std::pair<std::string, int64_t>, storage::SliceRow> byCorrelation;
  std::vector<storage::SliceRow> all;
};

GpuSlices readGpuSlices(storage::TraceReader& reader) {
  GpuSlices out;
  const Status st = reader.forEachSlice([&](const storage::SliceRow& s) {
    out.all.push_back(s);
    if (s.correlationId != 0 && !out.byCorrelation.contains({s.category, s.correlationId})) {
      out.byCorrelation[{s.category, s.correlationId}] = s;
    }
    return true;
  });
  EXPECT_TRUE(st.isOk()) << st.toString();
  return out;
}

FlowEnd endOfRow(const storage::SliceRow& s) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  const int64_t endNs = s.startNs > kMax - s.durNs ? kMax : s.startNs + s.durNs;
  return {s.id, s.track, s.startNs, endNs, s.name, s.category, s.step};
}

class TimelineFlowTrace : public ::testing::Test {
 protected:
  void SetUp() override {
    m_file = m_dir.filePath(QStringLiteral("gpu.sqlite"));
    auto trace = TestTrace::create(m_file.toStdString(), 4, 8);
    ASSERT_TRUE(trace.isOk()) << trace.status().toString();
    trace.value()->setGpuActivity(true);
    for (int s = 0; s < 3; ++s) ASSERT_TRUE(trace.value()->addStep(s).isOk());
    ASSERT_TRUE(trace.value()->finish().isOk());
    theme::apply(*qApp);
  }
  QTemporaryDir m_dir;
  QString m_file;
};

TEST_F(TimelineFlowTrace, FindFlowLinksLaunchesAndWorkByCorrelationId) {
  auto reader = storage::TraceReader::open(m_file.toStdString());
  ASSERT_TRUE(reader.isOk()) << reader.status().toString();
  const GpuSlices slices = readGpuSlices(**reader);
  for (int64_t corr : {int64_t(1021), int64_t(2001), int64_t(999)}) {  // kernels, a memcpy
    const bool copy = corr % 1000 == 999;
    const storage::SliceRow& api = slices.byCorrelation.at({"api", corr});
    const storage::SliceRow& work = slices.byCorrelation.at({copy ? "memcpy" : "kernel", corr});
    // API call -> its work.
    auto forward = findFlow(**reader, endOfRow(api));
    ASSERT_TRUE(forward.isOk()) << forward.status().toString();
    ASSERT_TRUE(forward->has_value()) << corr;
    const TimelineFlow& f = **forward;
    EXPECT_EQ(f.correlationId, corr);
    EXPECT_EQ(f.launch.slice, api.id);
    EXPECT_EQ(f.work.slice, work.id);
    EXPECT_EQ(f.work.startNs, work.startNs);
    EXPECT_EQ(f.work.endNs, work.startNs + work.durNs);
    EXPECT_EQ(f.work.name, work.name);
    EXPECT_EQ(f.launch.name, copy ? "cudaMemcpyAsync" : "cudaLaunchKernel");
    EXPECT_EQ(f.queueDelayNs(), 10'000);  // TestTrace: the work starts 10 us after its launch
    // Work -> the call that launched it: the same flow.
    auto back = findFlow(**reader, endOfRow(work));
    ASSERT_TRUE(back.isOk());
    ASSERT_TRUE(back->has_value());
    EXPECT_EQ(**back, f);
  }
  // No partner: the memset and the elementwise kernels (correlation id 0), host slices, a slice
  // id that does not exist.
  int checked = 0;
  for (const storage::SliceRow& s : slices.all) {
    if (s.correlationId != 0) continue;
    auto none = findFlow(**reader, endOfRow(s));
    ASSERT_TRUE(none.isOk());
    EXPECT_FALSE(none->has_value()) << s.name;
    ++checked;
  }
  EXPECT_GT(checked, 3 * 20);
  FlowEnd missing;
  missing.slice = SliceId(987654);
  auto none = findFlow(**reader, missing);
  ASSERT_TRUE(none.isOk());
  EXPECT_FALSE(none->has_value());
}

// Odd rows an untrusted or merged trace may hold, written through the storage writer.
TEST(TimelineFlowOdd, RanksStaySeparateAndDuplicatesAndExtremesDoNotBreakIt) {
  using namespace storage;
  QTemporaryDir dir;
  const std::string path = dir.filePath(QStringLiteral("odd.sqlite")).toStdString();
  WriterOptions options;
  options.overwrite = true;
  auto writer = TraceWriter::create(path, options);
  ASSERT_TRUE(writer.isOk()) << writer.status().toString();
  TraceWriter& w = **writer;
  const TrackId api0 = w.addTrack({TrackId(), "CUDA API thread", kTrackKindCudaApi, 0, 1});
  const TrackId stream0 = w.addTrack({TrackId(), "GPU 0 stream 7", kTrackKindStream, 0, 7});
  const TrackId api1 = w.addTrack({TrackId(), "CUDA API thread", kTrackKindCudaApi, 1, 1});
  const TrackId stream1 = w.addTrack({TrackId(), "GPU 1 stream 7", kTrackKindStream, 1, 7});
  const GpuKernelRow k{0, 7, 1, 1, 1, 32, 1, 1, 16, 0, 0, "_Z1kv", "k", ""};
  auto call = [&](TrackId t, int64_t at, const char* name, int64_t corr) {
    w.addCudaApi({SliceId(), t, at, 1'000, name, kCategoryApi, 0, -1, corr, 0},
                 {"runtime", 211, 1, 0, ""});
  };
  auto kernel = [&](TrackId t, int64_t at, int64_t dur, const char* name, int64_t corr) {
    w.addGpuKernel({SliceId(), t, at, dur, name, kCategoryKernel, 0, -1, corr, 0}, k);
  };
  call(api1, 1'000, "cudaLaunchKernel", 77);     // rank 1's call with id 77 ...
  kernel(stream0, 5'000, 100, "rank0_k77", 77);  // ... and rank 0's kernel with id 77
  call(api0, 10'000, "cudaLaunchKernel", 5);     // two calls with id 5 on rank 0
  call(api0, 12'000, "cudaLaunchKernel", 5);
  kernel(stream0, 20'000, 100, "k5", 5);
  call(api1, 30'000, "cudaLaunchKernel", -3);  // a negative id, on rank 1
  kernel(stream1, 31'000, std::numeric_limits<int64_t>::max(), "huge", -3);
  ASSERT_TRUE(w.close().isOk());

  auto reader = TraceReader::open(path);
  ASSERT_TRUE(reader.isOk()) << reader.status().toString();
  const GpuSlices slices = readGpuSlices(**reader);
  auto named = [&](const std::string& name, int nth = 0) {
    for (const SliceRow& s : slices.all) {
      if (s.name == name && nth-- == 0) return endOfRow(s);
    }
    ADD_FAILURE() << "no slice " << name;
    return FlowEnd{};
  };
  // Id 77 on two ranks: no flow either way (correlation ids are per process).
  for (const FlowEnd& end : {named("rank0_k77"), named("cudaLaunchKernel", 0)}) {
    auto flow = findFlow(**reader, end);
    ASSERT_TRUE(flow.isOk());
    EXPECT_FALSE(flow->has_value()) << end.name << " " << end.track.value;
  }
  // Two calls with id 5: the kernel links to the first; the second, when clicked, still gets
  // its arrow to the kernel (it is the launch end, not the first call).
  auto fromKernel = findFlow(**reader, named("k5"));
  ASSERT_TRUE(fromKernel.isOk() && fromKernel->has_value());
  EXPECT_EQ((*fromKernel)->launch.startNs, 10'000);
  const FlowEnd second = named("cudaLaunchKernel", 2);
  ASSERT_EQ(second.startNs, 12'000);
  auto fromSecond = findFlow(**reader, second);
  ASSERT_TRUE(fromSecond.isOk() && fromSecond->has_value());
  EXPECT_EQ((*fromSecond)->launch.slice, second.slice);
  EXPECT_EQ((*fromSecond)->work.name, "k5");
  // A negative id links within rank 1; the kernel's end saturates instead of overflowing.
  auto huge = findFlow(**reader, named("huge"));
  ASSERT_TRUE(huge.isOk() && huge->has_value());
  EXPECT_EQ((*huge)->rank, 1);
  EXPECT_EQ((*huge)->launch.startNs, 30'000);
  EXPECT_EQ((*huge)->work.endNs, std::numeric_limits<int64_t>::max());
}

// Runs the event loop until `view` has read the flow of its selection (true) or 10 s passed.
bool waitForFlow(const TimelineView& view) {
  QElapsedTimer waited;
  waited.start();
  QApplication::processEvents();
  while (view.flowPending()) {
    if (waited.elapsed() > 10'000) return false;
    QApplication::processEvents(QEventLoop::AllEvents, 10);
    QThread::msleep(1);
  }
  QApplication::processEvents();
  return true;
}

// Widget point in the middle of the unfolded item of GPU lane `lane` starting at `startNs`.
QPoint itemPoint(const TimelineView& view, int lane, int64_t startNs) {
  for (const GpuDrawItem& d : view.gpuItems()) {
    const auto& item = view.gpuLanes()[size_t(d.lane)].items[size_t(d.item)];
    if (d.lane != lane || item.isFolded() || item.startNs != startNs) continue;
    const QRect r = view.gpuLaneRect(lane);
    return {r.left() + int((d.x0 + d.x1) / 2), r.center().y()};
  }
  return {-1, -1};
}

TEST_F(TimelineFlowTrace, ClickLaunchDrawsArrowToItsKernelAndBack) {
  TraceDocument doc;
  ASSERT_TRUE(doc.open(m_file).isOk());
  TimelineView view;
  view.setDocument(&doc);
  view.resize(1150, 420);
  view.show();
  ASSERT_TRUE(testing::waitForWindowData(view));
  ASSERT_EQ(view.gpuLanes().size(), 3u);  // the API thread, streams 7 and 13
  // Step 1, layer 2: cudaLaunchKernel at +700 us (5 us), its kernel at +710 us (200 us).
  const int64_t step1 = TestTrace::kOriginNs + TestTrace::kStepNs;
  const int64_t launchNs = step1 + 100'000 + 2 * TestTrace::kGpuLayerStrideNs;
  const int64_t kernelNs = step1 + TestTrace::kGpuKernelOffsetNs + 2 * TestTrace::kGpuLayerStrideNs;
  view.showTimeRange({launchNs - 20'000, kernelNs + 230'000});
  ASSERT_TRUE(testing::waitForWindowData(view));
  const QPoint launch = itemPoint(view, 0, launchNs);
  ASSERT_GE(launch.x(), 0);
  QSignalSpy flowSpy(&view, &TimelineView::flowChanged);
  QTest::mouseClick(&view, Qt::LeftButton, Qt::NoModifier, launch);
  ASSERT_TRUE(waitForFlow(view));
  ASSERT_TRUE(view.flow().has_value());
  EXPECT_GE(flowSpy.count(), 1);
  const TimelineFlow flow = *view.flow();
  EXPECT_EQ(flow.correlationId, 1021);
  EXPECT_EQ(flow.launch.startNs, launchNs);
  EXPECT_EQ(flow.work.startNs, kernelNs);
  EXPECT_EQ(flow.work.track, doc.gpuLaneTracks()[1].id);  // stream 7
  EXPECT_NE(flow.work.name.find("grouped_gemm_fwd_kernel"), std::string::npos);
  // The arrow leaves the launch lane's bottom at the launch and reaches the kernel's lane top.
  const FlowArrow arrow = view.flowArrow();
  ASSERT_TRUE(arrow.visible);
  EXPECT_NEAR(arrow.x0, view.gpuLaneRect(0).left() + view.timeGeometry().xOf(launchNs), 1.0);
  EXPECT_NEAR(arrow.x1, view.gpuLaneRect(1).left() + view.timeGeometry().xOf(kernelNs), 1.0);
  EXPECT_TRUE(view.gpuLaneRect(0).contains(QPoint(int(arrow.x0), int(arrow.y0))));
  EXPECT_TRUE(view.gpuLaneRect(1).contains(QPoint(int(arrow.x1), int(arrow.y1))));
  // It is painted: an accent-coloured pixel on the line between the lanes.
  const QImage image = view.grab().toImage();
  const QColor accent = theme::accent();
  bool painted = false;
  const int mx = int((arrow.x0 + arrow.x1) / 2), my = int((arrow.y0 + arrow.y1) / 2);
  for (int dx = -2; dx <= 2; ++dx) {
    for (int dy = -2; dy <= 2; ++dy) {
      const QColor c = image.pixelColor(mx + dx, my + dy);
      const int distance = std::abs(c.red() - accent.red()) + std::abs(c.green() - accent.green()) +
                           std::abs(c.blue() - accent.blue());
      painted |= distance < 40;
    }
  }
  EXPECT_TRUE(painted);
  // Hovering the kernel tells the queueing delay.
  EXPECT_NE(flowDelayText(flow).find("launched 10.0 us before it started"), std::string::npos);

  // A click on empty lane space clears the flow; a click on the kernel finds the launch.
  QTest::mouseClick(&view, Qt::LeftButton, Qt::NoModifier,
                    QPoint(view.gpuLaneRect(2).right() - 2, view.gpuLaneRect(0).center().y()));
  ASSERT_TRUE(waitForFlow(view));
  EXPECT_FALSE(view.flow().has_value());
  EXPECT_FALSE(view.flowArrow().visible);
  const QPoint kernel = itemPoint(view, 1, kernelNs);
  ASSERT_GE(kernel.x(), 0);
  QTest::mouseClick(&view, Qt::LeftButton, Qt::NoModifier, kernel);
  ASSERT_TRUE(waitForFlow(view));
  ASSERT_TRUE(view.flow().has_value());
  EXPECT_EQ(*view.flow(), flow);
  ASSERT_TRUE(view.selectedGpuSlice().has_value());
  EXPECT_EQ(*view.selectedGpuSlice(), flow.work.slice);

  // [ selects the launch (as a click would); ] back to the kernel.
  QSignalSpy gpuSpy(&view, &TimelineView::gpuSliceActivated);
  QTest::keyClick(&view, Qt::Key_BracketLeft);
  ASSERT_EQ(gpuSpy.count(), 1);
  EXPECT_EQ(gpuSpy.at(0).at(0).toLongLong(), flow.launch.slice.value);
  EXPECT_EQ(*view.selectedGpuSlice(), flow.launch.slice);
  EXPECT_EQ(view.flow(), flow);  // the same flow, no new read
  QTest::keyClick(&view, Qt::Key_BracketRight);
  EXPECT_EQ(*view.selectedGpuSlice(), flow.work.slice);
}

TEST_F(TimelineFlowTrace, JumpMovesTheViewAndClickOnTheArrowFollowsIt) {
  TraceDocument doc;
  ASSERT_TRUE(doc.open(m_file).isOk());
  TimelineView view;
  view.setDocument(&doc);
  view.resize(1150, 420);
  view.show();
  ASSERT_TRUE(testing::waitForWindowData(view));
  // Step 2, layer 0: zoomed to 9 us around the launch, so the kernel (10 us later) is off-screen.
  const int64_t step2 = TestTrace::kOriginNs + 2 * TestTrace::kStepNs;
  const int64_t launchNs = step2 + 100'000, kernelNs = step2 + TestTrace::kGpuKernelOffsetNs;
  view.showTimeRange({launchNs - 2'000, launchNs + 7'000});
  ASSERT_TRUE(testing::waitForWindowData(view));
  const QPoint launch = itemPoint(view, 0, launchNs);
  ASSERT_GE(launch.x(), 0);
  QTest::mouseClick(&view, Qt::LeftButton, Qt::NoModifier, launch);
  ASSERT_TRUE(waitForFlow(view));
  ASSERT_TRUE(view.flow().has_value());
  EXPECT_EQ(view.flow()->correlationId, 2001);
  // The arrow runs to the right edge, where the kernel is.
  FlowArrow arrow = view.flowArrow();
  ASSERT_TRUE(arrow.visible);
  EXPECT_EQ(arrow.workSide, FlowSide::kRight);
  EXPECT_NEAR(arrow.x1, view.gpuLaneRect(0).right() + 1, 1.0);
  // ] selects the kernel; showing both ends would zoom out 23x, so the view keeps its 9 us and
  // centres the kernel's start, the arrow coming in from the left edge.
  QTest::keyClick(&view, Qt::Key_BracketRight);
  EXPECT_EQ(*view.selectedGpuSlice(), view.flow()->work.slice);
  EXPECT_EQ(view.timeGeometry().durNs(), 9'000);
  EXPECT_EQ(view.timeGeometry().startNs, kernelNs - 4'500);
  ASSERT_TRUE(testing::waitForWindowData(view));
  arrow = view.flowArrow();
  ASSERT_TRUE(arrow.visible);
  EXPECT_EQ(arrow.workSide, FlowSide::kInside);
  EXPECT_EQ(arrow.launchSide, FlowSide::kLeft);
  // A 53 us window starting after the launch ended: a click on the arrow's visible part (over
  // empty lane space) goes to the launch, the end not selected, zooming out to show both.
  view.showTimeRange({launchNs + 7'000, launchNs + 60'000});
  ASSERT_TRUE(testing::waitForWindowData(view));
  arrow = view.flowArrow();
  ASSERT_TRUE(arrow.visible);
  EXPECT_EQ(arrow.launchSide, FlowSide::kLeft);
  QSignalSpy gpuSpy(&view, &TimelineView::gpuSliceActivated);
  QSignalSpy stepSpy(&view, &TimelineView::stepActivated);
  const QPoint onArrow(int((arrow.x0 + arrow.x1) / 2), int((arrow.y0 + arrow.y1) / 2));
  QTest::mouseClick(&view, Qt::LeftButton, Qt::NoModifier, onArrow);
  ASSERT_EQ(gpuSpy.count(), 1);
  EXPECT_EQ(gpuSpy.at(0).at(0).toLongLong(), view.flow()->launch.slice.value);
  ASSERT_EQ(stepSpy.count(), 1);
  EXPECT_EQ(stepSpy.at(0).at(0).toLongLong(), 2);
  EXPECT_LE(view.timeGeometry().startNs, launchNs);
  EXPECT_GE(view.timeGeometry().endNs, kernelNs + TestTrace::kGpuKernelNs);
  EXPECT_EQ(*view.selectedGpuSlice(), view.flow()->launch.slice);
}

TEST_F(TimelineFlowTrace, SliceWithoutPartnerDrawsNoArrow) {
  TraceDocument doc;
  ASSERT_TRUE(doc.open(m_file).isOk());
  TimelineView view;
  view.setDocument(&doc);
  view.resize(1150, 420);
  view.show();
  ASSERT_TRUE(testing::waitForWindowData(view));
  // Step 0's memset on stream 13 (+1500 us, 10 us, correlation id 0).
  const int64_t memsetNs = TestTrace::kOriginNs + 1'500'000;
  view.showTimeRange({memsetNs - 5'000, memsetNs + 20'000});
  ASSERT_TRUE(testing::waitForWindowData(view));
  const QPoint memset = itemPoint(view, 2, memsetNs);
  ASSERT_GE(memset.x(), 0);
  QSignalSpy flowSpy(&view, &TimelineView::flowChanged);
  QTest::mouseClick(&view, Qt::LeftButton, Qt::NoModifier, memset);
  ASSERT_TRUE(view.selectedGpuSlice().has_value());
  ASSERT_TRUE(waitForFlow(view));
  EXPECT_EQ(flowSpy.count(), 1);  // read, and found nothing
  EXPECT_FALSE(view.flow().has_value());
  EXPECT_FALSE(view.flowArrow().visible);
  // ] and [ do nothing without a flow.
  QSignalSpy gpuSpy(&view, &TimelineView::gpuSliceActivated);
  const TimelineGeometry before = view.timeGeometry();
  QTest::keyClick(&view, Qt::Key_BracketRight);
  EXPECT_EQ(gpuSpy.count(), 0);
  EXPECT_EQ(view.timeGeometry(), before);
  EXPECT_FALSE(view.goToFlowEnd(false));
}

// A two-rank trace where both ranks use correlation id 5 (and rank 1's call 77 has no work on its
// own rank): the view links each call to its own rank's kernel.
TEST(TimelineFlowRanks, TheArrowStaysWithinItsRank) {
  using namespace storage;
  QTemporaryDir dir;
  const QString file = dir.filePath(QStringLiteral("ranks.sqlite"));
  {
    WriterOptions options;
    options.overwrite = true;
    auto writer = TraceWriter::create(file.toStdString(), options);
    ASSERT_TRUE(writer.isOk()) << writer.status().toString();
    TraceWriter& w = **writer;
    RunRow run;
    run.name = "ranks";
    run.backend = "cuda";
    run.worldSize = 2;
    run.status = "completed";
    w.addRun(run);
    const TrackId host = w.addTrack({TrackId(), "trainer thread", "thread", 0, 1});
    w.addSlice({SliceId(), host, 0, 40'000, "step", kCategoryStep, 0, -1, 0, 0});
    const TrackId api0 = w.addTrack({TrackId(), "CUDA API thread", kTrackKindCudaApi, 0, 1});
    const TrackId stream0 = w.addTrack({TrackId(), "GPU 0 stream 7", kTrackKindStream, 0, 7});
    const TrackId api1 = w.addTrack({TrackId(), "CUDA API thread", kTrackKindCudaApi, 1, 1});
    const TrackId stream1 = w.addTrack({TrackId(), "GPU 1 stream 7", kTrackKindStream, 1, 7});
    const GpuKernelRow k{0, 7, 1, 1, 1, 32, 1, 1, 16, 0, 0, "_Z1kv", "k", ""};
    auto call = [&](TrackId t, int64_t at, int64_t corr) {
      w.addCudaApi({SliceId(), t, at, 1'000, "cudaLaunchKernel", kCategoryApi, 0, -1, corr, 0},
                   {"runtime", 211, 1, 0, ""});
    };
    auto kernel = [&](TrackId t, int64_t at, const char* name, int64_t corr) {
      w.addGpuKernel({SliceId(), t, at, 3'000, name, kCategoryKernel, 0, -1, corr, 0}, k);
    };
    call(api1, 1'000, 77);
    kernel(stream0, 5'000, "rank0_k77", 77);
    call(api1, 10'000, 5);
    kernel(stream1, 20'000, "rank1_k5", 5);
    call(api0, 12'000, 5);
    kernel(stream0, 25'000, "rank0_k5", 5);
    ASSERT_TRUE(w.close().isOk());
  }
  TraceDocument doc;
  ASSERT_TRUE(doc.open(file).isOk());
  ASSERT_EQ(doc.gpuLaneTracks().size(), 4u);  // rank 0: API, stream; rank 1: API, stream
  ASSERT_EQ(doc.gpuLaneTracks()[2].rank, 1);
  TimelineView view;
  view.setDocument(&doc);
  view.resize(1150, 420);
  view.show();
  view.showTimeRange({0, 40'000});
  ASSERT_TRUE(testing::waitForWindowData(view));
  // Rank 1's call 5 -> rank 1's kernel, although rank 0 has a kernel with id 5 too.
  const QPoint call5 = itemPoint(view, 2, 10'000);
  ASSERT_GE(call5.x(), 0);
  QTest::mouseClick(&view, Qt::LeftButton, Qt::NoModifier, call5);
  ASSERT_TRUE(waitForFlow(view));
  ASSERT_TRUE(view.flow().has_value());
  EXPECT_EQ(view.flow()->rank, 1);
  EXPECT_EQ(view.flow()->work.name, "rank1_k5");
  EXPECT_EQ(view.flow()->work.track, doc.gpuLaneTracks()[3].id);
  const FlowArrow arrow = view.flowArrow();
  ASSERT_TRUE(arrow.visible);
  EXPECT_TRUE(view.gpuLaneRect(2).contains(QPoint(int(arrow.x0), int(arrow.y0))));
  EXPECT_TRUE(view.gpuLaneRect(3).contains(QPoint(int(arrow.x1), int(arrow.y1))));
  // Rank 1's call 77: the only kernel with id 77 ran on rank 0, so no arrow.
  const QPoint call77 = itemPoint(view, 2, 1'000);
  ASSERT_GE(call77.x(), 0);
  QTest::mouseClick(&view, Qt::LeftButton, Qt::NoModifier, call77);
  ASSERT_TRUE(waitForFlow(view));
  EXPECT_FALSE(view.flow().has_value());
  EXPECT_FALSE(view.flowArrow().visible);
}

}  // namespace
}  // namespace moewb::gui
