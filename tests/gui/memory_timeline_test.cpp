// Device-memory timeline: per-pixel resampling and stacking (max per column, carried levels,
// values before the window, category order), the hover readout, and TraceDocument's memory
// tracks and series on a real trace file.
#include "moewb/gui/memory_timeline.h"

#include <gtest/gtest.h>

#include <QTemporaryDir>

#include "moewb/gui/trace_document.h"
#include "test_trace.h"

namespace moewb::gui {
namespace {

using Bytes = std::vector<int64_t>;
using storage::MemorySeries;

// 10 columns of 10 ns over [0, 100).
const TimelineGeometry kG{0, 100, 10.0};

std::vector<MemorySeries> handSeries() {
  return {
      {TrackId(5), "activations", {{25, 50}, {27, 10}, {61, 0}}},
      {TrackId(5), "zeta", {{0, 3}}},
      {TrackId(9), "weights", {{50, 1}}},
      {TrackId(5), "weights", {{0, 100}}},
      {TrackId(5), "workspace", {{-5, 7}, {95, 0}}},
      {TrackId(5), "grads", {}},
  };
}

TEST(MemoryTimeline, CategoriesStackInAFixedOrder) {
  EXPECT_EQ(memoryCategoryOrder("weights"), 0);
  EXPECT_EQ(memoryCategoryOrder("grads"), 1);
  EXPECT_EQ(memoryCategoryOrder("optimizer"), 2);
  EXPECT_EQ(memoryCategoryOrder("activations"), 3);
  EXPECT_EQ(memoryCategoryOrder("workspace"), 4);
  EXPECT_EQ(memoryCategoryOrder("swap"), 5);
  const auto stacks = stackMemorySeries(handSeries(), kG);
  ASSERT_EQ(stacks.size(), 2u);
  EXPECT_EQ(stacks[0].track, TrackId(5));
  EXPECT_EQ(stacks[0].categories,
            (std::vector<std::string>{"weights", "grads", "activations", "workspace", "zeta"}));
  EXPECT_EQ(stacks[1].track, TrackId(9));
  EXPECT_EQ(stacks[1].categories, (std::vector<std::string>{"weights"}));
}

TEST(MemoryTimeline, ColumnsHoldTheLargestLevelAndCarryTheLast) {
  const auto stacks = stackMemorySeries(handSeries(), kG);
  const MemoryStack& s = stacks[0];
  ASSERT_EQ(s.columns(), 10);
  EXPECT_EQ(s.bytes[0], Bytes(10, 100));                      // weights from t = 0
  EXPECT_EQ(s.bytes[1], Bytes(10, 0));                        // grads: no points
  EXPECT_EQ(s.bytes[2], (Bytes{0, 0, 50, 10, 10, 10, 10, 0, 0, 0}));  // peak 50 kept in column 2
  EXPECT_EQ(s.bytes[3], (Bytes{7, 7, 7, 7, 7, 7, 7, 7, 7, 7}));  // level from before the window
  EXPECT_EQ(s.bytes[4], Bytes(10, 3));
  EXPECT_EQ(s.tops[2][2], 150);
  EXPECT_EQ(s.tops[4][2], 160);
  EXPECT_EQ(s.tops[4][3], 120);
  EXPECT_EQ(s.tops[4][9], 110);
  EXPECT_EQ(s.maxTotalBytes, 160);
  EXPECT_EQ(stacks[1].bytes[0], (Bytes{0, 0, 0, 0, 0, 1, 1, 1, 1, 1}));
  EXPECT_EQ(stacks[1].maxTotalBytes, 1);
}

TEST(MemoryTimeline, FractionalWidthsRoundTheColumnsUp) {
  const auto stacks = stackMemorySeries(handSeries(), {0, 100, 7.5});
  ASSERT_EQ(stacks[0].columns(), 8);
  // Column 7 covers [93.3, 106.7): workspace drops to 0 at 95, but 7 was in use in the column.
  EXPECT_EQ(stacks[0].bytes[3][7], 7);
  EXPECT_TRUE(stackMemorySeries({}, kG).empty());
}

TEST(MemoryTimeline, ReadoutListsTopBandFirstAndTheTotal) {
  const auto stacks = stackMemorySeries(handSeries(), kG);
  EXPECT_EQ(memoryColumnAt(stacks[0], -0.1), -1);
  EXPECT_EQ(memoryColumnAt(stacks[0], 0.0), 0);
  EXPECT_EQ(memoryColumnAt(stacks[0], 9.99), 9);
  EXPECT_EQ(memoryColumnAt(stacks[0], 10.0), -1);
  EXPECT_EQ(memoryReadout(stacks[0], 2),
            (std::vector<std::string>{"zeta 3 B", "workspace 7 B", "activations 50 B",
                                      "grads 0 B", "weights 100 B", "total 160 B"}));
  EXPECT_TRUE(memoryReadout(stacks[0], 10).empty());
}

TEST(MemoryTimeline, DocumentFindsMemoryTracksAndReadsTheirSeries) {
  QTemporaryDir dir;
  const std::string file = dir.filePath("device.sqlite").toStdString();
  {
    auto trace = testing::TestTrace::create(file, 1, 2);
    ASSERT_TRUE(trace.isOk()) << trace.status().toString();
    trace.value()->setDeviceMemory(true);
    for (int s = 0; s < 3; ++s) ASSERT_TRUE(trace.value()->addStep(s).isOk());
    ASSERT_TRUE(trace.value()->finish().isOk());
  }
  TraceDocument doc;
  ASSERT_TRUE(doc.open(QString::fromStdString(file)).isOk());
  ASSERT_EQ(doc.memoryTracks().size(), 1u);
  EXPECT_EQ(doc.memoryTracks()[0].name, "device memory");
  const TimeRange bounds = doc.timeBounds();
  auto series = doc.memorySeries(bounds, 600);
  ASSERT_TRUE(series.isOk()) << series.status().toString();
  ASSERT_EQ(series->size(), 4u);
  EXPECT_EQ(series->at(0).category, "activations");
  EXPECT_EQ(series->at(0).points.size(), 6u);  // +4 MiB and 0 per step, 3 steps
  const auto stacks = stackMemorySeries(*series, fitGeometry(bounds, 600));
  ASSERT_EQ(stacks.size(), 1u);
  EXPECT_EQ(stacks[0].maxTotalBytes, 29 * testing::TestTrace::kMiB);  // 8 + 16 + 4 + 1

  // A trace without device memory (CPU run): no tracks, no series.
  const std::string cpu = dir.filePath("cpu.sqlite").toStdString();
  {
    auto trace = testing::TestTrace::create(cpu, 1, 2);
    ASSERT_TRUE(trace.isOk());
    ASSERT_TRUE(trace.value()->addStep(0).isOk());
    ASSERT_TRUE(trace.value()->finish().isOk());
  }
  ASSERT_TRUE(doc.open(QString::fromStdString(cpu)).isOk());
  EXPECT_TRUE(doc.memoryTracks().empty());
  auto none = doc.memorySeries(doc.timeBounds(), 600);
  ASSERT_TRUE(none.isOk());
  EXPECT_TRUE(none->empty());
}

}  // namespace
}  // namespace moewb::gui
