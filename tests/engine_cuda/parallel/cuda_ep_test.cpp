// The EP dispatcher with the CUDA mover (model/cuda/cuda_ep.h) on virtual GPU ranks, EP = 2 and 4,
// every chunk count: identity experts bring every row back bitwise (odd and vector widths, a
// rank that routes nothing, experts that receive nothing, a row past R left alone); the grouped
// experts over EP match each rank's rows through all experts locally (forward, backward, the
// weight gradients summed over ranks) within bf16 tolerance, and chunks > 1 give bitwise the
// results of one chunk.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

#include "comm/cuda/virtual_gpu_comm.h"
#include "cuda_test_util.h"
#include "model/cuda/cuda_ep.h"

namespace moewb::engine::cuda {
namespace {

constexpr int64_t kLocal = 3, kHidden = 24;

int32_t rowsFor(int32_t rank, int64_t expert) {
  if (rank == 1) return 0;
  return (rank + expert) % 3 == 0 ? 0 : int32_t(1 + (rank * 7 + expert * 5) % 9);
}

Tensor<int32_t> offsetsFor(int32_t rank, int64_t experts) {
  Tensor<int32_t> offsets({experts + 1});
  for (int64_t e = 0; e < experts; ++e) offsets[e + 1] = offsets[e] + rowsFor(rank, e);
  return offsets;
}

// Rows [0, rows) of `t` [*, width].
Tensor<float> firstRows(const Tensor<float>& t, int64_t rows) {
  Tensor<float> out({rows, t.dim(1)});
  std::copy_n(t.data(), out.numel(), out.data());
  return out;
}

// Experts [first, first + count) of `full` [E, ...].
Tensor<float> sliceExperts(const Tensor<float>& full, int64_t first, int64_t count) {
  std::vector<int64_t> shape = full.shape();
  shape[0] = count;
  Tensor<float> out(shape);
  const int64_t per = full.numel() / full.dim(0);
  std::copy_n(full.data() + first * per, count * per, out.data());
  return out;
}

bool bitwiseEqual(const Tensor<float>& a, const Tensor<float>& b) {
  return a.shape() == b.shape() &&
         std::memcmp(a.data(), b.data(), size_t(a.numel()) * sizeof(float)) == 0;
}

class CudaEpTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (deviceCount() == 0) GTEST_SKIP() << "no CUDA device visible: GPU test skipped";
  }
};

// One round trip of rank comm.rank()'s rows [R + 1, width] through identity experts.
Status identityRoundTrip(Communicator& comm, int64_t width, int32_t chunks) {
  const int32_t r = comm.rank();
  MOEWB_ASSIGN_OR_RETURN(std::unique_ptr<CudaContext> context, CudaContext::create(0));
  const Tensor<int32_t> offsets = offsetsFor(r, comm.worldSize() * kLocal);
  const int64_t sent = offsets[offsets.numel() - 1];
  const Tensor<float> x = roundedToBf16(randomTensor({sent + 1, width}, 10 + uint64_t(r)));
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<bf16> xDevice,
                         toDeviceBf16(*context, x, MemoryCategory::kActivations));
  CudaEpMover mover(*context, comm);
  EpSavedCuda saved;
  EpDispatcher<CudaEpMover> dispatcher(mover, saved, nullptr);
  MOEWB_ASSIGN_OR_RETURN(
      DeviceTensor<bf16> y,
      dispatcher.forward(comm, std::span<const int32_t>(offsets.data(), size_t(offsets.numel())),
                         chunks, xDevice,
                         [](EpChunkSaved<CudaEpMover>&, DeviceTensor<bf16> local) {
                           return Result<DeviceTensor<bf16>>(std::move(local));
                         }));
  MOEWB_ASSIGN_OR_RETURN(Tensor<float> yHost, toHostFloat(*context, y));
  if (!bitwiseEqual(firstRows(yHost, sent), firstRows(x, sent))) {
    return internalError("rows changed on the round trip (width " + std::to_string(width) +
                         ", chunks " + std::to_string(chunks) + ")");
  }
  return Status::ok();
}

TEST_F(CudaEpTest, IdentityExpertsReturnEveryRowOnVirtualRanks) {
  for (int32_t ep : {2, 4}) {
    for (int64_t width : {13, 64}) {  // element copies, 16-byte vector copies
      for (int32_t chunks = 1; chunks <= kLocal; ++chunks) {
        SCOPED_TRACE("ep " + std::to_string(ep) + " width " + std::to_string(width) +
                     " chunks " + std::to_string(chunks));
        const Status status = runVirtualRanks(ep, 0, [&](Communicator& comm) {
          return identityRoundTrip(comm, width, chunks);
        });
        EXPECT_TRUE(status.isOk()) << status.toString();
      }
    }
  }
}

constexpr int64_t kWidth = 40;

struct RankRun {
  Tensor<float> y, dx, yRef, dxRef;  // rows < R
  Tensor<float> dGate, dUp, dDown;   // [El, ...] this rank's experts over EP
  Tensor<float> refGate, refUp, refDown;  // [E, ...] this rank's rows through all experts
};

Result<DeviceTensor<float>> zerosFloat(CudaContext& context, const std::vector<int64_t>& shape) {
  return toDevice(context, Tensor<float>(shape), MemoryCategory::kGrads);
}

// Rank r's rows through the experts over EP in `chunks` chunks and, as the reference, through
// all E experts on this rank alone.
Result<RankRun> expertsRun(Communicator& comm, int32_t chunks) {
  const int32_t r = comm.rank();
  const int64_t experts = comm.worldSize() * kLocal;
  MOEWB_ASSIGN_OR_RETURN(std::unique_ptr<CudaContext> owned, CudaContext::create(0));
  CudaContext& c = *owned;
  const Tensor<int32_t> offsets = offsetsFor(r, experts);
  const int64_t sent = offsets[experts];
  const Tensor<float> gate = randomTensor({experts, kHidden, kWidth}, 1, 0.2);
  const Tensor<float> up = randomTensor({experts, kHidden, kWidth}, 2, 0.2);
  const Tensor<float> down = randomTensor({experts, kWidth, kHidden}, 3, 0.2);
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<bf16> x,
                         toDeviceBf16(c, randomTensor({sent + 1, kWidth}, 10 + uint64_t(r)),
                                      MemoryCategory::kActivations));
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<bf16> dy,
                         toDeviceBf16(c, randomTensor({sent + 1, kWidth}, 20 + uint64_t(r)),
                                      MemoryCategory::kActivations));
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<int32_t> offsetsDevice,
                         toDevice(c, offsets, MemoryCategory::kActivations));
  std::vector<DeviceTensor<bf16>> w(6);  // full gate, up, down; local gate, up, down
  const Tensor<float>* full[3] = {&gate, &up, &down};
  for (int i = 0; i < 3; ++i) {
    MOEWB_ASSIGN_OR_RETURN(w[size_t(i)], toDeviceBf16(c, *full[i], MemoryCategory::kWeights));
    MOEWB_ASSIGN_OR_RETURN(w[size_t(3 + i)],
                           toDeviceBf16(c, sliceExperts(*full[i], r * kLocal, kLocal),
                                        MemoryCategory::kWeights));
  }
  std::vector<DeviceTensor<float>> g(6);
  for (int i = 0; i < 6; ++i) {
    std::vector<int64_t> shape = i < 3 ? full[i]->shape() : full[i - 3]->shape();
    if (i >= 3) shape[0] = kLocal;
    MOEWB_ASSIGN_OR_RETURN(g[size_t(i)], zerosFloat(c, shape));
  }
  const DeviceExpertWeights fullW{w[0], w[1], w[2]}, localW{w[3], w[4], w[5]};
  const DeviceExpertGrads fullG{g[0], g[1], g[2]}, localG{g[3], g[4], g[5]};
  DeviceExpertsSaved refSaved;
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<bf16> yRef,
                         expertsForwardCuda(c, x, offsetsDevice, fullW, refSaved));
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<bf16> dxRef, expertsBackwardCuda(c, dy, x, offsetsDevice,
                                                                       fullW, refSaved, fullG));
  EpSavedCuda saved;
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<bf16> y, epExpertsForwardCuda(c, comm, x, offsetsDevice,
                                                                    localW, {}, saved, nullptr,
                                                                    chunks));
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<bf16> dx,
                         epExpertsBackwardCuda(c, comm, dy, localW, localG, {}, saved, nullptr));
  RankRun run;
  MOEWB_ASSIGN_OR_RETURN(Tensor<float> yHost, toHostFloat(c, y));
  MOEWB_ASSIGN_OR_RETURN(Tensor<float> dxHost, toHostFloat(c, dx));
  MOEWB_ASSIGN_OR_RETURN(Tensor<float> yRefHost, toHostFloat(c, yRef));
  MOEWB_ASSIGN_OR_RETURN(Tensor<float> dxRefHost, toHostFloat(c, dxRef));
  run.y = firstRows(yHost, sent);
  run.dx = firstRows(dxHost, sent);
  run.yRef = firstRows(yRefHost, sent);
  run.dxRef = firstRows(dxRefHost, sent);
  MOEWB_ASSIGN_OR_RETURN(run.refGate, toHost(c, g[0]));
  MOEWB_ASSIGN_OR_RETURN(run.refUp, toHost(c, g[1]));
  MOEWB_ASSIGN_OR_RETURN(run.refDown, toHost(c, g[2]));
  MOEWB_ASSIGN_OR_RETURN(run.dGate, toHost(c, g[3]));
  MOEWB_ASSIGN_OR_RETURN(run.dUp, toHost(c, g[4]));
  MOEWB_ASSIGN_OR_RETURN(run.dDown, toHost(c, g[5]));
  return run;
}

std::vector<RankRun> runAll(int32_t ep, int32_t chunks) {
  std::vector<RankRun> runs(static_cast<size_t>(ep));
  std::mutex mutex;
  const Status status = runVirtualRanks(ep, 0, [&](Communicator& comm) -> Status {
    MOEWB_ASSIGN_OR_RETURN(RankRun run, expertsRun(comm, chunks));
    std::lock_guard<std::mutex> lock(mutex);
    runs[size_t(comm.rank())] = std::move(run);
    return Status::ok();
  });
  EXPECT_TRUE(status.isOk()) << status.toString();
  return runs;
}

// The sum over ranks of their reference gradients of rank r's experts.
Tensor<float> summedRef(const std::vector<RankRun>& runs, Tensor<float> RankRun::*member,
                        int32_t r) {
  Tensor<float> sum = sliceExperts(runs[0].*member, r * kLocal, kLocal);
  for (size_t s = 1; s < runs.size(); ++s) {
    const Tensor<float> part = sliceExperts(runs[s].*member, r * kLocal, kLocal);
    for (int64_t i = 0; i < sum.numel(); ++i) sum[i] += part[i];
  }
  return sum;
}

TEST_F(CudaEpTest, ExpertsOverEpMatchLocalExpertsAndChunksAreBitwiseEqual) {
  for (int32_t ep : {2, 4}) {
    SCOPED_TRACE("ep " + std::to_string(ep));
    const std::vector<RankRun> one = runAll(ep, 1);
    ASSERT_FALSE(HasFailure());
    for (int32_t r = 0; r < ep; ++r) {
      SCOPED_TRACE("rank " + std::to_string(r));
      const RankRun& run = one[size_t(r)];
      EXPECT_LT(relativeError(run.y, run.yRef), 1e-2);
      EXPECT_LT(relativeError(run.dx, run.dxRef), 1e-2);
      EXPECT_LT(relativeError(run.dGate, summedRef(one, &RankRun::refGate, r)), 1e-2);
      EXPECT_LT(relativeError(run.dUp, summedRef(one, &RankRun::refUp, r)), 1e-2);
      EXPECT_LT(relativeError(run.dDown, summedRef(one, &RankRun::refDown, r)), 1e-2);
    }
    for (int32_t chunks = 2; chunks <= kLocal; ++chunks) {
      const std::vector<RankRun> many = runAll(ep, chunks);
      for (int32_t r = 0; r < ep; ++r) {
        SCOPED_TRACE("chunks " + std::to_string(chunks) + " rank " + std::to_string(r));
        EXPECT_TRUE(bitwiseEqual(many[size_t(r)].y, one[size_t(r)].y));
        EXPECT_TRUE(bitwiseEqual(many[size_t(r)].dx, one[size_t(r)].dx));
        EXPECT_TRUE(bitwiseEqual(many[size_t(r)].dGate, one[size_t(r)].dGate));
        EXPECT_TRUE(bitwiseEqual(many[size_t(r)].dUp, one[size_t(r)].dUp));
        EXPECT_TRUE(bitwiseEqual(many[size_t(r)].dDown, one[size_t(r)].dDown));
      }
    }
  }
}

}  // namespace
}  // namespace moewb::engine::cuda
