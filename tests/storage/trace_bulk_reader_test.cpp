// BulkTraceReader against the plain row queries on the same file: every slice in start order
// with the same fields and names, expert loads of a step range as the same multiset, bounded
// batches, stopping early, and a dangling string id read as "".
#include "moewb/storage/trace_bulk_reader.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <tuple>

#include "moewb/storage/trace_reader.h"
#include "moewb/storage/trace_writer.h"
#include "test_util.h"

namespace moewb::storage {
namespace {

using testing::makeSlice;
using testing::TempDir;

// A finished trace of `steps` steps on two tracks, slices written out of start order (a parent
// after its children, as a real run writes them), 2 layers x 3 experts on 2 ranks.
std::string writeTrace(const TempDir& dir, int steps) {
  const std::string path = dir.path("bulk.sqlite");
  auto created = TraceWriter::create(path, {.overwrite = true});
  EXPECT_TRUE(created.isOk()) << created.status().toString();
  TraceWriter& w = **created;
  const RunId run = w.addRun({.name = "bulk", .backend = "cpu", .status = "running"});
  const TrackId a = w.addTrack({.name = "trainer", .kind = "thread"});
  const TrackId b = w.addTrack({.name = "helper", .kind = "thread"});
  for (int s = 0; s < steps; ++s) {
    const int64_t t = 1'000'000 + int64_t(s) * 10'000;
    w.addSlice(makeSlice(a, "forward", t + 100, 3'000, s, -1));
    w.addSlice(makeSlice(a, s % 2 ? "experts.fwd" : "router.fwd", t + 200, 1'000, s, s % 2));
    SliceRow step = makeSlice(a, "step", t, 9'000, s, -1, "step");
    step.depth = 0;
    w.addSlice(step);
    w.addSlice(makeSlice(b, "loader", t + 200, 500, s, -1, "io"));
    for (int32_t layer = 0; layer < 2; ++layer) {
      for (int32_t expert = 0; expert < 3; ++expert) {
        for (int32_t rank = 1; rank >= 0; --rank) {
          w.addExpertLoad({.step = s, .layer = layer, .expert = expert, .rank = rank,
                           .tokens = 10 * s + 3 * expert + rank, .dropped = expert, .bias = 0.5});
        }
      }
    }
    w.addStep({.run = run, .step = s, .startNs = t, .endNs = t + 9'000});
  }
  w.finishRun(run, "completed", "", 1'000'000 + int64_t(steps) * 10'000);
  EXPECT_TRUE(w.close().isOk());
  return path;
}

TEST(BulkTraceReader, SlicesMatchTheRowQueriesInStartOrder) {
  TempDir dir;
  const std::string path = writeTrace(dir, 25);
  auto reader = TraceReader::open(path);
  ASSERT_TRUE(reader.isOk()) << reader.status().toString();
  auto expected = (*reader)->slices(TimeWindow::all());
  ASSERT_TRUE(expected.isOk());
  ASSERT_EQ(expected->size(), 100u);
  auto bulk = BulkTraceReader::open(path);
  ASSERT_TRUE(bulk.isOk()) << bulk.status().toString();
  std::vector<SliceIdRow> got;
  int batches = 0;
  ASSERT_TRUE((*bulk)
                  ->forEachSliceBatch(7,
                                      [&](std::vector<SliceIdRow>& rows) {
                                        EXPECT_LE(rows.size(), 7u);
                                        EXPECT_FALSE(rows.empty());
                                        ++batches;
                                        got.insert(got.end(), rows.begin(), rows.end());
                                        return true;
                                      })
                  .isOk());
  EXPECT_EQ(batches, 15);  // 100 rows, 7 at a time
  ASSERT_EQ(got.size(), expected->size());
  for (size_t i = 0; i < got.size(); ++i) {
    const SliceRow& e = (*expected)[i];
    const SliceIdRow& g = got[i];
    EXPECT_EQ(g.id, e.id.value);
    EXPECT_EQ(g.track, e.track.value);
    EXPECT_EQ(g.startNs, e.startNs);
    EXPECT_EQ(g.durNs, e.durNs);
    EXPECT_EQ(g.step, e.step);
    EXPECT_EQ(g.layer, e.layer);
    EXPECT_EQ(g.depth, e.depth);
    EXPECT_EQ(g.correlationId, e.correlationId);
    EXPECT_EQ(*(*bulk)->stringText(g.nameId), e.name) << "row " << i;
    EXPECT_EQ(*(*bulk)->stringText(g.categoryId), e.category) << "row " << i;
  }
  // Stopping after the first batch: exactly one batch, and the reader is usable again.
  int calls = 0;
  ASSERT_TRUE((*bulk)
                  ->forEachSliceBatch(10,
                                      [&](std::vector<SliceIdRow>&) {
                                        ++calls;
                                        return false;
                                      })
                  .isOk());
  EXPECT_EQ(calls, 1);
  size_t again = 0;
  ASSERT_TRUE((*bulk)
                  ->forEachSliceBatch(1000,
                                      [&](std::vector<SliceIdRow>& rows) {
                                        again += rows.size();
                                        return true;
                                      })
                  .isOk());
  EXPECT_EQ(again, 100u);
}

TEST(BulkTraceReader, ExpertLoadsOfAStepRangeAreTheRowQuerysRows) {
  TempDir dir;
  const std::string path = writeTrace(dir, 12);
  auto reader = TraceReader::open(path);
  ASSERT_TRUE(reader.isOk());
  auto expected = (*reader)->expertLoad(3, 8);
  ASSERT_TRUE(expected.isOk());
  ASSERT_EQ(expected->size(), 6u * 12u);
  auto bulk = BulkTraceReader::open(path);
  ASSERT_TRUE(bulk.isOk());
  std::vector<ExpertLoadRow> got;
  ASSERT_TRUE((*bulk)
                  ->forEachExpertLoadBatch(3, 8, 5,
                                           [&](std::vector<ExpertLoadRow>& rows) {
                                             EXPECT_LE(rows.size(), 5u);
                                             got.insert(got.end(), rows.begin(), rows.end());
                                             return true;
                                           })
                  .isOk());
  ASSERT_EQ(got.size(), expected->size());
  for (size_t i = 1; i < got.size(); ++i) {
    EXPECT_LE(std::tie(got[i - 1].step, got[i - 1].layer), std::tie(got[i].step, got[i].layer));
  }
  auto key = [](const ExpertLoadRow& r) {
    return std::make_tuple(r.step, r.layer, r.expert, r.rank, r.tokens, r.dropped, r.bias);
  };
  auto byKey = [&](const ExpertLoadRow& x, const ExpertLoadRow& y) { return key(x) < key(y); };
  std::sort(got.begin(), got.end(), byKey);
  std::sort(expected->begin(), expected->end(), byKey);
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(key(got[i]), key((*expected)[i]));
}

TEST(BulkTraceReader, ADanglingStringIdReadsEmpty) {
  TempDir dir;
  const std::string path = writeTrace(dir, 2);
  auto bulk = BulkTraceReader::open(path);
  ASSERT_TRUE(bulk.isOk());
  auto text = (*bulk)->stringText(987'654);
  ASSERT_TRUE(text.isOk());
  EXPECT_EQ(*text, "");
}

TEST(BulkTraceReader, AMissingFileIsNamed) {
  TempDir dir;
  auto bulk = BulkTraceReader::open(dir.path("absent.sqlite"));
  ASSERT_FALSE(bulk.isOk());
  EXPECT_NE(bulk.status().message().find("absent.sqlite"), std::string::npos)
      << bulk.status().toString();
}

}  // namespace
}  // namespace moewb::storage
