// GpuTraceKinds: parsing of --gpu-trace-kinds lists, their canonical description, and the note on
// what a set of kinds can attribute.
#include "moewb/profiler/gpu_trace_kinds.h"

#include <gtest/gtest.h>

namespace moewb::profiler {
namespace {

TEST(GpuTraceKinds, DefaultIsEverythingAndAttributes) {
  const GpuTraceKinds kinds;
  EXPECT_EQ(kinds, GpuTraceKinds::all());
  EXPECT_EQ(kinds.describe(), "all");
  EXPECT_TRUE(kinds.canAttribute());
  for (GpuTraceKind k : {GpuTraceKind::kKernel, GpuTraceKind::kMemcpy, GpuTraceKind::kMemset,
                         GpuTraceKind::kMemory, GpuTraceKind::kSync, GpuTraceKind::kRuntime,
                         GpuTraceKind::kDriver, GpuTraceKind::kNvtx}) {
    EXPECT_TRUE(kinds.has(k));
  }
}

TEST(GpuTraceKinds, ParsesListsInAnyOrderWithSpacesAndRepeats) {
  auto kinds = parseGpuTraceKinds(" runtime ,kernel,kernel, nvtx");
  ASSERT_TRUE(kinds.isOk()) << kinds.status().toString();
  EXPECT_TRUE(kinds->has(GpuTraceKind::kKernel));
  EXPECT_TRUE(kinds->has(GpuTraceKind::kRuntime));
  EXPECT_TRUE(kinds->has(GpuTraceKind::kNvtx));
  EXPECT_FALSE(kinds->has(GpuTraceKind::kDriver));
  EXPECT_FALSE(kinds->has(GpuTraceKind::kMemcpy));
  EXPECT_EQ(kinds->describe(), "kernel,runtime,nvtx");  // canonical order

  auto every = parseGpuTraceKinds("kernel,memcpy,memset,memory,sync,runtime,driver,nvtx");
  ASSERT_TRUE(every.isOk());
  EXPECT_EQ(*every, GpuTraceKinds::all());
  auto all = parseGpuTraceKinds("all");
  ASSERT_TRUE(all.isOk());
  EXPECT_EQ(*all, GpuTraceKinds::all());
}

TEST(GpuTraceKinds, LaunchesSetRecordsOnlyTheLaunchingApiCalls) {
  auto launches = parseGpuTraceKinds("launches");
  ASSERT_TRUE(launches.isOk()) << launches.status().toString();
  EXPECT_EQ(*launches, GpuTraceKinds::launches());
  EXPECT_EQ(launches->describe(), "launches");
  EXPECT_TRUE(launches->canAttribute());
  EXPECT_TRUE(launches->has(GpuTraceKind::kLaunchApi));
  EXPECT_FALSE(launches->has(GpuTraceKind::kRuntime));
  EXPECT_FALSE(launches->has(GpuTraceKind::kDriver));
  for (GpuTraceKind k : {GpuTraceKind::kKernel, GpuTraceKind::kMemcpy, GpuTraceKind::kMemset,
                         GpuTraceKind::kMemory, GpuTraceKind::kSync, GpuTraceKind::kNvtx}) {
    EXPECT_TRUE(launches->has(k));
  }
  EXPECT_NE(launches->attributionNote().find("only the API calls that launch"), std::string::npos)
      << launches->attributionNote();
  EXPECT_FALSE(GpuTraceKinds::all().has(GpuTraceKind::kLaunchApi));
  auto listed = parseGpuTraceKinds("kernel,launch_api");
  ASSERT_TRUE(listed.isOk());
  EXPECT_EQ(listed->describe(), "kernel,launch_api");
  EXPECT_TRUE(listed->canAttribute());

  for (const char* name :
       {"cudaLaunchKernel_v7000", "cudaLaunchKernelExC_v11060", "cuLaunchKernelEx",
        "cudaMemcpyAsync_v3020", "cuMemsetD8Async", "cudaMalloc_v3020", "cuMemAlloc_v2",
        "cudaFreeAsync_v11020", "cuMemFree_v2", "cudaStreamSynchronize_v3020", "cuCtxSynchronize",
        "cudaStreamWaitEvent_v3020", "cudaGraphLaunch_v10000", "cuLibraryLoadData",
        "cuKernelGetFunction"}) {
    EXPECT_TRUE(isLaunchApiName(name)) << name;
  }
  for (const char* name :
       {"cudaGetLastError_v3020", "cudaGetDevice_v3020", "cudaEventRecord_v3020",
        "cuKernelGetName", "cuKernelGetAttribute", "cuCtxGetCurrent", "cudaGraphUpload_v11010",
        "cudaEventElapsedTime_v3020", "cudaFuncGetAttributes_v3020"}) {
    EXPECT_FALSE(isLaunchApiName(name)) << name;
  }
}

TEST(GpuTraceKinds, RejectsUnknownAndEmptyEntriesNamingWhatIsAccepted) {
  const std::pair<const char*, const char*> cases[] = {
      {"kernel,cuda", "'cuda' is not a GPU trace kind"},
      {"Kernel", "'Kernel' is not a GPU trace kind"},
      {"", "no GPU trace kind given"},
      {"  ", "no GPU trace kind given"},
      {"kernel,,nvtx", "empty entry"},
      {"kernel,", "empty entry"},
  };
  for (const auto& [list, message] : cases) {
    auto kinds = parseGpuTraceKinds(list);
    ASSERT_FALSE(kinds.isOk()) << "'" << list << "'";
    EXPECT_EQ(kinds.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(kinds.status().message().find(message), std::string::npos)
        << kinds.status().message();
    EXPECT_NE(kinds.status().message().find(
                  "accepted: a comma-separated list of kernel, memcpy, memset, memory, sync, "
                  "runtime, driver, nvtx, launch_api, or the sets all, launches"),
              std::string::npos)
        << kinds.status().message();
  }
}

TEST(GpuTraceKinds, AttributionNoteSaysWhatCannotBeAttributed) {
  auto kernelOnly = parseGpuTraceKinds("kernel");
  ASSERT_TRUE(kernelOnly.isOk());
  EXPECT_FALSE(kernelOnly->canAttribute());
  EXPECT_NE(kernelOnly->attributionNote().find("cannot be attributed"), std::string::npos)
      << kernelOnly->attributionNote();

  auto noDriver = parseGpuTraceKinds("kernel,runtime,nvtx");
  ASSERT_TRUE(noDriver.isOk());
  EXPECT_TRUE(noDriver->canAttribute());
  EXPECT_NE(noDriver->attributionNote().find("without driver records"), std::string::npos)
      << noDriver->attributionNote();
  EXPECT_NE(noDriver->attributionNote().find("(step, layer, phase)"), std::string::npos);

  auto noNvtx = parseGpuTraceKinds("kernel,runtime,driver");
  ASSERT_TRUE(noNvtx.isOk());
  EXPECT_NE(noNvtx->attributionNote().find("without nvtx records"), std::string::npos)
      << noNvtx->attributionNote();

  EXPECT_EQ(GpuTraceKinds::all().attributionNote().find("without"), std::string::npos)
      << GpuTraceKinds::all().attributionNote();
  auto apiOnly = parseGpuTraceKinds("runtime");
  ASSERT_TRUE(apiOnly.isOk());
  EXPECT_NE(apiOnly->attributionNote().find("no kernel, copy"), std::string::npos);
}

}  // namespace
}  // namespace moewb::profiler
