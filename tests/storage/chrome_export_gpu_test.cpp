// exportChromeTrace on GPU capture rows: the stream tracks are threads of a "GPU" process, kernels
// and copies are "X" events there carrying their launch details (grid, block, registers, shared
// memory; copy kind and bytes; phase), and every API call that launched work is joined to it by
// an "s"/"f" flow pair carrying the correlation id.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "moewb/storage/trace_reader.h"
#include "moewb/storage/trace_writer.h"
#include "test_util.h"

namespace moewb::storage {
namespace {

using nlohmann::json;
using testing::makeSlice;
using testing::TempDir;

constexpr int64_t kBaseNs = 7'000'000'000;

TEST(ChromeExportGpu, StreamsUnderGpuProcessWithLaunchFlows) {
  TempDir dir;
  const std::string path = dir.path("gpu.moewb");
  auto created = TraceWriter::create(path);
  ASSERT_TRUE(created.isOk()) << created.status().toString();
  auto writer = std::move(created).value();
  const TrackId thread = writer->addTrack({TrackId(), "trainer thread", "thread", 0, 11});
  const TrackId api = writer->addTrack({TrackId(), "CUDA API thread 11", kTrackKindCudaApi, 0, 11});
  const TrackId s7 = writer->addTrack({TrackId(), "GPU 0 stream 7", kTrackKindStream, 0, 7});
  writer->addSlice(makeSlice(thread, "step", kBaseNs, 100'000, 0, -1, "step"));
  writer->addCudaApi(
      {SliceId(), api, kBaseNs + 1'000, 2'000, "cudaLaunchKernel", kCategoryApi, 0, 1, 42, 0},
      {"runtime", 211, 11, 0, "experts.fwd"});
  writer->addCudaApi(
      {SliceId(), api, kBaseNs + 4'000, 1'000, "cudaMemcpyAsync", kCategoryApi, 0, 1, 43, 0},
      {"runtime", 41, 11, 0, "experts.fwd"});
  // A synchronisation call with a correlation id but no GPU work: no flow.
  writer->addCudaApi(
      {SliceId(), api, kBaseNs + 6'000, 1'000, "cudaStreamSynchronize", kCategoryApi, 0, -1, 44, 0},
      {"runtime", 131, 11, 0, "step"});
  writer->addGpuKernel(
      {SliceId(), s7, kBaseNs + 5'000, 10'000, "grouped_gemm()", kCategoryKernel, 0, 1, 42, 0},
      {0, 7, 8, 1, 1, 128, 1, 1, 64, 0, 0, "_Z12grouped_gemmv", "grouped_gemm", "experts.fwd"});
  writer->addGpuMemcpy(
      {SliceId(), s7, kBaseNs + 16'000, 2'000, "memcpy HtoD", kCategoryMemcpy, 0, 1, 43, 0},
      {0, 7, 1, 2, 3, 1 << 20, "experts.fwd"});
  ASSERT_TRUE(writer->close().isOk());
  auto reader = TraceReader::open(path);
  ASSERT_TRUE(reader.isOk()) << reader.status().toString();
  const std::string out = dir.path("gpu.json");
  ASSERT_TRUE(exportChromeTrace(**reader, out).isOk());
  std::ifstream in(out);
  const json trace = json::parse(in, nullptr, false);
  ASSERT_FALSE(trace.is_discarded());

  int gpuPid = -1;
  std::map<int64_t, std::string> threadNames;  // tid -> name within the GPU pid
  for (const json& e : trace["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "process_name" && e["args"]["name"] == "GPU") {
      gpuPid = e["pid"].get<int>();
    }
  }
  ASSERT_GE(gpuPid, 0) << "no GPU process";
  ASSERT_NE(gpuPid, 0);
  std::vector<json> gpuSlices, starts, finishes;
  for (const json& e : trace["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "thread_name" && e["pid"] == gpuPid) {
      threadNames[e["tid"].get<int64_t>()] = e["args"]["name"].get<std::string>();
    }
    if (e["ph"] == "X" && e["pid"] == gpuPid) gpuSlices.push_back(e);
    if (e["ph"] == "s") starts.push_back(e);
    if (e["ph"] == "f") finishes.push_back(e);
    if (e["ph"] == "X" && e["cat"] == "api") {
      EXPECT_EQ(e["pid"], 0) << e.dump();
    }
  }
  EXPECT_EQ(threadNames, (std::map<int64_t, std::string>{{s7.value, "GPU 0 stream 7"}}));
  ASSERT_EQ(gpuSlices.size(), 2u);
  EXPECT_EQ(gpuSlices[0]["name"], "grouped_gemm()");
  EXPECT_EQ(gpuSlices[0]["cat"], "kernel");
  EXPECT_EQ(gpuSlices[0]["tid"], s7.value);
  EXPECT_DOUBLE_EQ(gpuSlices[0]["ts"].get<double>(), 5.0);
  EXPECT_DOUBLE_EQ(gpuSlices[0]["dur"].get<double>(), 10.0);
  EXPECT_EQ(gpuSlices[0]["args"]["correlation_id"], 42);
  const json& kernelArgs = gpuSlices[0]["args"];
  EXPECT_EQ(kernelArgs["grid"], "8x1x1");
  EXPECT_EQ(kernelArgs["block"], "128x1x1");
  EXPECT_EQ(kernelArgs["registers_per_thread"], 64);
  EXPECT_EQ(kernelArgs["phase"], "experts.fwd");
  EXPECT_EQ(kernelArgs["stream"], 7);
  EXPECT_EQ(gpuSlices[1]["cat"], "memcpy");
  EXPECT_EQ(gpuSlices[1]["args"]["bytes"], 1 << 20);
  EXPECT_EQ(gpuSlices[1]["args"]["copy_kind"], 1);
  EXPECT_EQ(gpuSlices[1]["args"]["phase"], "experts.fwd");
  for (const json& e : trace["traceEvents"]) {
    if (e["ph"] == "X" && e["cat"] != "kernel") {
      EXPECT_FALSE(e["args"].contains("grid")) << e.dump();
    }
  }

  // One flow per launch that has work: kernel (42) and copy (43); not the sync (44).
  ASSERT_EQ(starts.size(), 2u);
  ASSERT_EQ(finishes.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(starts[i]["id"], finishes[i]["id"]);
    EXPECT_EQ(starts[i]["cat"], finishes[i]["cat"]);
    EXPECT_EQ(starts[i]["name"], finishes[i]["name"]);
    EXPECT_EQ(starts[i]["pid"], 0);
    EXPECT_EQ(starts[i]["tid"], api.value);
    EXPECT_EQ(finishes[i]["pid"], gpuPid);
    EXPECT_EQ(finishes[i]["tid"], s7.value);
    EXPECT_EQ(finishes[i]["bp"], "e");
  }
  EXPECT_EQ(starts[0]["args"]["correlation_id"], 42);
  EXPECT_DOUBLE_EQ(starts[0]["ts"].get<double>(), 1.0);    // the call's start
  EXPECT_DOUBLE_EQ(finishes[0]["ts"].get<double>(), 5.0);  // the kernel's start
  EXPECT_EQ(starts[1]["args"]["correlation_id"], 43);
  EXPECT_DOUBLE_EQ(finishes[1]["ts"].get<double>(), 16.0);
}

}  // namespace
}  // namespace moewb::storage
