// TraceWriter -> TraceReader round trips of every row type, file creation rules (existing file,
// overwrite, parent directories), close/destructor behaviour and write-error reporting.
#include <gtest/gtest.h>

#include <filesystem>

#include "moewb/storage/trace_reader.h"
#include "moewb/storage/trace_writer.h"
#include "sqlite_trace_writer.h"
#include "test_util.h"

namespace moewb::storage {
namespace {

using testing::makeSlice;
using testing::TempDir;

std::unique_ptr<TraceWriter> mustCreate(const std::string& path, WriterOptions options = {}) {
  auto writer = TraceWriter::create(path, options);
  EXPECT_TRUE(writer.isOk()) << writer.status().toString();
  return writer.isOk() ? std::move(writer).value() : nullptr;
}

std::unique_ptr<TraceReader> mustOpen(const std::string& path) {
  auto reader = TraceReader::open(path);
  EXPECT_TRUE(reader.isOk()) << reader.status().toString();
  return reader.isOk() ? std::move(reader).value() : nullptr;
}

RunRow sampleRun() {
  RunRow run;
  run.name = "tiny-moe";
  run.configToml = "[moe]\ntop_k = 2\n";
  run.backend = "cpu";
  run.worldSize = 2;
  run.startNs = 1000;
  run.startUnixNs = 1'700'000'000'000'000'000;
  return run;
}

StepRow sampleStep(RunId run, int32_t rank, int64_t step) {
  StepRow row;
  row.run = run;
  row.rank = rank;
  row.step = step;
  row.startNs = 1000 + step * 100;
  row.endNs = row.startNs + 90;
  row.loss = 2.5 - 0.1 * double(step);
  row.auxLoss = 0.01 * double(rank + 1);
  row.tokens = 4096;
  row.tokensPerSecond = 12345.5;
  row.peakBytes = 1 << 30;
  row.gradNorm = 0.75;
  row.lr = 3e-4;
  return row;
}

// One trace with one row of every type, written once per test and read back.
class TraceRoundTrip : public ::testing::Test {
 protected:
  void SetUp() override {
    m_path = m_dir.path("all.moewb");
    auto writer = mustCreate(m_path);
    ASSERT_TRUE(writer);
    m_run = writer->addRun(sampleRun());
    m_thread = writer->addTrack({TrackId(), "trainer thread", "thread", 1, 4242});
    m_memory = writer->addTrack({TrackId(), "memory", "counter", 0, 0});
    SliceRow slice = makeSlice(m_thread, "attention.fwd", 1100, 40, 0, 3);
    slice.correlationId = 77;
    slice.depth = 2;
    writer->addSlice(slice);
    writer->addCounter({m_memory, "memory.activations_bytes", 1150, 1.5e9});
    writer->addExpertLoad({0, 3, 5, 1, 123, 4, -0.25});
    writer->addConfigChange(m_run, {1, 1200, "moe.top_k", "2", "1", "gui"});
    writer->addStat({"cupti_dropped_records", "warning", 3, "records lost"});
    writer->addStat({"cupti_dropped_records", "data_loss", 9, "records lost (updated)"});
    writer->addStep(sampleStep(m_run, 1, 0));
    writer->setMeta("gpu", "none");
    writer->finishRun(m_run, "completed", "done", 5000);
    ASSERT_TRUE(writer->close().isOk());
    m_reader = mustOpen(m_path);
    ASSERT_TRUE(m_reader);
  }

  TempDir m_dir;
  std::string m_path;
  RunId m_run;
  TrackId m_thread, m_memory;
  std::unique_ptr<TraceReader> m_reader;
};

TEST_F(TraceRoundTrip, IdsAreAssignedInOrderFromOne) {
  EXPECT_EQ(m_run.value, 1);
  EXPECT_EQ(m_thread.value, 1);
  EXPECT_EQ(m_memory.value, 2);
}

TEST_F(TraceRoundTrip, Meta) {
  auto meta = m_reader->meta();
  ASSERT_TRUE(meta.isOk()) << meta.status().toString();
  EXPECT_EQ(meta->at("schema_version"), "1");
  EXPECT_EQ(meta->at("format"), "moewb-trace");
  EXPECT_EQ(meta->at("clock_domain"), "CLOCK_MONOTONIC");
  EXPECT_EQ(meta->at("gpu"), "none");
  EXPECT_EQ(meta->at("max_slice_dur_ns"), "40");
  EXPECT_FALSE(meta->at("host").empty());
  EXPECT_FALSE(meta->at("tool_version").empty());
  EXPECT_GT(std::stoll(meta->at("created_unix_ns")), 0);
}

TEST_F(TraceRoundTrip, Runs) {
  auto runs = m_reader->runs();
  ASSERT_TRUE(runs.isOk());
  ASSERT_EQ(runs->size(), 1u);
  const RunRow& r = runs->front();
  EXPECT_EQ(r.id, m_run);
  EXPECT_EQ(r.name, "tiny-moe");
  EXPECT_EQ(r.configToml, "[moe]\ntop_k = 2\n");
  EXPECT_EQ(r.backend, "cpu");
  EXPECT_EQ(r.worldSize, 2);
  EXPECT_EQ(r.startNs, 1000);
  EXPECT_EQ(r.startUnixNs, 1'700'000'000'000'000'000);
  EXPECT_EQ(r.endNs, 5000);
  EXPECT_EQ(r.status, "completed");
  EXPECT_EQ(r.message, "done");
}

TEST_F(TraceRoundTrip, Tracks) {
  auto tracks = m_reader->tracks();
  ASSERT_TRUE(tracks.isOk());
  ASSERT_EQ(tracks->size(), 2u);
  EXPECT_EQ((*tracks)[0].id, m_thread);
  EXPECT_EQ((*tracks)[0].name, "trainer thread");
  EXPECT_EQ((*tracks)[0].kind, "thread");
  EXPECT_EQ((*tracks)[0].rank, 1);
  EXPECT_EQ((*tracks)[0].threadId, 4242);
  EXPECT_EQ((*tracks)[1].id, m_memory);
  EXPECT_EQ((*tracks)[1].kind, "counter");
}

TEST_F(TraceRoundTrip, Slices) {
  auto slices = m_reader->slices(TimeWindow::all());
  ASSERT_TRUE(slices.isOk());
  ASSERT_EQ(slices->size(), 1u);
  const SliceRow& s = slices->front();
  EXPECT_TRUE(s.id.isValid());
  EXPECT_EQ(s.track, m_thread);
  EXPECT_EQ(s.startNs, 1100);
  EXPECT_EQ(s.durNs, 40);
  EXPECT_EQ(s.name, "attention.fwd");
  EXPECT_EQ(s.category, "phase");
  EXPECT_EQ(s.step, 0);
  EXPECT_EQ(s.layer, 3);
  EXPECT_EQ(s.correlationId, 77);
  EXPECT_EQ(s.depth, 2);
}

TEST_F(TraceRoundTrip, Counters) {
  auto counters = m_reader->counters(TimeWindow::all());
  ASSERT_TRUE(counters.isOk());
  ASSERT_EQ(counters->size(), 1u);
  EXPECT_EQ((*counters)[0].track, m_memory);
  EXPECT_EQ((*counters)[0].name, "memory.activations_bytes");
  EXPECT_EQ((*counters)[0].tsNs, 1150);
  EXPECT_DOUBLE_EQ((*counters)[0].value, 1.5e9);
}

TEST_F(TraceRoundTrip, ExpertLoad) {
  auto loads = m_reader->expertLoad(0, 0);
  ASSERT_TRUE(loads.isOk());
  ASSERT_EQ(loads->size(), 1u);
  const ExpertLoadRow& l = loads->front();
  EXPECT_EQ(l.step, 0);
  EXPECT_EQ(l.layer, 3);
  EXPECT_EQ(l.expert, 5);
  EXPECT_EQ(l.rank, 1);
  EXPECT_EQ(l.tokens, 123);
  EXPECT_EQ(l.dropped, 4);
  EXPECT_DOUBLE_EQ(l.bias, -0.25);
}

TEST_F(TraceRoundTrip, ConfigChanges) {
  auto changes = m_reader->configChanges();
  ASSERT_TRUE(changes.isOk());
  ASSERT_EQ(changes->size(), 1u);
  EXPECT_EQ((*changes)[0].step, 1);
  EXPECT_EQ((*changes)[0].tsNs, 1200);
  EXPECT_EQ((*changes)[0].key, "moe.top_k");
  EXPECT_EQ((*changes)[0].oldValue, "2");
  EXPECT_EQ((*changes)[0].newValue, "1");
  EXPECT_EQ((*changes)[0].source, "gui");
  EXPECT_EQ(testing::queryCsv(m_path, "SELECT run FROM config_change"),
            std::vector<std::string>{"1"});
}

TEST_F(TraceRoundTrip, StatsAreUpsertedByName) {
  auto stats = m_reader->stats();
  ASSERT_TRUE(stats.isOk());
  ASSERT_EQ(stats->size(), 1u) << "a stat with the same name must replace the old row";
  EXPECT_EQ((*stats)[0].name, "cupti_dropped_records");
  EXPECT_EQ((*stats)[0].severity, "data_loss");
  EXPECT_EQ((*stats)[0].value, 9);
  EXPECT_EQ((*stats)[0].description, "records lost (updated)");
}

TEST_F(TraceRoundTrip, Steps) {
  auto steps = m_reader->steps(m_run);
  ASSERT_TRUE(steps.isOk());
  ASSERT_EQ(steps->size(), 1u);
  const StepRow expected = sampleStep(m_run, 1, 0);
  const StepRow& st = steps->front();
  EXPECT_EQ(st.run, m_run);
  EXPECT_EQ(st.rank, 1);
  EXPECT_EQ(st.step, 0);
  EXPECT_EQ(st.startNs, expected.startNs);
  EXPECT_EQ(st.endNs, expected.endNs);
  EXPECT_DOUBLE_EQ(st.loss, expected.loss);
  EXPECT_DOUBLE_EQ(st.auxLoss, expected.auxLoss);
  EXPECT_EQ(st.tokens, expected.tokens);
  EXPECT_DOUBLE_EQ(st.tokensPerSecond, expected.tokensPerSecond);
  EXPECT_EQ(st.peakBytes, expected.peakBytes);
  EXPECT_DOUBLE_EQ(st.gradNorm, expected.gradNorm);
  EXPECT_DOUBLE_EQ(st.lr, expected.lr);
}

TEST(TraceRoundTripSteps, OrderedByStepThenRankAndFilteredByRunAndFromStep) {
  TempDir dir;
  const std::string path = dir.path("steps.moewb");
  auto writer = mustCreate(path);
  ASSERT_TRUE(writer);
  const RunId first = writer->addRun(sampleRun());
  const RunId second = writer->addRun(sampleRun());
  for (int64_t step : {2, 0, 1}) {
    for (int32_t rank : {1, 0}) writer->addStep(sampleStep(first, rank, step));
  }
  writer->addStep(sampleStep(second, 0, 7));
  writer->addStep(sampleStep(first, 0, 1));  // re-emitting a step replaces it
  ASSERT_TRUE(writer->close().isOk());

  auto reader = mustOpen(path);
  ASSERT_TRUE(reader);
  auto steps = reader->steps(first, 1);
  ASSERT_TRUE(steps.isOk());
  std::vector<std::pair<int64_t, int32_t>> keys;
  for (const StepRow& row : *steps) keys.emplace_back(row.step, row.rank);
  const std::vector<std::pair<int64_t, int32_t>> expected = {{1, 0}, {1, 1}, {2, 0}, {2, 1}};
  EXPECT_EQ(keys, expected);
  auto other = reader->steps(second);
  ASSERT_TRUE(other.isOk());
  ASSERT_EQ(other->size(), 1u);
  EXPECT_EQ(other->front().step, 7);
}

TEST(TraceWriter, CreateRefusesAnExistingFileAndLeavesItIntact) {
  TempDir dir;
  const std::string path = dir.path("existing.moewb");
  testing::writeFile(path, "precious bytes");
  auto writer = TraceWriter::create(path);
  ASSERT_FALSE(writer.isOk());
  EXPECT_EQ(writer.status().code(), StatusCode::kAlreadyExists);
  EXPECT_NE(writer.status().message().find(path), std::string::npos) << writer.status().message();
  EXPECT_EQ(testing::readFile(path), "precious bytes");
  EXPECT_FALSE(std::filesystem::exists(path + "-wal"));
}

TEST(TraceWriter, OverwriteReplacesTheFileAndItsWal) {
  TempDir dir;
  const std::string path = dir.path("again.moewb");
  testing::writeFile(path, "old contents");
  testing::writeFile(path + "-wal", "stale wal");
  WriterOptions options;
  options.overwrite = true;
  auto writer = mustCreate(path, options);
  ASSERT_TRUE(writer);
  writer->addRun(sampleRun());
  ASSERT_TRUE(writer->close().isOk());
  auto reader = mustOpen(path);
  ASSERT_TRUE(reader);
  auto runs = reader->runs();
  ASSERT_TRUE(runs.isOk());
  EXPECT_EQ(runs->size(), 1u);
}

TEST(TraceWriter, CreatesMissingParentDirectories) {
  TempDir dir;
  const std::string path = dir.path("a/b/c/trace.moewb");
  auto writer = mustCreate(path);
  ASSERT_TRUE(writer);
  EXPECT_EQ(writer->path(), path);
  EXPECT_TRUE(writer->close().isOk());
  EXPECT_TRUE(mustOpen(path));
}

TEST(TraceWriter, CloseIsIdempotentAndTheDestructorCloses) {
  TempDir dir;
  const std::string path = dir.path("closed.moewb");
  {
    auto writer = mustCreate(path);
    ASSERT_TRUE(writer);
    writer->addRun(sampleRun());
    ASSERT_TRUE(writer->close().isOk());
    EXPECT_TRUE(writer->close().isOk());
    EXPECT_TRUE(writer->flush().isOk());
  }
  // close() checkpointed the WAL into the main file.
  EXPECT_FALSE(std::filesystem::exists(path + "-wal") &&
               std::filesystem::file_size(path + "-wal") > 0);
  const std::string second = dir.path("destructed.moewb");
  {
    auto writer = mustCreate(second);
    ASSERT_TRUE(writer);
    const RunId run = writer->addRun(sampleRun());
    writer->addSlice(makeSlice(TrackId(1), "x", 0, 1));
    writer->addStep(sampleStep(run, 0, 0));
  }
  auto reader = mustOpen(second);
  ASSERT_TRUE(reader);
  auto slices = reader->slices(TimeWindow::all());
  ASSERT_TRUE(slices.isOk());
  EXPECT_EQ(slices->size(), 1u);
}

TEST(TraceWriter, AWriteErrorIsReportedByFlushAndCloseAndLaterRowsAreDropped) {
  TempDir dir;
  const std::string path = dir.path("broken.moewb");
  auto writer = mustCreate(path);
  ASSERT_TRUE(writer);
  const TrackId track = writer->addTrack({TrackId(), "t", "thread", 0, 0});
  writer->addSlice(makeSlice(track, "before", 0, 10));
  ASSERT_TRUE(writer->flush().isOk());
  // Damage the file from another connection: the writer's next slice insert must fail.
  testing::execSql(path, "DROP TABLE slice");
  writer->addSlice(makeSlice(track, "after", 20, 10));
  writer->addSlice(makeSlice(track, "dropped", 40, 10));
  writer->addStat({"x", "info", 1, ""});
  const Status flushed = writer->flush();
  ASSERT_FALSE(flushed.isOk());
  EXPECT_EQ(flushed.code(), StatusCode::kInternal);
  EXPECT_NE(flushed.message().find(path), std::string::npos) << flushed.message();
  // SQLite's own words, without the call and source line (those are for MOEWB_SQLITE_DEBUG).
  EXPECT_NE(flushed.message().find("no such table: slice"), std::string::npos) << flushed.message();
  EXPECT_EQ(flushed.message().find("sqlite3_"), std::string::npos) << flushed.message();
  auto* impl = dynamic_cast<detail::SqliteTraceWriter*>(writer.get());
  ASSERT_NE(impl, nullptr);
  EXPECT_EQ(impl->droppedRows(), 3);
  const Status closed = writer->close();
  EXPECT_EQ(closed.code(), StatusCode::kInternal);
  EXPECT_NE(closed.message().find("3 rows dropped"), std::string::npos) << closed.message();
}

}  // namespace
}  // namespace moewb::storage
