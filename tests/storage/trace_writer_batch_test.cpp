// The writer's batched paths: slices buffered into multi-row INSERTs (every partial size, a
// buffer flushed by another op, by flush() and by maxBatchRows) and the chunked writer queue
// (more ops than one chunk). Checks every column and that ids follow the order rows were added.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "moewb/storage/trace_writer.h"
#include "test_util.h"

namespace moewb::storage {
namespace {

using testing::queryCsv;
using testing::TempDir;

constexpr const char* kSliceQuery =
    "SELECT s.id, s.track, s.start_ns, s.dur_ns, n.text, c.text, s.step, s.layer, "
    "s.correlation_id, s.depth FROM slice s JOIN string n ON n.id = s.name "
    "JOIN string c ON c.id = s.category ORDER BY s.id";

struct Expected {
  std::vector<std::string> slices;
  int64_t nextId = 1;
  int64_t t = 0;
};

// Adds `count` slices with distinct values and records the row each should become.
void addSlices(TraceWriter& writer, TrackId track, int64_t step, int count, Expected& expected) {
  const char* names[] = {"attention.fwd", "router.fwd", "a much longer slice name, not SSO"};
  for (int i = 0; i < count; ++i) {
    SliceRow row;
    row.track = track;
    row.startNs = expected.t;
    row.durNs = 7 + i;
    row.name = names[i % 3];
    row.category = i % 2 ? "phase" : "kernel";
    row.step = step;
    row.layer = i % 5;
    row.correlationId = expected.nextId * 3;
    row.depth = i % 4;
    expected.t += 10;
    writer.addSlice(row);
    expected.slices.push_back(std::to_string(expected.nextId) + "," +
                              std::to_string(track.value) + "," + std::to_string(row.startNs) +
                              "," + std::to_string(row.durNs) + "," + row.name + "," +
                              row.category + "," + std::to_string(step) + "," +
                              std::to_string(row.layer) + "," +
                              std::to_string(row.correlationId) + "," +
                              std::to_string(row.depth));
    ++expected.nextId;
  }
}

TEST(TraceWriterBatch, EveryBufferSizeKeepsOrderAndValues) {
  TempDir dir;
  const std::string path = dir.path("batch.moewb");
  auto created = TraceWriter::create(path);
  ASSERT_TRUE(created.isOk()) << created.status().toString();
  auto writer = std::move(created).value();
  const RunId run = writer->addRun({});
  const TrackId track = writer->addTrack({TrackId(), "t", "thread", 0, 0});
  const TrackId counters = writer->addTrack({TrackId(), "c", "counter", 0, 0});
  Expected expected;
  const int sizes[] = {0, 1, 2, 3, 31, 32, 33, 63, 64, 65, 100, 127, 128, 129, 700, 1500};
  int64_t step = 0;
  for (int size : sizes) {
    addSlices(*writer, track, step, size, expected);
    if (step % 3 == 1) {
      // Another op in the middle of a buffer flushes it first.
      writer->addCounter({counters, "mem", expected.t, double(step)});
      addSlices(*writer, track, step, size / 2 + 1, expected);
    }
    StepRow stepRow;
    stepRow.run = run;
    stepRow.step = step++;
    writer->addStep(stepRow);
  }
  addSlices(*writer, track, step, 5, expected);  // committed by flush(), not by a step
  ASSERT_TRUE(writer->flush().isOk());
  EXPECT_EQ(queryCsv(path, kSliceQuery), expected.slices);
  addSlices(*writer, track, step, 77, expected);  // committed by close()
  ASSERT_TRUE(writer->close().isOk());
  EXPECT_EQ(queryCsv(path, kSliceQuery), expected.slices);
  EXPECT_EQ(queryCsv(path, "SELECT count(*) FROM step"),
            std::vector<std::string>{std::to_string(std::size(sizes))});
  EXPECT_EQ(queryCsv(path, "SELECT value FROM meta WHERE key = 'max_slice_dur_ns'"),
            std::vector<std::string>{std::to_string(7 + 1500 - 1)});
}

TEST(TraceWriterBatch, MaxBatchRowsCommitsInsideASliceBuffer) {
  TempDir dir;
  const std::string path = dir.path("early.moewb");
  WriterOptions options;
  options.maxBatchRows = 100;  // not a multiple of the slice buffer
  auto created = TraceWriter::create(path, options);
  ASSERT_TRUE(created.isOk());
  auto writer = std::move(created).value();
  const TrackId track = writer->addTrack({TrackId(), "t", "thread", 0, 0});  // row 1
  Expected expected;
  addSlices(*writer, track, -1, 250, expected);
  ASSERT_TRUE(writer->flush().isOk());
  EXPECT_EQ(queryCsv(path, kSliceQuery), expected.slices);
  ASSERT_TRUE(writer->close().isOk());
}

}  // namespace
}  // namespace moewb::storage
