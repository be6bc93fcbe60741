// GpuTraceBuilder on synthetic CUPTI-like records (no GPU): kernels take the step, layer and phase
// of their launching API call's innermost "moewb" NVTX range, ranges pair with PhaseEvents by name
// and order within a step, records without an API call are counted, not lost, and records without
// a correlation id (lazy module loading) take the enclosing API call's attribution. Also the
// display-name helpers and the clock calibration.
#include "gpu/gpu_trace_builder.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <sqlite3.h>

#include <filesystem>

#include "gpu/clock_calibration.h"
#include "moewb/storage/trace_reader.h"

namespace moewb::profiler::gpu {
namespace {

NvtxMarker marker(NvtxMarker::Kind kind, uint32_t id, int64_t ts, const std::string& name = "") {
  NvtxMarker m;
  m.kind = kind;
  m.id = id;
  m.tsNs = ts;
  m.threadId = 5;
  m.name = name;
  m.domain = kind == NvtxMarker::Kind::kStart ? "moewb" : "";
  return m;
}

KernelActivity kernel(uint32_t correlation, int64_t start) {
  KernelActivity k;
  k.startNs = start;
  k.endNs = start + 10;
  k.streamId = 7;
  k.correlationId = correlation;
  k.name = "void ns::experts_fwd_kernel<float>(int)";
  k.mangledName = "_Zfake";
  return k;
}

engine::PhaseEvent phase(engine::Phase p, engine::Pass pass, int32_t layer) {
  engine::PhaseEvent e;
  e.step = 0;
  e.layer = layer;
  e.phase = p;
  e.pass = pass;
  return e;
}

TEST(GpuTraceBuilder, KernelsGetStepLayerAndPhaseOfTheirLaunch) {
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("moewb-gpu-builder-" + std::to_string(getpid()) + ".sqlite"))
                               .string();
  auto writer = storage::TraceWriter::create(path, {.overwrite = true});
  ASSERT_TRUE(writer.isOk()) << writer.status().toString();
  GpuTraceBuilder builder(writer->get(), 0);
  builder.setTrainerThread(5);
  // Phase events arrive in close order: experts.fwd (layer 0), experts.fwd (layer 1), forward.
  builder.addPhase(phase(engine::Phase::kExperts, engine::Pass::kForward, 0));
  builder.addPhase(phase(engine::Phase::kExperts, engine::Pass::kForward, 1));
  builder.addPhase(phase(engine::Phase::kForward, engine::Pass::kForward, -1));
  builder.addStep(0, 0, 1000);
  std::vector<Record> records;
  // Device records first: buffers arrive in any order.
  records.push_back(kernel(1, 160));
  records.push_back(kernel(2, 360));
  records.push_back(kernel(3, 610));
  records.push_back(kernel(99, 700));
  records.push_back(kernel(4, 1200));  // launched after the step: waits for a later resolution
  records.push_back(marker(NvtxMarker::Kind::kStart, 1, 10, "forward"));
  records.push_back(marker(NvtxMarker::Kind::kStart, 2, 100, "experts.fwd"));
  records.push_back(marker(NvtxMarker::Kind::kEnd, 2, 200));
  records.push_back(marker(NvtxMarker::Kind::kStart, 3, 300, "experts.fwd"));
  records.push_back(marker(NvtxMarker::Kind::kEnd, 3, 400));
  records.push_back(marker(NvtxMarker::Kind::kEnd, 1, 500));
  for (uint32_t c = 1; c <= 3; ++c) {
    const int64_t start = c == 1 ? 150 : c == 2 ? 350 : 600;
    records.push_back(ApiCall{c, start, start + 5, 5, false, 211, "cudaLaunchKernel", 0});
  }
  records.push_back(ApiCall{4, 1100, 1105, 5, false, 211, "cudaLaunchKernel", 0});
  builder.addRecords(std::move(records));
  builder.resolveThrough(0);
  EXPECT_EQ(builder.counters().unattributed, 1);  // correlation 99
  EXPECT_EQ(builder.counters().unmatchedRanges, 0);
  EXPECT_EQ(builder.counters().unmatchedPhases, 0);
  builder.resolveAll();
  ASSERT_TRUE((*writer)->close().isOk());

  auto reader = storage::TraceReader::open(path);
  ASSERT_TRUE(reader.isOk()) << reader.status().toString();
  auto slices = (*reader)->slices(storage::TimeWindow::all());
  ASSERT_TRUE(slices.isOk());
  std::map<int64_t, std::pair<int64_t, int32_t>> kernels;  // correlation -> (step, layer)
  int nvtx = 0, api = 0;
  for (const auto& s : *slices) {
    if (s.category == "kernel") {
      kernels[s.correlationId] = {s.step, s.layer};
      EXPECT_EQ(s.name, "void ns::experts_fwd_kernel<float>(int)");
    }
    if (s.category == "nvtx") ++nvtx;
    if (s.category == "api") {
      ++api;
      if (s.correlationId == 1) {
        EXPECT_EQ(s.depth, 2);  // under forward and experts.fwd
      }
    }
  }
  EXPECT_EQ(nvtx, 3);
  EXPECT_EQ(api, 4);
  EXPECT_EQ(kernels[1], std::make_pair(int64_t(0), 0));
  EXPECT_EQ(kernels[2], std::make_pair(int64_t(0), 1));
  EXPECT_EQ(kernels[3], std::make_pair(int64_t(0), -1));   // in the step, outside every phase
  EXPECT_EQ(kernels[99], std::make_pair(int64_t(0), -1));  // step by time only
  EXPECT_EQ(kernels[4], std::make_pair(int64_t(-1), -1));  // after the last step
  std::filesystem::remove(path);
}

// phase|step|layer of the gpu_memory row at ts_ns = `ts` ("" if none).
std::string memoryAttribution(const std::string& path, int64_t ts) {
  std::string out;
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK) {
    sqlite3_stmt* stmt = nullptr;
    const std::string sql =
        "SELECT s.text || '|' || m.step || '|' || m.layer FROM gpu_memory m JOIN string s "
        "ON s.id = m.phase WHERE m.ts_ns = " + std::to_string(ts);
    if (sqlite3_prepare_v2(db, sql.c_str(), -1, &stmt, nullptr) == SQLITE_OK &&
        sqlite3_step(stmt) == SQLITE_ROW) {
      out = reinterpret_cast<const char*>(sqlite3_column_text(stmt, 0));
    }
    sqlite3_finalize(stmt);
  }
  sqlite3_close(db);
  return out;
}

MemoryActivity staticAllocation(int64_t ts) {
  MemoryActivity m;
  m.tsNs = ts;
  m.correlationId = 0;  // as CUPTI reports a module's static memory when it is loaded lazily
  m.memoryKind = 6;     // CUPTI_ACTIVITY_MEMORY_KIND_DEVICE_STATIC
  m.bytes = 16;
  return m;
}

TEST(GpuTraceBuilder, RecordsWithoutCorrelationTakeTheEnclosingCall) {
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("moewb-gpu-builder-lazy-" + std::to_string(getpid()) + ".sqlite"))
                               .string();
  auto writer = storage::TraceWriter::create(path, {.overwrite = true});
  ASSERT_TRUE(writer.isOk()) << writer.status().toString();
  GpuTraceBuilder builder(writer->get(), 0);
  builder.setTrainerThread(5);
  builder.addPhase(phase(engine::Phase::kExperts, engine::Pass::kForward, 3));
  builder.addStep(0, 0, 1000);
  std::vector<Record> records;
  records.push_back(marker(NvtxMarker::Kind::kStart, 1, 100, "experts.fwd"));
  records.push_back(marker(NvtxMarker::Kind::kEnd, 1, 400));
  // A runtime launch [150, 260) holding its driver launch [160, 250); the module loads inside.
  records.push_back(ApiCall{1, 150, 260, 5, false, 211, "cudaLaunchKernel", 0});
  records.push_back(ApiCall{1, 160, 250, 5, true, 307, "cuLaunchKernel", 0});
  records.push_back(ApiCall{2, 300, 310, 5, false, 211, "cudaLaunchKernel", 0});
  records.push_back(staticAllocation(200));  // inside both calls
  records.push_back(staticAllocation(500));  // inside the step, outside every call
  builder.addRecords(std::move(records));
  builder.resolveAll();
  EXPECT_EQ(builder.counters().unattributed, 1);  // the one at 500
  ASSERT_TRUE((*writer)->close().isOk());
  EXPECT_EQ(memoryAttribution(path, 200), "experts.fwd|0|3");
  EXPECT_EQ(memoryAttribution(path, 500), "|0|-1");
  std::filesystem::remove(path);
}

TEST(GpuRecordNames, ShortNamesAsNsightShowsThem) {
  EXPECT_EQ(apiShortName("cudaLaunchKernel_v7000"), "cudaLaunchKernel");
  EXPECT_EQ(apiShortName("cuLaunchKernel"), "cuLaunchKernel");
  EXPECT_EQ(kernelShortName("void moe::experts_fwd_kernel<bf16, 64>(int, float*)"),
            "experts_fwd_kernel");
  EXPECT_EQ(kernelShortName("ampere_sgemm_128x64_nn"), "ampere_sgemm_128x64_nn");
  EXPECT_EQ(kernelShortName("(anonymous namespace)::fill_kernel(float*, long)"), "fill_kernel");
  EXPECT_EQ(demangle("_Z3fooi"), "foo(int)");
  EXPECT_EQ(demangle("not_mangled"), "not_mangled");
}

TEST(ClockCalibration, InterpolatesTheOffsetBetweenPoints) {
  ClockCalibration clock;
  EXPECT_EQ(clock.toSteady(123), 123);
  clock.add(1000, 5000);  // offset 4000
  clock.add(3000, 7200);  // offset 4200
  EXPECT_EQ(clock.toSteady(500), 4500);
  EXPECT_EQ(clock.toSteady(2000), 6100);
  EXPECT_EQ(clock.toSteady(4000), 8200);
  EXPECT_EQ(clock.firstOffsetNs(), 4000);
  EXPECT_EQ(clock.lastOffsetNs(), 4200);
}

}  // namespace
}  // namespace moewb::profiler::gpu
