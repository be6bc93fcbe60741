// The timeline's per-level summaries (timeline_summary.h): built by the load equal to what the
// slices give (count, dominant name, busy time per bucket and level), drawn like the slices,
// kept in a sidecar that the second open reads, and a stale, truncated, garbage or unwritable
// sidecar never trusted and never fatal.
#include "moewb/gui/timeline_summary.h"

#include <grp.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <QTemporaryDir>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>

#include "moewb/gui/trace_document.h"
#include "moewb/gui/trace_loader.h"
#include "moewb/storage/trace_bulk_reader.h"
#include "test_trace.h"
#include "../read_only_child.h"

namespace moewb::gui {
namespace {

using moewb::test::runWhereDirIsReadOnly;

namespace fs = std::filesystem;
using testing::TestTrace;

// What a load handed over: the slices with their names, and where the summary came.
struct Loaded {
  std::vector<LoadedSlice> slices;
  std::vector<std::string> names;  // by load name index
  std::unique_ptr<TimelineSummary> summary;
  bool summaryInHeader = false;  // read from the sidecar (else built by the load)
  int parts = 0;                 // parts after the first (a summary handed over as it grows)
  Status status;
};

Loaded load(const std::string& path, bool summaryFile = true) {
  Loaded out;
  TraceLoadOptions options;
  options.slicesPerChunk = 37;  // many chunks: the builder sees chunk edges
  options.summaryFile = summaryFile;
  std::atomic<bool> cancel{false};
  auto reader = loadTrace(
      path,
      [&](TraceChunk&& c) {
        for (std::string& n : c.newNames) out.names.push_back(std::move(n));
        out.slices.insert(out.slices.end(), c.slices.begin(), c.slices.end());
        if (c.summary && !out.summary) {
          out.summaryInHeader = c.header != nullptr;
          out.summary = std::move(c.summary);
        } else if (c.summary) {
          EXPECT_FALSE(out.summaryInHeader) << "a summary read whole comes in one piece";
          EXPECT_TRUE(appendSummary(out.summary.get(), std::move(*c.summary)));
          ++out.parts;
        }
        EXPECT_FALSE(c.dropSummary) << "the test traces are in start order";
        return true;
      },
      cancel, options);
  out.status = reader.status();
  return out;
}

// Per bucket of one level of one lane, from the slices alone.
struct RefBucket {
  int64_t count = 0;
  int64_t busyNs = 0;
  std::map<std::string, int64_t> byName;
};
using RefLevel = std::map<int64_t, RefBucket>;

// Level `level` of lane (track, depth) as the slices give it on the summary's grid: a slice
// counts in the bucket where it starts; its busy time is its overlap with each bucket (1 ns at
// least in its first level-0 bucket), clamped to the grid.
RefLevel reference(const Loaded& l, const TimelineSummary& s, TrackId track, int32_t depth,
                   int level) {
  RefLevel out;
  const int64_t w0 = s.bucketNs;
  for (const LoadedSlice& x : l.slices) {
    if (!(x.track == track) || x.depth != depth) continue;
    const int64_t end = x.startNs + std::max<int64_t>(x.durNs, 1);
    const int64_t first0 = std::max<int64_t>(0, (x.startNs - s.originNs) / w0);
    const int64_t last0 = std::max<int64_t>(0, (end - 1 - s.originNs) / w0);
    const std::string& name = l.names[size_t(x.nameIndex)];
    for (int64_t k = first0; k <= last0; ++k) {
      const int64_t b0 = s.originNs + k * w0;
      int64_t ns = std::min(end, b0 + w0) - std::max(x.startNs, b0);
      if (k == first0) ns = std::max<int64_t>(ns, 1);
      RefBucket& b = out[k >> (TimelineSummary::kLevelShift * level)];
      if (k == first0) ++b.count;
      b.busyNs += ns;
      b.byName[name] += ns;
    }
  }
  return out;
}

class TimelineSummaryTest : public ::testing::Test {
 protected:
  std::string makeTrace(const std::string& dir, const char* name, int steps) {
    const std::string file = dir + "/" + name;
    auto trace = TestTrace::create(file, 3, 4);
    EXPECT_TRUE(trace.isOk()) << trace.status().toString();
    if (!trace.isOk()) return file;
    for (int s = 0; s < steps; ++s) EXPECT_TRUE(trace.value()->addStep(s).isOk());
    EXPECT_TRUE(trace.value()->finish().isOk());
    return file;
  }
  std::string dir() const { return m_dir.path().toStdString(); }
  QTemporaryDir m_dir;
};

TEST_F(TimelineSummaryTest, EveryBucketOfEveryLevelEqualsWhatTheSlicesGive) {
  const std::string file = makeTrace(dir(), "t.sqlite", 40);
  const Loaded l = load(file);
  ASSERT_TRUE(l.status.isOk()) << l.status.toString();
  ASSERT_NE(l.summary, nullptr);
  const TimelineSummary& s = *l.summary;
  EXPECT_FALSE(l.summaryInHeader) << "no sidecar yet: built by the load";
  EXPECT_GT(l.parts, 3) << "handed over in parts as the slices stream";
  EXPECT_EQ(s.sliceCount, int64_t(l.slices.size()));
  EXPECT_GE(s.levelCount, 5);
  ASSERT_GE(s.lanes.size(), 3u);  // step, forward/backward, phases
  int checked = 0;
  for (const LaneSummary& lane : s.lanes) {
    for (int level = 0; level < s.levelCount; ++level) {
      const RefLevel ref = reference(l, s, lane.track, lane.depth, level);
      const std::vector<SummaryBucket>& got = lane.levels[size_t(level)];
      ASSERT_EQ(got.size(), ref.size()) << "lane depth " << lane.depth << " level " << level;
      size_t i = 0;
      for (const auto& [index, want] : ref) {
        const SummaryBucket& b = got[i++];
        ASSERT_EQ(b.index, index);
        EXPECT_EQ(b.count, want.count) << "level " << level << " bucket " << index;
        EXPECT_EQ(b.busyNs, want.busyNs) << "level " << level << " bucket " << index;
        // The dominant name: most busy time, ties to the name the summary saw first.
        std::string best;
        int64_t bestNs = -1;
        for (const auto& [name, ns] : want.byName) {
          const auto rank = [&](const std::string& n) {
            return std::find(s.names.begin(), s.names.end(), n) - s.names.begin();
          };
          if (ns > bestNs || (ns == bestNs && rank(name) < rank(best))) {
            best = name;
            bestNs = ns;
          }
        }
        ASSERT_GE(b.nameId, 0);
        ASSERT_LT(size_t(b.nameId), s.names.size());
        EXPECT_EQ(s.names[size_t(b.nameId)], best) << "level " << level << " bucket " << index;
        EXPECT_EQ(b.dominantBusyNs, bestNs);
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 1000);
}

TEST_F(TimelineSummaryTest, SpansFromTheSummaryMatchTheSlicesWhereColumnsAreBuckets) {
  const std::string file = makeTrace(dir(), "t.sqlite", 40);
  TraceDocument doc;
  ASSERT_TRUE(doc.open(QString::fromStdString(file)).isOk());
  const TimelineData& data = doc.timeline();
  ASSERT_NE(data.summary(), nullptr);
  const TimelineSummary& s = *data.summary();
  for (int level = 1; level < 4; ++level) {
    // One column per bucket of `level`, from the grid's origin.
    TimelineGeometry g;
    g.startNs = s.originNs;
    g.widthPx = 200;
    g.endNs = g.startNs + int64_t(g.widthPx) * s.widthNs(level);
    ASSERT_EQ(summaryLevelFor(s, g.nsPerPx()), level);
    for (size_t laneIndex = 0; laneIndex < data.lanes().size(); ++laneIndex) {
      const TimelineLane& lane = data.lanes()[laneIndex];
      const LaneSummary* ls = s.lane(lane.track, lane.depth);
      ASSERT_NE(ls, nullptr);
      const auto fromSlices = dominantSpans(lane, int32_t(laneIndex), 0, lane.slices.size(), g,
                                            /*maxPerColumn=*/1 << 20);
      const auto fromSummary =
          dominantSpansFromSummary(s, *ls, level, int32_t(laneIndex), g.startNs, g.endNs, g);
      ASSERT_EQ(fromSummary.size(), fromSlices.size()) << "lane " << laneIndex;
      for (size_t i = 0; i < fromSlices.size(); ++i) {
        EXPECT_EQ(fromSummary[i].x0, fromSlices[i].x0);
        EXPECT_EQ(fromSummary[i].x1, fromSlices[i].x1);
        EXPECT_EQ(data.name(fromSummary[i].nameId), data.name(fromSlices[i].nameId));
        EXPECT_NEAR(fromSummary[i].busyFraction, fromSlices[i].busyFraction, 1e-6);
      }
    }
  }
  // Zoomed in below level 0 there is no level to paint from: the slices are used.
  EXPECT_EQ(summaryLevelFor(s, double(s.bucketNs) / 2), -1);
}

TEST_F(TimelineSummaryTest, TheSecondOpenReadsTheSidecarInsteadOfRebuilding) {
  const std::string file = makeTrace(dir(), "t.sqlite", 25);
  const Loaded first = load(file);
  ASSERT_TRUE(first.status.isOk());
  ASSERT_TRUE(fs::exists(summaryFilePath(file)));
  const Loaded second = load(file);
  ASSERT_TRUE(second.status.isOk());
  ASSERT_NE(second.summary, nullptr);
  EXPECT_TRUE(second.summaryInHeader) << "read with the header, before any slice";
  ASSERT_EQ(second.summary->lanes.size(), first.summary->lanes.size());
  EXPECT_EQ(second.summary->names, first.summary->names);
  for (size_t i = 0; i < first.summary->lanes.size(); ++i) {
    const auto& a = first.summary->lanes[i].levels;
    const auto& b = second.summary->lanes[i].levels;
    ASSERT_EQ(a.size(), b.size());
    for (size_t l = 0; l < a.size(); ++l) {
      ASSERT_EQ(a[l].size(), b[l].size());
      for (size_t k = 0; k < a[l].size(); ++k) {
        EXPECT_EQ(a[l][k].index, b[l][k].index);
        EXPECT_EQ(a[l][k].busyNs, b[l][k].busyNs);
        EXPECT_EQ(a[l][k].nameId, b[l][k].nameId);
      }
    }
  }
  // Without the sidecar option nothing is read or written.
  fs::remove(summaryFilePath(file));
  const Loaded off = load(file, /*summaryFile=*/false);
  EXPECT_FALSE(off.summaryInHeader);
  EXPECT_NE(off.summary, nullptr);
  EXPECT_FALSE(fs::exists(summaryFilePath(file)));
}

TEST_F(TimelineSummaryTest, AStaleSidecarIsRebuilt) {
  const std::string file = makeTrace(dir(), "t.sqlite", 10);
  ASSERT_TRUE(load(file).status.isOk());
  const std::string sidecar = summaryFilePath(file);
  std::ifstream in(sidecar, std::ios::binary);
  const std::string before((std::istreambuf_iterator<char>(in)), {});
  // The trace is rewritten with more steps: the sidecar belongs to its old state.
  makeTrace(dir(), "t.sqlite", 14);
  const Loaded again = load(file);
  ASSERT_TRUE(again.status.isOk());
  ASSERT_NE(again.summary, nullptr);
  EXPECT_FALSE(again.summaryInHeader) << "a stale sidecar must not be used";
  EXPECT_EQ(again.summary->sliceCount, int64_t(again.slices.size()));
  std::ifstream in2(sidecar, std::ios::binary);
  const std::string after((std::istreambuf_iterator<char>(in2)), {});
  EXPECT_NE(after, before) << "rewritten for the trace's new state";
  // Only a touch (same bytes, new time) also makes it stale.
  fs::last_write_time(file, fs::last_write_time(file) + std::chrono::seconds(5));
  EXPECT_FALSE(load(file).summaryInHeader);
  EXPECT_TRUE(load(file).summaryInHeader) << "the rebuilt one is then used";
}

TEST_F(TimelineSummaryTest, TruncatedGarbageOrFlippedSidecarsAreIgnoredWithoutACrash) {
  const std::string file = makeTrace(dir(), "t.sqlite", 12);
  const Loaded good = load(file);
  ASSERT_TRUE(good.status.isOk());
  const std::string sidecar = summaryFilePath(file);
  std::ifstream in(sidecar, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), {});
  ASSERT_GT(bytes.size(), 200u);
  auto fingerprintNow = [&] {
    auto bulk = storage::BulkTraceReader::open(file);
    EXPECT_TRUE(bulk.isOk());
    return traceFingerprint(file, *(*bulk)->maxSliceId()).value();
  };
  std::vector<std::pair<std::string, std::string>> bad = {
      {"empty", ""},
      {"truncated", bytes.substr(0, bytes.size() / 2)},
      {"one byte short", bytes.substr(0, bytes.size() - 1)},
      {"garbage", std::string(bytes.size(), '\x5a')},
      {"magic only", bytes.substr(0, 8)},
      {"one byte longer", bytes + "x"}};
  for (size_t at : {size_t(20), size_t(70), bytes.size() / 2, bytes.size() - 3}) {
    std::string flipped = bytes;
    flipped[at] = char(flipped[at] ^ 0x41);
    bad.emplace_back("byte " + std::to_string(at) + " flipped", flipped);
  }
  for (const auto& [what, content] : bad) {
    SCOPED_TRACE(what);
    std::ofstream(sidecar, std::ios::binary | std::ios::trunc) << content;
    auto read = readSummaryFile(sidecar, fingerprintNow());
    EXPECT_FALSE(read.isOk());
    const Loaded l = load(file);
    ASSERT_TRUE(l.status.isOk()) << l.status.toString();
    ASSERT_NE(l.summary, nullptr);
    EXPECT_FALSE(l.summaryInHeader);
    EXPECT_EQ(l.summary->sliceCount, good.summary->sliceCount);
    EXPECT_TRUE(readSummaryFile(sidecar, fingerprintNow()).isOk()) << "rebuilt and rewritten";
  }
  // A directory where the sidecar should be: nothing written, the trace still opens.
  fs::remove(sidecar);
  fs::create_directory(sidecar);
  const Loaded blocked = load(file);
  EXPECT_TRUE(blocked.status.isOk());
  EXPECT_NE(blocked.summary, nullptr);
  EXPECT_TRUE(fs::is_directory(sidecar));
}

TEST_F(TimelineSummaryTest, AReadOnlyDirectoryStillOpensTheTraceWithoutASidecar) {
  const std::string archive = dir() + "/archive";
  fs::permissions(dir(), fs::perms(0755));
  fs::create_directory(archive);
  const std::string file = makeTrace(archive, "t.sqlite", 9);
  fs::permissions(archive, fs::perms(0555));
  const auto problem = runWhereDirIsReadOnly(archive, [&]() -> std::string {
    const Loaded l = load(file);
    if (!l.status.isOk()) return "load: " + l.status.toString();
    if (!l.summary || l.summaryInHeader) return "no summary built";
    if (fs::exists(summaryFilePath(file))) return "a sidecar appeared";
    return "";
  });
  fs::permissions(archive, fs::perms(0755));
  if (!problem) GTEST_SKIP() << "cannot make a directory read-only for a reader here";
  EXPECT_EQ(*problem, "");
  EXPECT_FALSE(fs::exists(summaryFilePath(file)));
}

TEST_F(TimelineSummaryTest, ALiveTraceGetsNoSummaryAndRowsAddedLaterDropOne) {
  const std::string file = dir() + "/live.sqlite";
  auto trace = TestTrace::create(file, 2, 4);
  ASSERT_TRUE(trace.isOk());
  for (int s = 0; s < 5; ++s) ASSERT_TRUE(trace.value()->addStep(s).isOk());
  ASSERT_GT(fs::file_size(file + "-wal"), 0u) << "the writer keeps a -wal while it runs";
  TraceDocument doc;
  ASSERT_TRUE(doc.open(QString::fromStdString(file)).isOk());
  EXPECT_EQ(doc.timeline().summary(), nullptr) << "its slices may grow past the bounds";
  EXPECT_FALSE(fs::exists(summaryFilePath(file)));
  ASSERT_TRUE(trace.value()->finish().isOk());
  // Rows added through addSlices (a refresh) are not in the summary: it is dropped.
  ASSERT_TRUE(doc.open(QString::fromStdString(file)).isOk());
  const TimelineSummary* summary = doc.timeline().summary();
  ASSERT_NE(summary, nullptr);
  TimelineData data;
  SummaryBuilder builder(TimeRange{0, 1000});
  builder.add(TrackId(1), 0, 10, 5, builder.addName("x"));
  data.addSummary(std::make_unique<TimelineSummary>(builder.finish()));
  ASSERT_NE(data.summary(), nullptr);
  storage::SliceRow row;
  row.track = TrackId(1);
  row.startNs = 20;
  row.durNs = 5;
  row.name = "y";
  EXPECT_EQ(data.addSlices({row}), 1);
  EXPECT_EQ(data.summary(), nullptr);
}

TEST(SummaryBuilder, LongZeroLengthAndOutOfOrderSlices) {
  // 1 ms span: level-0 buckets of 16 ns (1,000,000 / 65,536 rounded up).
  SummaryBuilder builder(TimeRange{0, 1'000'000});
  const int32_t a = builder.addName("a"), b = builder.addName("b");
  EXPECT_EQ(builder.addName("a"), a);
  builder.add(TrackId(1), 0, 0, 1'000, a);  // spans 63 buckets (the last one partly)
  builder.add(TrackId(1), 0, 1'000, 0, b);  // zero length: 1 ns in its bucket
  builder.add(TrackId(1), 0, 500, 10, b);   // starts before a finished bucket: not counted
  builder.add(TrackId(2), 0, 500, 10, b);   // another lane is not affected
  EXPECT_EQ(builder.outOfOrder(), 1);
  const TimelineSummary s = builder.finish();
  EXPECT_EQ(s.bucketNs, 16);
  EXPECT_EQ(s.sliceCount, 3);
  ASSERT_EQ(s.lanes.size(), 2u);
  const std::vector<SummaryBucket>& level0 = s.lanes[0].levels[0];
  ASSERT_EQ(level0.size(), 63u);  // 0..62; the zero-length slice at 1000 lands in bucket 62
  EXPECT_EQ(level0.front().count, 1);
  EXPECT_EQ(level0.front().busyNs, 16);
  EXPECT_EQ(level0.back().index, 62);
  EXPECT_EQ(level0.back().count, 1);
  EXPECT_EQ(level0.back().busyNs, 1000 - 62 * 16 + 1);
  EXPECT_EQ(s.names[size_t(level0.back().nameId)], "a");
  const SummaryBucket& top = s.lanes[0].levels[size_t(s.levelCount - 1)].front();
  EXPECT_EQ(top.count, 2);
  EXPECT_EQ(top.busyNs, 1001);
  EXPECT_EQ(top.dominantBusyNs, 1000);
}

}  // namespace
}  // namespace moewb::gui
