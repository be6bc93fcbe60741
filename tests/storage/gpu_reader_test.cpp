// Golden tests of the reader's GPU queries on a tiny synthetic trace written through the writer:
// the stream lanes of a window (every slice when zoomed in, folded runs when zoomed out), the
// details of a kernel / memcpy with its launching API call, and the expert load of a layer.
#include <gtest/gtest.h>

#include "moewb/storage/trace_reader.h"
#include "moewb/storage/trace_writer.h"
#include "test_util.h"

namespace moewb::storage {
namespace {

using testing::makeSlice;
using testing::TempDir;

// Step 3 on the trainer thread [0, 10000). Stream 7: memcpy [100,200) corr 41, kernels
// K0..K3 of 10 ns at 1000, 1020, 1040, 1060 (corr 50..53), a long kernel L [2000,6000) corr 60.
// Stream 9: memset [500,550) corr 0. API thread: cudaLaunchKernel at 990 (corr 50) and at 1900
// (corr 60), cudaMemcpyAsync at 90 (corr 41). Expert load of step 3, layer 1 on two ranks.
class GpuReader : public ::testing::Test {
 protected:
  void SetUp() override {
    m_path = m_dir.path("gpu.moewb");
    auto created = TraceWriter::create(m_path);
    ASSERT_TRUE(created.isOk()) << created.status().toString();
    auto writer = std::move(created).value();
    const TrackId thread = writer->addTrack({TrackId(), "trainer thread", "thread", 0, 11});
    m_api = writer->addTrack({TrackId(), "CUDA API thread 11", kTrackKindCudaApi, 0, 11});
    m_s7 = writer->addTrack({TrackId(), "GPU 0 stream 7", kTrackKindStream, 0, 7});
    m_s9 = writer->addTrack({TrackId(), "GPU 0 stream 9", kTrackKindStream, 0, 9});
    writer->addSlice(makeSlice(thread, "step", 0, 10000, 3, -1, "step"));
    writer->addCudaApi({SliceId(), m_api, 90, 5, "cudaMemcpyAsync", kCategoryApi, 3, 1, 41, 0},
                       {"runtime", 41, 11, 0, "experts.fwd"});
    writer->addGpuMemcpy({SliceId(), m_s7, 100, 100, "memcpy HtoD", kCategoryMemcpy, 3, 1, 41, 0},
                         {0, 7, 1, 2, 3, 4096, "experts.fwd"});
    writer->addGpuMemset({SliceId(), m_s9, 500, 50, "memset", kCategoryMemset, 3, -1, 0, 0},
                         {0, 9, 256, 0, 3, "step"});
    writer->addCudaApi({SliceId(), m_api, 990, 8, "cudaLaunchKernel", kCategoryApi, 3, 1, 50, 0},
                       {"runtime", 211, 11, 0, "experts.fwd"});
    for (int i = 0; i < 4; ++i) {
      GpuKernelRow k{0,
                     7,
                     2,
                     1,
                     1,
                     128,
                     1,
                     1,
                     32,
                     0,
                     1024,
                     "_Z2K" + std::to_string(i) + "v",
                     "K" + std::to_string(i),
                     "experts.fwd"};
      writer->addGpuKernel({SliceId(), m_s7, 1000 + 20 * i, 10, "K" + std::to_string(i) + "()",
                            kCategoryKernel, 3, 1, 50 + i, 0},
                           k);
    }
    writer->addCudaApi({SliceId(), m_api, 1900, 7, "cudaLaunchKernel", kCategoryApi, 3, 1, 60, 0},
                       {"runtime", 211, 11, 0, "experts.fwd"});
    GpuKernelRow l{0,
                   7,
                   64,
                   2,
                   1,
                   256,
                   1,
                   1,
                   96,
                   2048,
                   4096,
                   "_ZN5moewb12grouped_gemmEv",
                   "grouped_gemm",
                   "experts.fwd"};
    writer->addGpuKernel({SliceId(), m_s7, 2000, 4000, "moewb::grouped_gemm<bf16>(Args)",
                          kCategoryKernel, 3, 1, 60, 0},
                         l);
    for (int e = 0; e < 4; ++e) {
      writer->addExpertLoad({3, 1, e, 0, 10 * (e + 1), e == 3 ? 2 : 0, 0.0});
      writer->addExpertLoad({3, 1, e, 1, 5, 0, 0.0});
    }
    writer->addExpertLoad({3, 0, 0, 0, 99, 0, 0.0});
    ASSERT_TRUE(writer->close().isOk());
    auto reader = TraceReader::open(m_path);
    ASSERT_TRUE(reader.isOk()) << reader.status().toString();
    m_reader = std::move(reader).value();
  }

  // "category name start end count" per item of `lane`.
  static std::vector<std::string> describe(const GpuLane& lane) {
    std::vector<std::string> out;
    for (const GpuLaneItem& i : lane.items) {
      out.push_back(i.category + " " + (i.shortName.empty() ? i.name : i.shortName) + " " +
                    std::to_string(i.startNs) + " " + std::to_string(i.endNs) + " " +
                    std::to_string(i.count));
    }
    return out;
  }

  TempDir m_dir;
  std::string m_path;
  TrackId m_api, m_s7, m_s9;
  std::unique_ptr<TraceReader> m_reader;
};

using Lines = std::vector<std::string>;

TEST_F(GpuReader, ZoomedInLanesHoldEverySlice) {
  // 10000 buckets over [0, 10000): 1 ns per bucket, nothing folds.
  auto lanes = m_reader->gpuLanes({0, 10000}, 10000);
  ASSERT_TRUE(lanes.isOk()) << lanes.status().toString();
  ASSERT_EQ(lanes->size(), 3u);
  // The rank's CUDA API thread first (its calls, not its NVTX ranges), then its streams.
  EXPECT_EQ((*lanes)[0].track.id, m_api);
  EXPECT_EQ(describe((*lanes)[0]),
            (Lines{"api cudaMemcpyAsync 90 95 1", "api cudaLaunchKernel 990 998 1",
                   "api cudaLaunchKernel 1900 1907 1"}));
  EXPECT_EQ((*lanes)[1].track.id, m_s7);
  EXPECT_EQ((*lanes)[1].track.name, "GPU 0 stream 7");
  EXPECT_EQ(
      describe((*lanes)[1]),
      (Lines{"memcpy memcpy HtoD 100 200 1", "kernel K0 1000 1010 1", "kernel K1 1020 1030 1",
             "kernel K2 1040 1050 1", "kernel K3 1060 1070 1", "kernel grouped_gemm 2000 6000 1"}));
  EXPECT_EQ(describe((*lanes)[2]), (Lines{"memset memset 500 550 1"}));
  const GpuLaneItem& k0 = (*lanes)[1].items[1];
  EXPECT_EQ(k0.name, "K0()");
  EXPECT_EQ(k0.step, 3);
  EXPECT_EQ(k0.layer, 1);
  EXPECT_EQ(k0.correlationId, 50);
}

TEST_F(GpuReader, ZoomedOutLanesFoldShortNeighbours) {
  // 100 buckets over [0, 10000): 100 ns per bucket. The memcpy (100 ns) stays; the four 10 ns
  // kernels 10 ns apart fold into one item; the long kernel stays.
  auto lanes = m_reader->gpuLanes({0, 10000}, 100);
  ASSERT_TRUE(lanes.isOk()) << lanes.status().toString();
  EXPECT_EQ(describe((*lanes)[1]), (Lines{"memcpy memcpy HtoD 100 200 1", "kernel  1000 1070 4",
                                          "kernel grouped_gemm 2000 6000 1"}));
  // 10 buckets: 1000 ns each; the memcpy and the kernels are narrow but 800 ns apart: one fold
  // of mixed kinds.
  lanes = m_reader->gpuLanes({0, 10000}, 10);
  ASSERT_TRUE(lanes.isOk());
  EXPECT_EQ(describe((*lanes)[1]), (Lines{"mixed  100 1070 5", "kernel grouped_gemm 2000 6000 1"}));
  EXPECT_EQ((*lanes)[1].items[0].id.value > 0, true);
}

TEST_F(GpuReader, WindowAndTrackFilter) {
  // [3000, 4000) overlaps only the long kernel (found through the max-duration look-back).
  auto lanes = m_reader->gpuLanes({3000, 4000}, 1000, m_s7);
  ASSERT_TRUE(lanes.isOk());
  ASSERT_EQ(lanes->size(), 1u);
  EXPECT_EQ(describe((*lanes)[0]), (Lines{"kernel grouped_gemm 2000 6000 1"}));
  // An empty window gives the lanes without items.
  lanes = m_reader->gpuLanes({4000, 4000}, 10);
  ASSERT_TRUE(lanes.isOk());
  ASSERT_EQ(lanes->size(), 3u);
  EXPECT_TRUE((*lanes)[0].items.empty());
}

TEST_F(GpuReader, KernelDetailsWithLaunchingCall) {
  auto lanes = m_reader->gpuLanes({0, 10000}, 10000, m_s7);
  ASSERT_TRUE(lanes.isOk());
  const SliceId gemm = (*lanes)[0].items.back().id;
  auto details = m_reader->gpuSliceDetails(gemm);
  ASSERT_TRUE(details.isOk()) << details.status().toString();
  ASSERT_TRUE(details->has_value());
  const GpuSliceDetails& d = **details;
  EXPECT_EQ(d.slice.name, "moewb::grouped_gemm<bf16>(Args)");
  EXPECT_EQ(d.slice.durNs, 4000);
  EXPECT_EQ(d.slice.step, 3);
  EXPECT_EQ(d.slice.layer, 1);
  EXPECT_EQ(d.track.name, "GPU 0 stream 7");
  ASSERT_TRUE(d.kernel.has_value());
  EXPECT_FALSE(d.memcpy.has_value());
  EXPECT_EQ(d.kernel->gridX, 64);
  EXPECT_EQ(d.kernel->gridY, 2);
  EXPECT_EQ(d.kernel->blockX, 256);
  EXPECT_EQ(d.kernel->registersPerThread, 96);
  EXPECT_EQ(d.kernel->staticSharedBytes, 2048);
  EXPECT_EQ(d.kernel->dynamicSharedBytes, 4096);
  EXPECT_EQ(d.kernel->streamId, 7);
  EXPECT_EQ(d.kernel->shortName, "grouped_gemm");
  EXPECT_EQ(d.kernel->mangledName, "_ZN5moewb12grouped_gemmEv");
  EXPECT_EQ(d.phase(), "experts.fwd");
  ASSERT_TRUE(d.apiCall.has_value());
  EXPECT_EQ(d.apiCall->name, "cudaLaunchKernel");
  EXPECT_EQ(d.apiCall->startNs, 1900);
  EXPECT_EQ(d.apiCall->track, m_api);
  ASSERT_TRUE(d.apiDetails.has_value());
  EXPECT_EQ(d.apiDetails->api, "runtime");
  EXPECT_EQ(d.apiDetails->cbid, 211);
  EXPECT_EQ(d.apiDetails->threadId, 11);
}

TEST_F(GpuReader, CopyDetailsAndNonGpuSlices) {
  auto lanes = m_reader->gpuLanes({0, 10000}, 10000);
  ASSERT_TRUE(lanes.isOk());
  auto copy = m_reader->gpuSliceDetails((*lanes)[1].items[0].id);
  ASSERT_TRUE(copy.isOk());
  ASSERT_TRUE(copy->has_value());
  ASSERT_TRUE((*copy)->memcpy.has_value());
  EXPECT_EQ((*copy)->memcpy->bytes, 4096);
  EXPECT_EQ((*copy)->memcpy->copyKind, 1);
  EXPECT_EQ((*copy)->apiCall->name, "cudaMemcpyAsync");
  // The memset has no correlation id, so no API call.
  auto set = m_reader->gpuSliceDetails((*lanes)[2].items[0].id);
  ASSERT_TRUE(set.isOk());
  ASSERT_TRUE(set->has_value());
  EXPECT_EQ((*set)->memset->bytes, 256);
  EXPECT_FALSE((*set)->apiCall.has_value());
  // An API call stands for the work it launched: the last launch is the grouped GEMM's.
  auto launch = m_reader->gpuSliceDetails((*lanes)[0].items[2].id);
  ASSERT_TRUE(launch.isOk());
  ASSERT_TRUE(launch->has_value());
  ASSERT_TRUE((*launch)->kernel.has_value());
  EXPECT_EQ((*launch)->kernel->shortName, "grouped_gemm");
  EXPECT_EQ((*launch)->apiCall->startNs, 1900);
  // The step slice (host) and a missing id are not GPU work.
  auto step = m_reader->gpuSliceDetails(SliceId(1));
  ASSERT_TRUE(step.isOk());
  EXPECT_FALSE(step->has_value());
  auto missing = m_reader->gpuSliceDetails(SliceId(12345));
  ASSERT_TRUE(missing.isOk());
  EXPECT_FALSE(missing->has_value());
}

TEST_F(GpuReader, LayerLoadSumsRanks) {
  auto load = m_reader->layerLoad(3, 1);
  ASSERT_TRUE(load.isOk()) << load.status().toString();
  ASSERT_TRUE(load->has_value());
  EXPECT_EQ((*load)->tokens, (std::vector<int64_t>{15, 25, 35, 45}));
  EXPECT_EQ((*load)->dropped, (std::vector<int64_t>{0, 0, 0, 2}));
  EXPECT_EQ((*load)->totalTokens, 120);
  EXPECT_EQ((*load)->hottestExpert, 3);
  EXPECT_DOUBLE_EQ((*load)->maxOverMean, 45.0 / 30.0);
  auto none = m_reader->layerLoad(4, 1);
  ASSERT_TRUE(none.isOk());
  EXPECT_FALSE(none->has_value());
}

TEST_F(GpuReader, HostOnlyTraceHasNoLanes) {
  const std::string path = m_dir.path("cpu.moewb");
  auto writer = TraceWriter::create(path);
  ASSERT_TRUE(writer.isOk());
  const TrackId t = (*writer)->addTrack({TrackId(), "trainer thread", "thread", 0, 1});
  (*writer)->addSlice(makeSlice(t, "step", 0, 100, 0, -1, "step"));
  ASSERT_TRUE((*writer)->close().isOk());
  auto reader = TraceReader::open(path);
  ASSERT_TRUE(reader.isOk());
  auto lanes = (*reader)->gpuLanes({0, 100}, 10);
  ASSERT_TRUE(lanes.isOk());
  EXPECT_TRUE(lanes->empty());
}

}  // namespace
}  // namespace moewb::storage
