// Golden tests of the GPU activity tables: a tiny trace with one step, two kernels on two streams,
// a memcpy, a memset and a runtime API call, read back through the Nsight-Systems-named views
// and the kernel / idle-gap summaries.
#include <gtest/gtest.h>

#include "moewb/storage/gpu_summary.h"
#include "moewb/storage/trace_reader.h"
#include "moewb/storage/trace_writer.h"
#include "test_util.h"

namespace moewb::storage {
namespace {

using testing::makeSlice;
using testing::queryCsv;
using testing::TempDir;
using Rows = std::vector<std::string>;

// Step 0 on the trainer thread: [0, 1000). GPU work (union): memcpy [100,200) on stream 7,
// kernel A [250,400) on stream 7, kernel B [300,500) on stream 9, memset [700,750) on stream 7.
// Busy = 100 + 250 + 50 = 400; gaps [0,100) [200,250) [500,700) [750,1000): 4 gaps, idle 600.
class GpuGolden : public ::testing::Test {
 protected:
  void SetUp() override {
    m_path = m_dir.path("gpu.moewb");
    auto created = TraceWriter::create(m_path);
    ASSERT_TRUE(created.isOk()) << created.status().toString();
    auto writer = std::move(created).value();
    const TrackId thread = writer->addTrack({TrackId(), "trainer thread", "thread", 0, 11});
    const TrackId api = writer->addTrack({TrackId(), "CUDA API thread 11", kTrackKindCudaApi, 0, 11});
    const TrackId s7 = writer->addTrack({TrackId(), "GPU 0 stream 7", kTrackKindStream, 0, 7});
    const TrackId s9 = writer->addTrack({TrackId(), "GPU 0 stream 9", kTrackKindStream, 0, 9});
    writer->addSlice(makeSlice(thread, "step", 0, 1000, 0, -1, "step"));
    writer->addSlice(makeSlice(thread, "experts.fwd", 50, 500, 0, 1, "phase"));
    writer->addCudaApi({SliceId(), api, 60, 10, "cudaLaunchKernel", kCategoryApi, 0, 1, 42, 1},
                       {"runtime", 211, 11, 0, "experts.fwd"});
    writer->addGpuMemcpy({SliceId(), s7, 100, 100, "memcpy", kCategoryMemcpy, 0, 1, 41, 0},
                         {0, 7, 1, 2, 3, 4096, "experts.fwd"});
    GpuKernelRow a{0, 7, 2, 1, 1, 128, 1, 1, 32, 0, 1024, "_Z1Av", "A", "experts.fwd"};
    writer->addGpuKernel({SliceId(), s7, 250, 150, "A()", kCategoryKernel, 0, 1, 42, 0}, a);
    GpuKernelRow b{0, 9, 4, 1, 1, 256, 1, 1, 64, 512, 0, "_Z1Bv", "B", "experts.fwd"};
    writer->addGpuKernel({SliceId(), s9, 300, 200, "B()", kCategoryKernel, 0, 1, 43, 0}, b);
    writer->addGpuMemset({SliceId(), s7, 700, 50, "memset", kCategoryMemset, 0, -1, 44, 0},
                         {0, 7, 256, 0, 3, "step"});
    writer->addGpuMemory({api, 20, true, 3, 1 << 20, 0xabc, 0, 7, 40, 0, -1, "setup"});
    ASSERT_TRUE(writer->close().isOk());
    auto reader = TraceReader::open(m_path);
    ASSERT_TRUE(reader.isOk()) << reader.status().toString();
    m_reader = std::move(reader).value();
  }

  TempDir m_dir;
  std::string m_path;
  std::unique_ptr<TraceReader> m_reader;
};

TEST_F(GpuGolden, KernelViewHasNsightColumnsAndAttribution) {
  EXPECT_EQ(queryCsv(m_path,
                     "SELECT k.start, k.\"end\", k.deviceId, k.streamId, k.correlationId, k.gridX, "
                     "k.blockX, k.registersPerThread, k.staticSharedMemory, "
                     "k.dynamicSharedMemory, d.value, s.value, k.step, k.layer, p.value "
                     "FROM CUPTI_ACTIVITY_KIND_KERNEL k "
                     "JOIN StringIds d ON d.id = k.demangledName "
                     "JOIN StringIds s ON s.id = k.shortName "
                     "JOIN StringIds p ON p.id = k.phase ORDER BY k.start"),
            (Rows{"250,400,0,7,42,2,128,32,0,1024,A(),A,0,1,experts.fwd",
                  "300,500,0,9,43,4,256,64,512,0,B(),B,0,1,experts.fwd"}));
}

TEST_F(GpuGolden, MemcpyAndRuntimeViewsJoinByCorrelation) {
  EXPECT_EQ(queryCsv(m_path,
                     "SELECT start, \"end\", streamId, bytes, copyKind, srcKind, dstKind "
                     "FROM CUPTI_ACTIVITY_KIND_MEMCPY"),
            (Rows{"100,200,7,4096,1,2,3"}));
  EXPECT_EQ(queryCsv(m_path,
                     "SELECT n.value, r.globalTid, k.streamId FROM CUPTI_ACTIVITY_KIND_RUNTIME r "
                     "JOIN StringIds n ON n.id = r.nameId "
                     "JOIN CUPTI_ACTIVITY_KIND_KERNEL k ON k.correlationId = r.correlationId"),
            (Rows{"cudaLaunchKernel,11,7"}));
  EXPECT_EQ(queryCsv(m_path, "SELECT bytes, value, step FROM CUPTI_ACTIVITY_KIND_MEMSET"),
            (Rows{"256,0,0"}));
  EXPECT_EQ(queryCsv(m_path, "SELECT kind, bytes, address, correlation_id FROM gpu_memory"),
            (Rows{"alloc,1048576,2748,40"}));
}

TEST_F(GpuGolden, KernelSummaryCountsAgainstStepTime) {
  auto summary = kernelSummary(*m_reader, 1);
  ASSERT_TRUE(summary.isOk()) << summary.status().toString();
  EXPECT_EQ(summary->kernelCount, 2);
  EXPECT_EQ(summary->kernelTotalNs, 350);
  EXPECT_EQ(summary->stepTotalNs, 1000);
  ASSERT_EQ(summary->topKernels.size(), 1u);
  EXPECT_EQ(summary->topKernels[0].name, "B()");
  EXPECT_DOUBLE_EQ(summary->shareOfSteps(200), 0.2);
}

TEST_F(GpuGolden, IdleGapsAreTheStepMinusTheUnionOfGpuWork) {
  auto idle = gpuIdleSummary(*m_reader);
  ASSERT_TRUE(idle.isOk()) << idle.status().toString();
  EXPECT_EQ(idle->steps, 1);
  EXPECT_EQ(idle->stepNs, 1000);
  EXPECT_EQ(idle->busyNs, 400);
  EXPECT_EQ(idle->idleNs, 600);
  EXPECT_EQ(idle->gapCount, 4);
  EXPECT_EQ(idle->largestGapNs, 250);
  EXPECT_EQ(idle->largestGapStartNs, 750);
  EXPECT_EQ(idle->gapsByLength[0], 4);
}

TEST_F(GpuGolden, NoGpuRowsGiveEmptySummaries) {
  const std::string path = m_dir.path("cpu.moewb");
  auto writer = TraceWriter::create(path);
  ASSERT_TRUE(writer.isOk());
  const TrackId t = (*writer)->addTrack({TrackId(), "trainer thread", "thread", 0, 1});
  (*writer)->addSlice(makeSlice(t, "step", 0, 100, 0, -1, "step"));
  ASSERT_TRUE((*writer)->close().isOk());
  auto reader = TraceReader::open(path);
  ASSERT_TRUE(reader.isOk());
  auto kernels = kernelSummary(**reader, 5);
  ASSERT_TRUE(kernels.isOk());
  EXPECT_EQ(kernels->kernelCount, 0);
  auto idle = gpuIdleSummary(**reader);
  ASSERT_TRUE(idle.isOk());
  EXPECT_EQ(idle->steps, 0);
}

}  // namespace
}  // namespace moewb::storage
