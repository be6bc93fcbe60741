// mergeTraces: per-rank trace files of one synthetic 4-rank run (written through the TraceWriter,
// each rank on its own shifted clock) are merged back into one file. Checks: the recovered clock
// offsets, that every time column of every table moves by its file's offset, that the merge of
// unshifted files equals the trace the same rows make when written by one writer (in-process
// ranks), consistent ids, and the refusals (mixed runs, duplicate or missing ranks, a non-trace
// file, an existing output) that leave no output behind.
#include "moewb/storage/trace_merge.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "moewb/base/units.h"
#include "moewb/storage/trace_reader.h"
#include "moewb/storage/trace_writer.h"
#include "schema.h"
#include "sqlite_util.h"
#include "test_util.h"
#include "trace_merge_internal.h"

namespace moewb::storage {
namespace {

namespace fs = std::filesystem;
using testing::execSql;
using testing::queryCsv;
using testing::TempDir;

constexpr int64_t kT0Ns = 1000 * kNsPerSecond;  // true time of the run start
constexpr int64_t kStepNs = 20 * kNsPerMs;
constexpr int32_t kWorldSize = 4;
constexpr int kSteps = 5;

// One synthetic run of kWorldSize ranks: groups world (0..3) and ep (0,1) and (2,3). The ep
// groups end their collectives at different times, so matching collectives by (group, seq)
// without the peers would give offsets several ms off.
struct RunSpec {
  std::string name = "merge-test";
  std::string config = "[model]\nlayers = 2\n[parallel]\nworld_size = 4\nep = 2\n";
  bool gpu = true;          // kernel, API call and gpu_memory rows with colliding correlation ids
  bool collectives = true;  // without them the clocks can only be aligned by run start
};

struct RankClock {
  int64_t shiftNs = 0;   // this rank's clock reads true time + shiftNs
  int64_t jitterNs = 0;  // collective ends vary uniformly in [-jitter, +jitter]
};

class RankWriter {
 public:
  RankWriter(TraceWriter& writer, RunId run, int32_t rank, const RunSpec& spec, RankClock clock)
      : m_w(writer), m_run(run), m_rank(rank), m_spec(spec), m_clock(clock), m_random(rank + 7) {}

  void write() {
    m_thread = m_w.addTrack({TrackId(), "trainer thread", "thread", m_rank, 100 + m_rank});
    m_comm = m_w.addTrack({TrackId(), "collectives", "comm", m_rank, 100 + m_rank});
    m_counters = m_w.addTrack({TrackId(), "counters", "counter", m_rank, 0});
    m_memory = m_w.addTrack({TrackId(), "device memory", kTrackKindMemory, m_rank, 0});
    if (m_spec.gpu) {
      m_stream = m_w.addTrack({TrackId(), "GPU 0 stream 7", kTrackKindStream, m_rank, 7});
      m_api = m_w.addTrack({TrackId(), "CUDA API thread", kTrackKindCudaApi, m_rank, 100 + m_rank});
    }
    for (int s = 0; s < kSteps; ++s) writeStep(s);
    m_w.addConfigChange(m_run, {1, local(kT0Ns + kStepNs + 1), "moe.top_k", "2", "1", "cli"});
    m_w.addStat({"cupti_dropped_records", m_rank == 1 ? "warning" : "info", m_rank, "dropped"});
    m_w.addStat({"rank_only_stat_" + std::to_string(m_rank), "info", 1, "one rank's"});
    // A bit mask (GPU trace kinds): rank 1 captured one kind fewer.
    m_w.addStat({"gpu_trace_kinds", "info", m_rank == 1 ? 0xfe : 0xff, "kinds"});
    m_w.setMeta("host", "host-" + std::to_string(m_rank));
  }

  int64_t local(int64_t trueNs) const { return trueNs + m_clock.shiftNs; }

 private:
  void writeStep(int s) {
    const int64_t start = kT0Ns + s * kStepNs;
    m_w.addSlice(
        testing::makeSlice(m_thread, "attention.fwd", local(start + kNsPerMs), kNsPerMs, s, 0));
    m_w.addCounter({m_counters, "memory.activations_bytes", local(start + 3 * kNsPerMs),
                    double(1000 * (s + 1) + m_rank)});
    m_w.addMemoryEvent(
        {m_memory, local(start + kNsPerMs), s, true, 256, 4096 + s, "activations", 256});
    m_w.addMemoryEvent(
        {m_memory, local(start + 4 * kNsPerMs), s, false, 256, 4096 + s, "activations", 0});
    if (m_spec.collectives) writeCollectives(s, start);
    for (int32_t e = 0; e < 2; ++e) m_w.addExpertLoad({s, 0, e, m_rank, 10 + e + m_rank, 0, 0.0});
    const int32_t peer = m_rank ^ 1;
    m_w.addA2aTraffic({s, 0, m_rank, m_rank, 64, "dispatch"});
    m_w.addA2aTraffic({s, 0, m_rank, peer, 32, "dispatch"});
    if (m_spec.gpu) writeGpu(s, start);
    writeSwap(s, start);
    m_w.addSlice(testing::makeSlice(m_thread, "step", local(start), 15 * kNsPerMs, s, -1, "step"));
    m_w.addStep({m_run, m_rank, s, local(start), local(start + 15 * kNsPerMs), 2.0 - 0.1 * s, 0.01,
                 64, 1000.0, 1 << 20, 1.0, 1e-3});
  }

  // Swap: a plan at step 0 (layers 0 and 1, two tensors; free lag 2, ops, min_bytes, recompute
  // ops and per-layer recompute times of 0.5 + rank ms, estimated), per step
  // one offload (compute waited 200 us for it from +2.8 ms in odd steps) and one late reload of
  // layer `rank` % 2, and the step's watermarks.
  void writeSwap(int s, int64_t start) {
    const int32_t layer = m_rank % 2;
    if (s == 0) {
      SwapPlanRow plan;
      plan.rank = m_rank;
      plan.mode = "manual";
      plan.layerForwardMs = {1.0, 1.5};
      plan.layerBackwardMs = {2.0, 2.5};
      plan.layerOtherBytes = {10, 20};
      plan.tensors = {{0, "expert_fc1", 512, layer == 0, "picked"},
                      {1, "expert_fc1", 512, layer == 1, "picked"}};
      plan.summary = "rank " + std::to_string(m_rank);
      plan.freeLagLayers = 2;
      plan.ops = "expert_fc1";
      plan.minBytes = 256 + m_rank;
      plan.recomputeOps = "moe_act";
      plan.layerRecomputeMs = {0.5 + m_rank, 0.5 + m_rank};
      plan.recomputeMsSource = "estimate";
      m_w.addSwapPlan(m_run, plan);
    }
    const int64_t bytes = 512 + m_rank;
    const bool waited = s % 2 == 1;
    m_w.addSwapEvent(m_run, {0, s, m_rank, layer, "expert_fc1", bytes, true,
                             local(start + 2 * kNsPerMs), local(start + 3 * kNsPerMs),
                             waited ? local(start + 2800 * kNsPerUs) : 0,
                             waited ? 200 * kNsPerUs : 0, false});
    m_w.addSwapEvent(m_run, {0, s, m_rank, layer, "expert_fc1", bytes, false,
                             local(start + 8 * kNsPerMs), local(start + 9 * kNsPerMs),
                             local(start + 8500 * kNsPerUs), 500 * kNsPerUs, false});
    m_w.addSwapStep(m_run, {s, m_rank, 4096 + m_rank, 8192, bytes, 1 << 20, 1, 1, 1, bytes,
                            2.0, 0.5, false});
  }

  // A collective that ends at true time `endNs` on every peer (plus this rank's jitter).
  void collective(int s, const std::string& group, const std::string& peers, int64_t seq,
                  const std::string& op, const std::string& phase, int64_t endNs) {
    std::uniform_int_distribution<int64_t> jitter(-m_clock.jitterNs, m_clock.jitterNs);
    const int64_t durNs = kNsPerMs + m_rank * 100 * kNsPerUs;
    const int64_t startNs = local(endNs + jitter(m_random)) - durNs;
    m_w.addSlice({SliceId(), m_comm, startNs, durNs, op, kCategoryCollective, s, 0, seq, 0});
    m_w.addCollective(
        {m_comm, startNs, durNs, s, 0, m_rank, op, group, phase, seq, 128, 128, peers, true});
  }

  void writeCollectives(int s, int64_t start) {
    const bool low = m_rank < 2;
    const std::string epPeers = low ? "0,1" : "2,3";
    const int64_t epEnd = start + (low ? 5 : 12) * kNsPerMs;
    collective(s, "ep", epPeers, 2 * s, "all_to_all_v", "dispatch", epEnd);
    collective(s, "ep", epPeers, 2 * s + 1, "all_to_all_v", "combine", epEnd + kNsPerMs);
    collective(s, "world", "0,1,2,3", s, "all_reduce", "", start + 14 * kNsPerMs);
  }

  void writeGpu(int s, int64_t start) {
    const int64_t correlation = 1000 + s;  // the same ids on every rank, as CUPTI gives them
    m_w.addCudaApi({SliceId(), m_api, local(start + 1900 * kNsPerUs), 5 * kNsPerUs,
                    "cudaLaunchKernel", kCategoryApi, s, 0, correlation, 0},
                   {"runtime", 211, 100 + m_rank, 0, "experts.fwd"});
    GpuKernelRow kernel;
    kernel.streamId = 7;
    kernel.mangledName = "_Z6expertv";
    kernel.shortName = "expert";
    kernel.phase = "experts.fwd";
    m_w.addGpuKernel({SliceId(), m_stream, local(start + 2 * kNsPerMs), 500 * kNsPerUs, "expert()",
                      kCategoryKernel, s, 0, correlation, 0},
                     kernel);
    m_w.addGpuMemcpy({SliceId(), m_stream, local(start + 2600 * kNsPerUs), 10 * kNsPerUs,
                      "memcpy DtoH", kCategoryMemcpy, s, 0, correlation + 100, 0},
                     {0, 7, 2, 3, 2, 4096, "experts.fwd"});
    m_w.addGpuMemset({SliceId(), m_stream, local(start + 2700 * kNsPerUs), 10 * kNsPerUs, "memset",
                      kCategoryMemset, s, 0, correlation + 200, 0},
                     {0, 7, 256, 0, 3, "step"});
    m_w.addGpuSync({SliceId(), m_api, local(start + 2800 * kNsPerUs), 10 * kNsPerUs,
                    "cudaStreamSynchronize", kCategorySync, s, -1, correlation + 300, 0},
                   {3, 7, 0, "step"});
    GpuMemoryRow memory;
    memory.track = s == 0 ? TrackId() : m_api;  // one row with an unknown track (-1)
    memory.tsNs = local(start + 1800 * kNsPerUs);
    memory.bytes = 4096;
    memory.correlationId = correlation;
    memory.step = s;
    memory.phase = "experts.fwd";
    m_w.addGpuMemory(memory);
  }

  TraceWriter& m_w;
  RunId m_run;
  int32_t m_rank;
  const RunSpec& m_spec;
  RankClock m_clock;
  std::mt19937_64 m_random;
  TrackId m_thread, m_comm, m_counters, m_memory, m_stream, m_api;
};

RunRow runRow(const RunSpec& spec, int64_t startNs) {
  RunRow run;
  run.name = spec.name;
  run.configToml = spec.config;
  run.backend = "cpu";
  run.worldSize = kWorldSize;
  run.startNs = startNs;
  run.startUnixNs = 1'700'000'000 * kNsPerSecond;
  return run;
}

// A tuner_trial row (a table the writer has no call for) at true time `atNs`.
void addRawRows(const std::string& path, int64_t atNs) {
  execSql(path,
          "INSERT INTO tuner_trial(run, start_ns, end_ns, settings_json, metrics_json, "
          "verdict) VALUES (1, " +
              std::to_string(atNs) + ", " + std::to_string(atNs + 9) + ", '{}', '{}', 'kept')");
}

// Writes rank `rank`'s file (its own run row, clock shifted) and returns its path.
std::string writeRankFile(const TempDir& dir, const std::string& name, int32_t rank,
                          const RunSpec& spec, RankClock clock, bool raw = true) {
  const std::string path = dir.path(name);
  auto created = TraceWriter::create(path);
  EXPECT_TRUE(created.isOk()) << created.status().toString();
  if (!created.isOk()) return path;
  auto writer = std::move(created).value();
  const RunId run = writer->addRun(runRow(spec, kT0Ns - kNsPerMs + clock.shiftNs));
  RankWriter(*writer, run, rank, spec, clock).write();
  writer->finishRun(run, "completed", "", kT0Ns + kSteps * kStepNs + clock.shiftNs);
  EXPECT_TRUE(writer->close().isOk());
  if (raw) addRawRows(path, kT0Ns + 7 * kNsPerMs + clock.shiftNs);
  return path;
}

// The 4 rank files with rank r's clock shifted by shifts[r].
std::vector<std::string> writeRankFiles(const TempDir& dir, const RunSpec& spec,
                                        const std::vector<int64_t>& shifts, int64_t jitterNs) {
  std::vector<std::string> paths;
  for (int32_t r = 0; r < kWorldSize; ++r) {
    paths.push_back(writeRankFile(dir, "t.rank" + std::to_string(r) + ".db", r, spec,
                                  {shifts[size_t(r)], jitterNs}));
  }
  return paths;
}

std::string one(const std::string& path, const std::string& sql) {
  std::vector<std::string> rows = queryCsv(path, sql);
  return rows.empty() ? "<no row>" : rows.front();
}

int64_t count(const std::string& path, const std::string& table) {
  return std::stoll(one(path, "SELECT count(*) FROM " + table));
}

std::vector<std::string> filesIn(const TempDir& dir) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir.root())) {
    names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

// 1 s, -5 s, 2.5 s plus 3 ms: clocks of different hosts.
const std::vector<int64_t> kShifts = {kNsPerSecond, -5 * kNsPerSecond, 2'503 * kNsPerMs, 0};

TEST(TraceMerge, RecoversTheClockOffsetsFromSharedCollectives) {
  TempDir dir;
  const std::vector<std::string> inputs = writeRankFiles(dir, RunSpec{}, kShifts, 100 * kNsPerUs);
  const std::string out = dir.path("merged.db");
  // Inputs in any order.
  auto merged = mergeTraces({inputs[2], inputs[0], inputs[3], inputs[1]}, out);
  ASSERT_TRUE(merged.isOk()) << merged.status().toString();
  ASSERT_EQ(merged->inputs.size(), 4u);
  EXPECT_EQ(merged->worldSize, kWorldSize);
  EXPECT_TRUE(merged->missingRanks.empty());
  for (int32_t r = 0; r < kWorldSize; ++r) {
    const MergedInput& input = merged->inputs[size_t(r)];
    EXPECT_EQ(input.path, inputs[size_t(r)]);
    EXPECT_EQ(input.ranks, std::vector<int32_t>{r});
    // Onto rank 0's clock: its shift minus this rank's.
    const int64_t truthNs = kShifts[0] - kShifts[size_t(r)];
    EXPECT_NEAR(double(input.clockOffsetNs), double(truthNs), double(kNsPerMs)) << "rank " << r;
    EXPECT_EQ(input.alignment,
              r == 0 ? ClockAlignmentMethod::kReference : ClockAlignmentMethod::kCollectives);
    // The world all-reduces always; the ep all-to-alls only with rank 0's own group.
    EXPECT_EQ(input.sharedCollectives, r == 0 ? 0 : r == 1 ? 3 * kSteps : kSteps);
    EXPECT_EQ(one(out, "SELECT value FROM meta WHERE key = 'clock_offset_ns.rank" +
                           std::to_string(r) + "'"),
              std::to_string(input.clockOffsetNs));
  }
  // Collectives with equal (group, seq, peers) end together on the merged clock.
  EXPECT_EQ(one(out,
                "SELECT count(*) FROM (SELECT comm_group, seq, peers, count(*) AS n, "
                "max(start_ns + dur_ns) - min(start_ns + dur_ns) AS spread "
                "FROM collective GROUP BY 1, 2, 3) WHERE spread > 1000000 OR n != "
                "CASE comm_group WHEN 'world' THEN 4 ELSE 2 END"),
            "0");
  EXPECT_EQ(one(out, "SELECT count(DISTINCT comm_group || seq || peers) FROM collective"),
            std::to_string(kSteps + 2 * 2 * kSteps));
  EXPECT_EQ(one(out, "SELECT count(*) FROM run"), "1");
  EXPECT_EQ(one(out, "SELECT world_size || ' ' || status FROM run"), "4 completed");
  // The earliest start over the ranks: rank 0's, give or take the alignment error.
  EXPECT_NEAR(std::stod(one(out, "SELECT start_ns FROM run")),
              double(kT0Ns - kNsPerMs + kShifts[0]), double(kNsPerMs));
}

TEST(TraceMerge, EveryTimeColumnMovesByItsFilesOffsetAndRowCountsAdd) {
  TempDir dir;
  const std::vector<std::string> inputs = writeRankFiles(dir, RunSpec{}, kShifts, 0);
  const std::string out = dir.path("merged.db");
  auto merged = mergeTraces(inputs, out);
  ASSERT_TRUE(merged.isOk()) << merged.status().toString();
  for (int32_t r = 0; r < kWorldSize; ++r) {  // exact without jitter
    EXPECT_EQ(merged->inputs[size_t(r)].clockOffsetNs, kShifts[0] - kShifts[size_t(r)]);
  }
  int64_t inputRows = 0;
  for (const std::string& table : detail::mergedRowTables()) {
    int64_t sumOfInputs = 0;
    for (const std::string& input : inputs) sumOfInputs += count(input, table);
    if (table == "stats") {  // equal names merge into one row
      EXPECT_EQ(count(out, table), kWorldSize + 2);
    } else {
      EXPECT_EQ(count(out, table), sumOfInputs) << table;
      EXPECT_GT(sumOfInputs, 0) << table << ": the fixture must fill every table";
    }
    inputRows += sumOfInputs;
    for (const std::string& column :
         queryCsv(out, "SELECT name FROM pragma_table_info('" + table +
                           "') WHERE name LIKE "
                           "'%\\_ns' ESCAPE '\\' AND name NOT IN ('dur_ns', 'stall_ns')")) {
      // sum(column) over the output = sum over inputs of (their sum + rows * offset); the
      // needed_ns of an offload compute did not wait for is 0, not a time, and stays 0.
      const std::string where = table == "swap_event" && column == "needed_ns"
                                    ? " WHERE to_host = 0 OR needed_ns != 0"
                                    : "";
      __int128 want = 0;
      for (size_t i = 0; i < inputs.size(); ++i) {
        want += std::stoll(one(inputs[i], "SELECT sum(" + column + ") FROM " + table)) +
                __int128(std::stoll(one(inputs[i], "SELECT count(*) FROM " + table + where))) *
                    merged->inputs[i].clockOffsetNs;
      }
      EXPECT_EQ(one(out, "SELECT sum(" + column + ") FROM " + table), std::to_string(int64_t(want)))
          << table << "." << column;
    }
  }
  EXPECT_EQ(merged->rows, inputRows);
  EXPECT_EQ(one(out,
                "SELECT value || ' ' || severity FROM stats WHERE name = "
                "'cupti_dropped_records'"),
            "6 warning");
  // A bit-mask stat keeps the bits of every rank instead of adding up.
  EXPECT_EQ(one(out, "SELECT value FROM stats WHERE name = 'gpu_trace_kinds'"),
            std::to_string(0xfe));
  // The run row's times too: earliest start, latest end on rank 0's clock.
  EXPECT_EQ(one(out, "SELECT start_ns || ' ' || end_ns FROM run"),
            std::to_string(kT0Ns - kNsPerMs + kShifts[0]) + " " +
                std::to_string(kT0Ns + kSteps * kStepNs + kShifts[0]));
}

TEST(TraceMerge, IdsStayConsistentAndCorrelationIdsStopColliding) {
  TempDir dir;
  const std::string out = dir.path("merged.db");
  auto merged = mergeTraces(writeRankFiles(dir, RunSpec{}, kShifts, 0), out);
  ASSERT_TRUE(merged.isOk()) << merged.status().toString();
  EXPECT_EQ(one(out, "SELECT count(*) FROM track"), std::to_string(6 * kWorldSize));
  EXPECT_EQ(one(out,
                "SELECT group_concat(rank) FROM (SELECT DISTINCT rank FROM track "
                "ORDER BY 1)"),
            "0,1,2,3");
  EXPECT_EQ(one(out, "SELECT count(DISTINCT rank) FROM step"), "4");
  const char* dangling[] = {
      "SELECT count(*) FROM slice WHERE track NOT IN (SELECT id FROM track) OR name NOT IN "
      "(SELECT id FROM string) OR category NOT IN (SELECT id FROM string)",
      "SELECT count(*) FROM counter WHERE track NOT IN (SELECT id FROM track)",
      "SELECT count(*) FROM memory_event WHERE track NOT IN (SELECT id FROM track)",
      "SELECT count(*) FROM collective c LEFT JOIN track t ON t.id = c.track WHERE t.rank IS "
      "NOT c.rank",
      "SELECT count(*) FROM gpu_kernel k LEFT JOIN slice s ON s.id = k.slice WHERE s.id IS NULL "
      "OR k.phase NOT IN (SELECT id FROM string)",
      "SELECT count(*) FROM cuda_api a LEFT JOIN slice s ON s.id = a.slice WHERE s.id IS NULL",
      "SELECT count(*) FROM gpu_memory WHERE track != -1 AND track NOT IN (SELECT id FROM track)",
      "SELECT count(*) FROM step WHERE run NOT IN (SELECT id FROM run)",
      "SELECT count(*) FROM (SELECT text FROM string GROUP BY text HAVING count(*) > 1)",
  };
  for (const char* sql : dangling) EXPECT_EQ(one(out, sql), "0") << sql;
  EXPECT_EQ(one(out, "SELECT count(*) FROM gpu_memory WHERE track = -1"), "4");
  // Each kernel's correlation id finds exactly its own rank's launch, and no other.
  EXPECT_EQ(one(out,
                "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN "
                "CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = k.correlationId"),
            std::to_string(kSteps * kWorldSize));
  EXPECT_EQ(one(out,
                "SELECT count(*) FROM slice k JOIN track kt ON kt.id = k.track JOIN slice a "
                "ON a.correlation_id = k.correlation_id JOIN track at ON at.id = a.track "
                "JOIN gpu_kernel g ON g.slice = k.id JOIN cuda_api c ON c.slice = a.id "
                "WHERE kt.rank = at.rank"),
            std::to_string(kSteps * kWorldSize));
  // Collective slices keep their sequence numbers as correlation ids.
  EXPECT_EQ(one(out,
                "SELECT count(*) FROM slice s JOIN track t ON t.id = s.track "
                "JOIN collective c ON c.track = s.track AND c.start_ns = s.start_ns "
                "WHERE s.correlation_id != c.seq"),
            "0");
  EXPECT_EQ(merged->inputs[0].gpuCorrelationOffset, 0);
  EXPECT_GT(merged->inputs[1].gpuCorrelationOffset, 0);

  // The reader, the GPU details and the Chrome export read it.
  auto reader = TraceReader::open(out);
  ASSERT_TRUE(reader.isOk()) << reader.status().toString();
  auto runs = (*reader)->runs();
  ASSERT_TRUE(runs.isOk());
  ASSERT_EQ(runs->size(), 1u);
  auto steps = (*reader)->steps(runs->front().id);
  ASSERT_TRUE(steps.isOk());
  EXPECT_EQ(steps->size(), size_t(kSteps * kWorldSize));
  const int64_t rank3Kernel = std::stoll(one(out, "SELECT max(g.slice) FROM gpu_kernel g"));
  auto details = (*reader)->gpuSliceDetails(SliceId(rank3Kernel));
  ASSERT_TRUE(details.isOk()) << details.status().toString();
  ASSERT_TRUE(details->has_value());
  ASSERT_TRUE((*details)->apiCall.has_value());
  EXPECT_EQ((*details)->apiCall->name, "cudaLaunchKernel");
  EXPECT_EQ((*details)->apiCall->correlationId, (*details)->slice.correlationId);
  EXPECT_EQ(one(out, "SELECT t.rank FROM slice s JOIN track t ON t.id = s.track WHERE s.id = " +
                         std::to_string((*details)->apiCall->id.value)),
            "3");
  EXPECT_TRUE(exportChromeTrace(**reader, dir.path("merged.json")).isOk());
  auto meta = (*reader)->meta();
  ASSERT_TRUE(meta.isOk());
  EXPECT_EQ((*meta)["host.rank2"], "host-2");
  EXPECT_EQ((*meta)["merged_from.rank3"], dir.path("t.rank3.db"));
  EXPECT_EQ((*meta)[detail::kMetaMaxSliceDurNs], std::to_string(15 * kNsPerMs));
}

// The rows of the tables a viewer reads, by content (ids and correlation ids of GPU rows
// resolved or left out), in a fixed order.
std::vector<std::string> contents(const std::string& path) {
  const char* queries[] = {
      "SELECT t.rank, t.name, t.kind, s.start_ns, s.dur_ns, n.text, c.text, s.step, s.layer, "
      "CASE WHEN c.text = 'collective' THEN s.correlation_id ELSE 0 END, s.depth FROM slice s "
      "JOIN track t ON t.id = s.track JOIN string n ON n.id = s.name JOIN string c ON "
      "c.id = s.category ORDER BY 1, 2, 4, 6",
      "SELECT t.rank, n.text, c.ts_ns, c.value FROM counter c JOIN track t ON t.id = c.track "
      "JOIN string n ON n.id = c.name ORDER BY 1, 2, 3",
      "SELECT t.rank, m.ts_ns, m.kind, m.bytes, m.address, s.text, m.in_use_bytes FROM "
      "memory_event m JOIN track t ON t.id = m.track JOIN string s ON s.id = m.category "
      "ORDER BY 1, 2, 3",
      "SELECT rank, step, start_ns, end_ns, loss, tokens FROM step ORDER BY rank, step",
      "SELECT rank, comm_group, seq, peers, start_ns, dur_ns, op, phase FROM collective "
      "ORDER BY 1, 2, 3",
      "SELECT * FROM expert_load ORDER BY step, layer, expert, rank",
      "SELECT * FROM a2a_traffic ORDER BY step, src_rank, dst_rank",
      "SELECT step, ts_ns, key FROM config_change ORDER BY ts_ns",
      "SELECT * FROM swap_event ORDER BY rank, start_ns",
      "SELECT * FROM swap_step ORDER BY rank, step",
      "SELECT p.rank, p.mode, p.summary, p.recompute_ops, p.recompute_ms_source, l.layer, "
      "l.forward_ms, l.other_bytes, l.recompute_ms FROM swap_plan p "
      "JOIN swap_plan_layer l ON l.plan = p.id ORDER BY 1, 6",
      "SELECT p.rank, t.idx, t.layer, t.op, t.bytes, t.swapped FROM swap_plan p "
      "JOIN swap_plan_tensor t ON t.plan = p.id ORDER BY 1, 2",
      "SELECT name, world_size, start_ns, end_ns, status FROM run",
  };
  std::vector<std::string> out;
  for (const char* sql : queries) {
    for (std::string& row : queryCsv(path, sql)) out.push_back(std::move(row));
  }
  return out;
}

TEST(TraceMerge, MergedRankFilesEqualTheTraceOfInProcessRanks) {
  TempDir dir;
  RunSpec spec;
  spec.gpu = false;
  // In-process ranks: one writer, one run, one clock.
  const std::string inProcess = dir.path("in_process.db");
  {
    auto created = TraceWriter::create(inProcess);
    ASSERT_TRUE(created.isOk());
    auto writer = std::move(created).value();
    const RunId run = writer->addRun(runRow(spec, kT0Ns - kNsPerMs));
    for (int32_t r = 0; r < kWorldSize; ++r) RankWriter(*writer, run, r, spec, {}).write();
    writer->finishRun(run, "completed", "", kT0Ns + kSteps * kStepNs);
    ASSERT_TRUE(writer->close().isOk());
  }
  std::vector<std::string> inputs;
  for (int32_t r = 0; r < kWorldSize; ++r) {
    // Rank 0 keeps the true clock, so the merge lands on the same clock as the in-process file.
    inputs.push_back(writeRankFile(dir, "r" + std::to_string(r) + ".db", r, spec,
                                   {r == 0 ? 0 : kShifts[size_t(r)], 0}, /*raw=*/false));
  }
  const std::string out = dir.path("merged.db");
  auto merged = mergeTraces(inputs, out);
  ASSERT_TRUE(merged.isOk()) << merged.status().toString();
  EXPECT_EQ(contents(out), contents(inProcess));
  EXPECT_EQ(contents(out).size(), contents(inProcess).size());
}

// Each rank's swap rows survive the merge with their rank, on the merged clock, and each plan
// keeps its own layer and tensor rows; the reader's swap queries see every rank.
TEST(TraceMerge, KeepsEveryRanksSwapRows) {
  TempDir dir;
  const std::vector<std::string> inputs = writeRankFiles(dir, RunSpec{}, kShifts, 0);
  const std::string out = dir.path("merged.db");
  auto merged = mergeTraces(inputs, out);
  ASSERT_TRUE(merged.isOk()) << merged.status().toString();
  auto reader = TraceReader::open(out);
  ASSERT_TRUE(reader.isOk()) << reader.status().toString();
  auto plans = (*reader)->swapPlans();
  ASSERT_TRUE(plans.isOk()) << plans.status().toString();
  ASSERT_EQ(plans->size(), size_t(kWorldSize));
  for (int32_t r = 0; r < kWorldSize; ++r) {
    const SwapPlanRow& plan = (*plans)[size_t(r)];
    EXPECT_EQ(plan.rank, r);
    EXPECT_EQ(plan.summary, "rank " + std::to_string(r));
    EXPECT_EQ(plan.layerForwardMs, (std::vector<double>{1.0, 1.5}));
    ASSERT_EQ(plan.tensors.size(), 2u);
    EXPECT_EQ(plan.tensors[size_t(r % 2)].swapped, true);
    EXPECT_EQ(plan.tensors[size_t(1 - r % 2)].swapped, false);
    EXPECT_EQ(plan.freeLagLayers, 2);
    EXPECT_EQ(plan.ops, "expert_fc1");
    EXPECT_EQ(plan.minBytes, 256 + r);
    EXPECT_EQ(plan.recomputeOps, "moe_act");
    EXPECT_EQ(plan.layerRecomputeMs, (std::vector<double>{0.5 + r, 0.5 + r}));
    EXPECT_EQ(plan.recomputeMsSource, "estimate");
  }
  for (int32_t r = 0; r < kWorldSize; ++r) {
    auto copies = (*reader)->swapEvents(TimeWindow::all(), r);
    ASSERT_TRUE(copies.isOk());
    ASSERT_EQ(copies->size(), size_t(2 * kSteps)) << r;
    // On rank 0's clock: the true time plus rank 0's shift, whatever this rank's clock read.
    const SwapEventRow& firstReload = (*copies)[1];
    EXPECT_FALSE(firstReload.toHost);
    EXPECT_EQ(firstReload.startNs, kT0Ns + 8 * kNsPerMs + kShifts[0]) << r;
    EXPECT_EQ(firstReload.neededNs, kT0Ns + 8500 * kNsPerUs + kShifts[0]) << r;
    EXPECT_EQ((*copies)[0].neededNs, 0);
    // Step 1's offload was waited for: its needed time is on the merged clock too.
    const SwapEventRow& waitedOffload = (*copies)[2];
    EXPECT_TRUE(waitedOffload.toHost);
    EXPECT_EQ(waitedOffload.stallNs, 200 * kNsPerUs);
    EXPECT_EQ(waitedOffload.neededNs, waitedOffload.startNs + 800 * kNsPerUs) << r;
    EXPECT_EQ(firstReload.bytes, 512 + r);
  }
  auto steps = (*reader)->swapSteps();
  ASSERT_TRUE(steps.isOk());
  EXPECT_EQ(steps->size(), size_t(kWorldSize * kSteps));
  auto layers = (*reader)->swapLayerSummary();
  ASSERT_TRUE(layers.isOk());
  ASSERT_EQ(layers->size(), size_t(kWorldSize));
  for (const SwapLayerSummary& l : *layers) {
    EXPECT_EQ(l.layer, l.rank % 2);
    EXPECT_EQ(l.lateReloads, kSteps);
  }
  EXPECT_EQ(one(out, "SELECT value FROM meta WHERE key = 'max_swap_dur_ns'"),
            std::to_string(kNsPerMs));
}

// An input from before swap (no swap tables) merges with one that has them.
TEST(TraceMerge, InputsWithoutSwapTablesMerge) {
  TempDir dir;
  std::vector<std::string> inputs = writeRankFiles(dir, RunSpec{}, kShifts, 0);
  execSql(inputs[1],
          "DROP TABLE swap_event; DROP TABLE swap_step; DROP TABLE swap_plan; "
          "DROP TABLE swap_plan_layer; DROP TABLE swap_plan_tensor;");
  const std::string out = dir.path("merged.db");
  auto merged = mergeTraces(inputs, out);
  ASSERT_TRUE(merged.isOk()) << merged.status().toString();
  EXPECT_EQ(count(out, "swap_event"), 2 * kSteps * (kWorldSize - 1));
  EXPECT_EQ(one(out, "SELECT count(*) FROM swap_event WHERE rank = 1"), "0");
  EXPECT_EQ(count(out, "swap_plan"), kWorldSize - 1);
  EXPECT_EQ(count(out, "swap_plan_tensor"), 2 * (kWorldSize - 1));
}

// Inputs whose plans are from before the columns added to swap_plan later merge with current
// ones: rank 1's lacks free_lag_layers, ops and min_bytes (read 1, "" and 0: unknown), rank 2's
// the recompute columns (no recompute ops or times: unknown), rank 3's both; rank 0 keeps all.
TEST(TraceMerge, InputPlansWithoutLaterColumnsMerge) {
  TempDir dir;
  std::vector<std::string> inputs = writeRankFiles(dir, RunSpec{}, kShifts, 0);
  for (size_t i : {size_t(1), size_t(3)}) {
    execSql(inputs[i],
            "ALTER TABLE swap_plan DROP COLUMN free_lag_layers; "
            "ALTER TABLE swap_plan DROP COLUMN ops; ALTER TABLE swap_plan DROP COLUMN min_bytes;");
  }
  for (size_t i : {size_t(2), size_t(3)}) {
    execSql(inputs[i],
            "ALTER TABLE swap_plan DROP COLUMN recompute_ops; "
            "ALTER TABLE swap_plan DROP COLUMN recompute_ms_source; "
            "ALTER TABLE swap_plan_layer DROP COLUMN recompute_ms;");
  }
  const std::string out = dir.path("merged.db");
  auto merged = mergeTraces(inputs, out);
  ASSERT_TRUE(merged.isOk()) << merged.status().toString();
  auto reader = TraceReader::open(out);
  ASSERT_TRUE(reader.isOk()) << reader.status().toString();
  auto plans = (*reader)->swapPlans();
  ASSERT_TRUE(plans.isOk()) << plans.status().toString();
  ASSERT_EQ(plans->size(), size_t(kWorldSize));
  for (const SwapPlanRow& plan : *plans) {
    SCOPED_TRACE(plan.rank);
    const bool noSettings = plan.rank == 1 || plan.rank == 3;
    const bool noRecompute = plan.rank == 2 || plan.rank == 3;
    EXPECT_EQ(plan.freeLagLayers, noSettings ? 1 : 2);
    EXPECT_EQ(plan.ops, noSettings ? "" : "expert_fc1");
    EXPECT_EQ(plan.minBytes, noSettings ? 0 : 256 + plan.rank);
    EXPECT_EQ(plan.recomputeOps, noRecompute ? "" : "moe_act");
    EXPECT_EQ(plan.recomputeMsSource, noRecompute ? "" : "estimate");
    EXPECT_EQ(plan.layerRecomputeMs, noRecompute ? std::vector<double>{}
                                                 : std::vector<double>(2, 0.5 + plan.rank));
    EXPECT_EQ(plan.layerForwardMs, (std::vector<double>{1.0, 1.5}));
  }
}

TEST(TraceMerge, WithoutSharedCollectivesAlignsRunStartsAndSaysSo) {
  TempDir dir;
  RunSpec spec;
  spec.collectives = false;
  const std::vector<std::string> inputs = writeRankFiles(dir, spec, kShifts, 0);
  const std::string out = dir.path("merged.db");
  auto merged = mergeTraces(inputs, out);
  ASSERT_TRUE(merged.isOk()) << merged.status().toString();
  EXPECT_EQ(merged->inputs[1].alignment, ClockAlignmentMethod::kRunStart);
  EXPECT_EQ(merged->inputs[1].clockOffsetNs, kShifts[0] - kShifts[1]);
  EXPECT_EQ(one(out, "SELECT value FROM meta WHERE key = 'clock_alignment.rank1'"), "run_start");
  EXPECT_EQ(one(out, "SELECT value FROM stats WHERE name = 'merge_clock_aligned_by_run_start'"),
            "3");
}

TEST(TraceMerge, MissingRanksAreRefusedUnlessAllowedAndThenRecorded) {
  TempDir dir;
  const std::vector<std::string> all = writeRankFiles(dir, RunSpec{}, kShifts, 0);
  const std::string out = dir.path("merged.db");
  auto refused = mergeTraces({all[0], all[2]}, out);
  ASSERT_FALSE(refused.isOk());
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("no input holds rank(s) 1, 3"), std::string::npos)
      << refused.status().message();
  EXPECT_FALSE(fs::exists(out));

  MergeOptions options;
  options.allowMissingRanks = true;
  auto merged = mergeTraces({all[0], all[2]}, out, options);
  ASSERT_TRUE(merged.isOk()) << merged.status().toString();
  EXPECT_EQ(merged->missingRanks, (std::vector<int32_t>{1, 3}));
  EXPECT_EQ(one(out, "SELECT value FROM meta WHERE key = 'missing_ranks'"), "1,3");
  EXPECT_EQ(one(out, "SELECT value FROM stats WHERE name = 'merge_missing_ranks'"), "2");
}

// Issue 19, item 7: the merged file's heartbeat is the newest of its inputs' (a merged "running"
// run looks alive only while some rank's writer was), not one value per rank.
TEST(TraceMerge, HeartbeatIsTheNewestOfTheInputs) {
  TempDir dir;
  const std::vector<std::string> inputs = writeRankFiles(dir, RunSpec{}, kShifts, 0);
  for (size_t i = 0; i < inputs.size(); ++i) {
    const int64_t heartbeat = 1'000'000 + (i == 2 ? 500 : int64_t(i));
    execSql(inputs[i], "UPDATE meta SET value = '" + std::to_string(heartbeat) +
                           "' WHERE key = 'heartbeat_unix_ms'");
  }
  const std::string out = dir.path("merged.db");
  auto merged = mergeTraces(inputs, out);
  ASSERT_TRUE(merged.isOk()) << merged.status().toString();
  EXPECT_EQ(one(out, "SELECT value FROM meta WHERE key = 'heartbeat_unix_ms'"), "1000500");
  EXPECT_EQ(one(out, "SELECT count(*) FROM meta WHERE key LIKE 'heartbeat_unix_ms.rank%'"), "0");
}

// The refusals: the message names the file and the problem; nothing is written.
class TraceMergeRefuses : public ::testing::Test {
 protected:
  void SetUp() override { m_inputs = writeRankFiles(m_dir, RunSpec{}, kShifts, 0); }

  void expectRefused(const std::vector<std::string>& inputs, StatusCode code,
                     const std::vector<std::string>& mentions, const MergeOptions& options = {},
                     const std::string& out = "") {
    const std::vector<std::string> before = filesIn(m_dir);
    auto merged = mergeTraces(inputs, out.empty() ? m_out : out, options);
    ASSERT_FALSE(merged.isOk());
    EXPECT_EQ(merged.status().code(), code) << merged.status().toString();
    for (const std::string& text : mentions) {
      EXPECT_NE(merged.status().message().find(text), std::string::npos)
          << "'" << text << "' not in: " << merged.status().message();
    }
    EXPECT_EQ(filesIn(m_dir), before) << "a refused merge wrote or removed a file";
  }

  TempDir m_dir;
  std::vector<std::string> m_inputs;
  std::string m_out = m_dir.path("merged.db");
};

TEST_F(TraceMergeRefuses, FilesOfAnotherRun) {
  RunSpec other;
  other.config += "seed = 2\n";
  const std::string stranger = writeRankFile(m_dir, "other.rank1.db", 1, other, {});
  expectRefused({m_inputs[0], stranger, m_inputs[2], m_inputs[3]}, StatusCode::kInvalidArgument,
                {stranger, "not from the same run", "config differs", "seed = 2"});
  RunSpec renamed;
  renamed.name = "another-run";
  const std::string named = writeRankFile(m_dir, "named.rank1.db", 1, renamed, {});
  expectRefused({m_inputs[0], named, m_inputs[2], m_inputs[3]}, StatusCode::kInvalidArgument,
                {named, "run name 'another-run'"});
}

TEST_F(TraceMergeRefuses, ARankInTwoFiles) {
  const std::string copy = m_dir.path("copy.rank2.db");
  fs::copy_file(m_inputs[2], copy);
  expectRefused({m_inputs[0], m_inputs[1], m_inputs[2], copy, m_inputs[3]},
                StatusCode::kInvalidArgument, {"rank 2 is in both", m_inputs[2], copy});
  expectRefused({m_inputs[0], m_inputs[1], m_inputs[1]}, StatusCode::kInvalidArgument,
                {"given twice", m_inputs[1]});
}

TEST_F(TraceMergeRefuses, AFileThatIsNotATrace) {
  const std::string text = m_dir.path("notes.txt");
  testing::writeFile(text, "not a trace at all, just some words in a file\n");
  expectRefused({m_inputs[0], text}, StatusCode::kDataLoss, {text, "not a MoE Workbench trace"});
  const std::string plainDb = m_dir.path("plain.db");
  execSql(plainDb, "CREATE TABLE t(x)");
  expectRefused({m_inputs[0], plainDb}, StatusCode::kDataLoss, {plainDb, "not a MoE Workbench"});
  expectRefused({m_inputs[0], m_dir.path("absent.db")}, StatusCode::kNotFound, {"absent.db"});
}

TEST_F(TraceMergeRefuses, AnExistingOutputUnlessOverwriting) {
  testing::writeFile(m_out, "keep me");
  expectRefused(m_inputs, StatusCode::kAlreadyExists, {m_out, "already exists"});
  EXPECT_EQ(testing::readFile(m_out), "keep me");
  expectRefused(m_inputs, StatusCode::kInvalidArgument, {m_inputs[2], "also an input"},
                {.overwrite = true}, m_inputs[2]);

  auto merged = mergeTraces(m_inputs, m_out, {.overwrite = true});
  ASSERT_TRUE(merged.isOk()) << merged.status().toString();
  EXPECT_EQ(count(m_out, "step"), kSteps * kWorldSize);
  std::vector<std::string> leftovers;
  for (const std::string& name : filesIn(m_dir)) {
    if (name.find(".tmp") != std::string::npos) leftovers.push_back(name);
  }
  EXPECT_TRUE(leftovers.empty());
}

TEST(TraceMergeClock, MedianIgnoresOutliers) {
  std::vector<int64_t> odd = {5, -100, 7, 6, 900000};
  EXPECT_EQ(detail::medianNs(odd), 6);
  std::vector<int64_t> even = {10, 1, 4, 7};
  EXPECT_EQ(detail::medianNs(even), 5);  // (4 + 7) / 2 rounded down
  std::vector<int64_t> negative = {-3, -4};
  EXPECT_EQ(detail::medianNs(negative), -4);
  std::vector<int64_t> empty;
  EXPECT_EQ(detail::medianNs(empty), 0);
}

TEST(TraceMergeClock, MatchesCollectivesByGroupSeqAndPeers) {
  detail::MergeSource reference, other;
  reference.run.startNs = 100;
  other.run.startNs = 40;
  for (int64_t seq = 0; seq < 5; ++seq) {
    reference.collectiveEnds[{"world", seq, "0,1"}] = 1000 * seq;
    other.collectiveEnds[{"world", seq, "0,1"}] = 1000 * seq - 250 + (seq == 3 ? 9000 : 0);
    other.collectiveEnds[{"ep", seq, "2,3"}] = 7;  // not rank 0's ep group
  }
  const detail::ClockAlignment alignment = detail::alignClock(reference, other);
  EXPECT_EQ(alignment.method, ClockAlignmentMethod::kCollectives);
  EXPECT_EQ(alignment.sharedCollectives, 5);
  EXPECT_EQ(alignment.offsetNs, 250);
  other.collectiveEnds.clear();
  const detail::ClockAlignment byStart = detail::alignClock(reference, other);
  EXPECT_EQ(byStart.method, ClockAlignmentMethod::kRunStart);
  EXPECT_EQ(byStart.offsetNs, 60);
}

// Every table of the schema is merged: row by row, or as the string/run/meta tables.
TEST(TraceMergeSchema, CoversEveryTable) {
  TempDir dir;
  auto db =
      detail::Database::open(dir.path("schema.db"), SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
  ASSERT_TRUE(db.isOk());
  ASSERT_TRUE(db->exec("PRAGMA synchronous=OFF; BEGIN").isOk());
  ASSERT_TRUE(detail::createSchema(*db).isOk());
  ASSERT_TRUE(db->exec("COMMIT").isOk());
  ASSERT_TRUE(db->close().isOk());
  std::set<std::string> handled(detail::mergedRowTables().begin(), detail::mergedRowTables().end());
  handled.insert({"meta", "run", "string"});
  const std::vector<std::string> tables =
      queryCsv(dir.path("schema.db"), "SELECT name FROM sqlite_master WHERE type = 'table'");
  EXPECT_EQ(std::set<std::string>(tables.begin(), tables.end()), handled);
}

}  // namespace
}  // namespace moewb::storage
