// The MoE layer with expert parallelism (issue 7): each rank (one GPU per rank over NCCL, or with
// --virtual ranks sharing GPU 0) routes its own T tokens, sends the rows to the experts' owners
// with device all-to-all-v, computes its E / ranks experts and sends the rows back; forward +
// backward, bf16, the sizes of ../shared/anchors/ep_moe_layer.py (T tokens per GPU, D, E, top-K,
// FF). Every rank does the same expert work per GPU as one GPU running all E experts on its T
// tokens (moe_layer_cuda_bench), so the ratio of the two is the cost of expert parallelism.
// Prints one JSON line: median ms over 10 steps after 3 warm-up steps (CUDA events on rank 0,
// ranks aligned by a barrier before each step), the slowest rank's median, and the bytes each
// rank sent per step. --chunks C overlaps each chunk's all-to-all with another chunk's experts
// (parallel.a2a_chunks). Usage: ep_moe_layer_cuda_bench [--ranks N] [--virtual] [--chunks C]
// [T D E K FF]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "runtime/cuda/cuda_context.h"
#include "runtime/cuda/transfer.h"
#include "model/cuda/cuda_ep.h"
#include "model/cuda/cuda_moe.h"
#include "train/parallel/rank_common.h"
#include "runtime/tensor/rng.h"

namespace moewb::engine::cuda {
namespace {

Tensor<float> normal(std::vector<int64_t> shape, double stddev, uint64_t seed) {
  Tensor<float> t(shape);
  Rng rng(seed);
  for (int64_t i = 0; i < t.numel(); ++i) t[i] = float(stddev * rng.normal());
  return t;
}

struct Sizes {
  int64_t t = 16384, d = 2048, e = 64, k = 8, ff = 1024;
  int32_t chunks = 1;
};

struct RankResult {
  double medianMs = 0;
  int64_t bytesSent = 0;
};

// One rank: its tokens, the router, its local experts; 3 warm-up + 10 timed steps.
Result<RankResult> runRank(Communicator& comm, int device, const Sizes& s) {
  MOEWB_ASSIGN_OR_RETURN(auto context, CudaContext::create(device));
  CudaContext& c = *context;
  const int64_t ep = comm.worldSize(), local = s.e / ep, r = comm.rank();
  const MemoryCategory w = MemoryCategory::kWeights;
  MOEWB_ASSIGN_OR_RETURN(auto x, toDeviceBf16(c, normal({s.t, s.d}, 1.0, 1 + 10 * r),
                                               MemoryCategory::kActivations));
  MOEWB_ASSIGN_OR_RETURN(auto dy, toDeviceBf16(c, normal({s.t, s.d}, 1e-3, 2 + 10 * r),
                                                MemoryCategory::kActivations));
  MOEWB_ASSIGN_OR_RETURN(auto router, toDeviceBf16(c, normal({s.e, s.d}, 0.02, 3), w));
  MOEWB_ASSIGN_OR_RETURN(auto gate, toDeviceBf16(c, normal({local, s.ff, s.d}, 0.02, 4 + r), w));
  MOEWB_ASSIGN_OR_RETURN(auto up, toDeviceBf16(c, normal({local, s.ff, s.d}, 0.02, 5 + r), w));
  MOEWB_ASSIGN_OR_RETURN(auto down, toDeviceBf16(c, normal({local, s.d, s.ff}, 0.02, 6 + r), w));
  MOEWB_ASSIGN_OR_RETURN(auto gRouter, c.newTensor<float>({s.e, s.d}, MemoryCategory::kGrads));
  MOEWB_ASSIGN_OR_RETURN(auto gGate, c.newTensor<float>({local, s.ff, s.d}, MemoryCategory::kGrads));
  MOEWB_ASSIGN_OR_RETURN(auto gUp, c.newTensor<float>({local, s.ff, s.d}, MemoryCategory::kGrads));
  MOEWB_ASSIGN_OR_RETURN(auto gDown, c.newTensor<float>({local, s.d, s.ff}, MemoryCategory::kGrads));
  MOEWB_ASSIGN_OR_RETURN(auto dx, c.newTensor<bf16>({s.t, s.d}, MemoryCategory::kActivations));
  MoeOptions options;
  options.topK = int32_t(s.k);
  options.auxLossCoef = 0;
  options.seqLen = s.t;
  const MoeShapeCuda shape{s.t, s.d, s.e, s.ff};
  MoeWeightsCuda weights;
  weights.router = router.data();
  weights.gate = &gate;
  weights.up = &up;
  weights.down = &down;
  const MoeGradsCuda grads{gRouter.data(), &gGate, &gUp, &gDown};
  const DeviceExpertWeights expertW{gate, up, down};
  const DeviceExpertGrads expertG{gGate, gUp, gDown};
  int64_t bytesSent = 0;
  comm.setObserver([&](const CollectiveRecord& record) {
    if (record.device) bytesSent += record.bytesSent;
  });
  auto step = [&]() -> Status {
    MoeSavedCuda saved;
    EpSavedCuda epSaved;
    MOEWB_RETURN_IF_ERROR(moeRouterForwardCuda(c, x, weights, shape, options, saved));
    MOEWB_RETURN_IF_ERROR(moePermuteForwardCuda(c, x, weights, shape, saved));
    MOEWB_ASSIGN_OR_RETURN(saved.yPerm, epExpertsForwardCuda(c, comm, saved.xPerm,
                                                             saved.plan.offsets, expertW,
                                                             options.glu(), epSaved, nullptr,
                                                             s.chunks));
    MOEWB_ASSIGN_OR_RETURN(auto y, moeCombineForwardCuda(c, x, weights, shape, saved));
    MoeBackwardStateCuda state;
    MOEWB_RETURN_IF_ERROR(moeCombineBackwardCuda(c, dy, weights, shape, saved, grads, state));
    MOEWB_ASSIGN_OR_RETURN(state.dXPerm, epExpertsBackwardCuda(c, comm, state.dYPerm, expertW,
                                                               expertG, options.glu(), epSaved,
                                                               nullptr));
    MOEWB_RETURN_IF_ERROR(moePermuteBackwardCuda(c, x, weights, shape, saved, grads, state, dx));
    return moeRouterBackwardCuda(c, dy, x, weights, shape, saved, grads, state, dx);
  };
  for (int i = 0; i < 3; ++i) MOEWB_RETURN_IF_ERROR(step());
  MOEWB_RETURN_IF_ERROR(c.synchronize());
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  std::vector<float> times;
  for (int i = 0; i < 10; ++i) {
    MOEWB_RETURN_IF_ERROR(comm.barrier());
    bytesSent = 0;
    cudaEventRecord(start, c.stream());
    MOEWB_RETURN_IF_ERROR(step());
    cudaEventRecord(stop, c.stream());
    cudaEventSynchronize(stop);
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    times.push_back(ms);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(times.begin(), times.end());
  return RankResult{times[times.size() / 2], bytesSent};
}

int run(int argc, char** argv) {
  int ranks = 0;
  bool virtualRanks = false;
  int chunksArg = 1;
  std::vector<int64_t> values;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--ranks") == 0 && i + 1 < argc) {
      ranks = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--chunks") == 0 && i + 1 < argc) {
      chunksArg = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--virtual") == 0) {
      virtualRanks = true;
    } else {
      values.push_back(std::atoll(argv[i]));
    }
  }
  Sizes s;
  int64_t* fields[] = {&s.t, &s.d, &s.e, &s.k, &s.ff};
  for (size_t i = 0; i < values.size() && i < 5; ++i) *fields[i] = values[i];
  s.chunks = chunksArg;
  int devices = 0;
  cudaGetDeviceCount(&devices);
  if (ranks == 0) ranks = virtualRanks ? 2 : devices;
  if (ranks < 1 || (!virtualRanks && ranks > devices) || s.e % ranks != 0) {
    std::fprintf(stderr, "ep_moe_layer_cuda_bench: %d ranks on %d GPUs with E = %lld: need "
                         "1 <= ranks <= GPUs (or --virtual) and ranks dividing E\n",
                 ranks, devices, (long long)s.e);
    return 2;
  }
  std::vector<RankResult> results(static_cast<size_t>(ranks));
  std::mutex mutex;
  Status first;
  auto body = [&](Communicator& comm, int device) -> Status {
    Result<RankResult> result = runRank(comm, device, s);
    std::lock_guard<std::mutex> lock(mutex);
    if (!result.isOk()) {
      if (first.isOk()) first = result.status();
      return result.status();
    }
    results[size_t(comm.rank())] = *result;
    return Status::ok();
  };
  if (virtualRanks) {
    first = runVirtualGpuRanks(ranks, 0, [&](Communicator& comm) { return body(comm, 0); },
                               std::chrono::milliseconds(120000));
  } else {
    Result<std::string> id = newNcclUniqueId();
    if (!id.isOk()) first = id.status();
    std::vector<std::thread> threads;
    for (int r = 0; r < ranks && id.isOk(); ++r) {
      threads.emplace_back([&, r] {
        cudaSetDevice(r);
        auto comm = createNcclCommunicator(r, ranks, r, *id, std::chrono::milliseconds(120000),
                                           {});
        if (!comm.isOk()) {
          std::lock_guard<std::mutex> lock(mutex);
          if (first.isOk()) first = comm.status();
          return;
        }
        (void)body(**comm, r);
      });
    }
    for (auto& t : threads) t.join();
  }
  if (!first.isOk()) {
    std::fprintf(stderr, "ep_moe_layer_cuda_bench: %s\n", first.toString().c_str());
    return 1;
  }
  double slowest = 0;
  for (const RankResult& r : results) slowest = std::max(slowest, r.medianMs);
  const double flops = 3.0 * double(s.t) * double(s.k) * 6.0 * double(s.d) * double(s.ff);
  std::printf("{\"name\": \"moewb_ep_moe_layer\", \"ranks\": %d, \"chunks\": %d, \"transport\": \"%s\", "
              "\"ms\": %.3f, \"slowest_rank_ms\": %.3f, \"expert_tflops_per_gpu\": %.1f, "
              "\"a2a_mib_sent_per_rank\": %.1f, \"T\": %lld, \"D\": %lld, \"E\": %lld, "
              "\"K\": %lld, \"FF\": %lld}\n",
              ranks, s.chunks, virtualRanks ? "virtual" : "nccl", results[0].medianMs, slowest,
              flops / results[0].medianMs / 1e9,
              double(results[0].bytesSent) / double(1 << 20), (long long)s.t, (long long)s.d,
              (long long)s.e, (long long)s.k, (long long)s.ff);
  return 0;
}

}  // namespace
}  // namespace moewb::engine::cuda

int main(int argc, char** argv) { return moewb::engine::cuda::run(argc, argv); }
