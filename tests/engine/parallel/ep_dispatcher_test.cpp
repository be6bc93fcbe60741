// The EP dispatcher's stages (model/moe/ep_dispatcher.h) with the CPU mover on in-process ranks,
// for every chunk count: identity experts bring every row back unchanged; experts that stamp
// their rows with their global id show each row reached the expert it was routed to; and the
// grouped experts' forward and backward give bitwise the same rows and weight gradients with any
// number of chunks. Rank 1 routes nothing, and some experts receive nothing.
#include "model/moe/ep_dispatcher.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <mutex>
#include <vector>

#include "comm/in_process_comm.h"
#include "model/parallel/ep_dispatch.h"
#include "runtime/tensor/rng.h"

namespace moewb::engine {
namespace {

constexpr int64_t kLocal = 3, kWidth = 5, kHidden = 3;

int32_t rowsFor(int32_t rank, int64_t expert) {
  if (rank == 1) return 0;
  return (rank + expert) % 3 == 0 ? 0 : int32_t(1 + (rank * 7 + expert * 3) % 4);
}

std::vector<int32_t> offsetsFor(int32_t rank, int64_t experts) {
  std::vector<int32_t> offsets(size_t(experts + 1), 0);
  for (int64_t e = 0; e < experts; ++e) {
    offsets[size_t(e + 1)] = offsets[size_t(e)] + rowsFor(rank, e);
  }
  return offsets;
}

Tensor<float> randomTensor(const std::vector<int64_t>& shape, uint64_t seed) {
  Rng rng(seed);
  Tensor<float> t(shape);
  for (int64_t i = 0; i < t.numel(); ++i) t[i] = float(rng.normal());
  return t;
}

bool bitwiseEqual(const Tensor<float>& a, const Tensor<float>& b) {
  return a.shape() == b.shape() &&
         std::memcmp(a.data(), b.data(), size_t(a.numel()) * sizeof(float)) == 0;
}

using Experts = std::function<Result<Tensor<float>>(int32_t rank, EpChunkSaved<CpuEpMover>&,
                                                    Tensor<float>)>;

// yPerm of every rank after one forward round trip with `experts`, in `chunks` chunks.
std::vector<Tensor<float>> roundTrips(int32_t ep, int32_t chunks, const Experts& experts) {
  std::vector<Tensor<float>> out;
  out.resize(static_cast<size_t>(ep));
  std::mutex mutex;
  const Status status = runRanks(ep, [&](Communicator& comm) -> Status {
    const int32_t r = comm.rank();
    const std::vector<int32_t> offsets = offsetsFor(r, ep * kLocal);
    const Tensor<float> x = randomTensor({offsets.back(), kWidth}, 10 + uint64_t(r));
    CpuEpMover mover(comm);
    EpSaved saved;
    CommTag tag;
    EpDispatcher<CpuEpMover> dispatcher(mover, saved, &tag);
    MOEWB_ASSIGN_OR_RETURN(
        Tensor<float> y,
        dispatcher.forward(comm, offsets, chunks, x,
                           [&](EpChunkSaved<CpuEpMover>& chunk, Tensor<float> local) {
                             return experts(r, chunk, std::move(local));
                           }));
    EXPECT_STREQ(tag.phase, "");
    EXPECT_EQ(saved.chunks.size(), size_t(chunks));
    std::lock_guard<std::mutex> lock(mutex);
    out[size_t(r)] = std::move(y);
    return Status::ok();
  });
  EXPECT_TRUE(status.isOk()) << status.toString();
  return out;
}

TEST(EpDispatcher, IdentityExpertsReturnEveryRow) {
  for (int32_t ep : {2, 3}) {
    for (int32_t chunks = 1; chunks <= kLocal; ++chunks) {
      SCOPED_TRACE("ep " + std::to_string(ep) + " chunks " + std::to_string(chunks));
      const std::vector<Tensor<float>> y = roundTrips(
          ep, chunks, [](int32_t, EpChunkSaved<CpuEpMover>&, Tensor<float> local) {
            return Result<Tensor<float>>(std::move(local));
          });
      for (int32_t r = 0; r < ep; ++r) {
        const int64_t rows = offsetsFor(r, ep * kLocal).back();
        const Tensor<float> x = randomTensor({rows, kWidth}, 10 + uint64_t(r));
        EXPECT_TRUE(bitwiseEqual(y[size_t(r)], x)) << "rank " << r;
      }
    }
  }
}

TEST(EpDispatcher, EveryRowReachesItsExpert) {
  for (int32_t ep : {2, 3}) {
    for (int32_t chunks = 1; chunks <= kLocal; ++chunks) {
      SCOPED_TRACE("ep " + std::to_string(ep) + " chunks " + std::to_string(chunks));
      // Each local row becomes its global expert id (the chunk's offsets say which expert).
      const std::vector<Tensor<float>> y = roundTrips(
          ep, chunks, [](int32_t rank, EpChunkSaved<CpuEpMover>& chunk, Tensor<float> local) {
            for (int64_t e = 0; e < kLocal; ++e) {
              for (int32_t row = chunk.localOffsets[e]; row < chunk.localOffsets[e + 1]; ++row) {
                for (int64_t i = 0; i < kWidth; ++i) local[row * kWidth + i] = rank * kLocal + e;
              }
            }
            return Result<Tensor<float>>(std::move(local));
          });
      for (int32_t r = 0; r < ep; ++r) {
        const std::vector<int32_t> offsets = offsetsFor(r, ep * kLocal);
        for (int64_t g = 0; g < ep * kLocal; ++g) {
          for (int64_t i = offsets[size_t(g)] * kWidth; i < offsets[size_t(g + 1)] * kWidth; ++i) {
            ASSERT_EQ(y[size_t(r)][i], float(g)) << "rank " << r << " expert " << g;
          }
        }
      }
    }
  }
}

struct ExpertsRun {
  Tensor<float> y, dx, dGate, dUp, dDown;
};

// The grouped experts through the dispatcher, forward and backward, on rank r of EP = 2.
Result<ExpertsRun> expertsOverEp(Communicator& comm, int32_t chunks) {
  const int32_t r = comm.rank(), ep = comm.worldSize();
  const std::vector<int32_t> offsets = offsetsFor(r, ep * kLocal);
  const Tensor<float> x = randomTensor({offsets.back(), kWidth}, 10 + uint64_t(r));
  const Tensor<float> dy = randomTensor({offsets.back(), kWidth}, 20 + uint64_t(r));
  const Tensor<float> g = randomTensor({kLocal, kHidden, kWidth}, 30 + uint64_t(r));
  const Tensor<float> u = randomTensor({kLocal, kHidden, kWidth}, 40 + uint64_t(r));
  const Tensor<float> d = randomTensor({kLocal, kWidth, kHidden}, 50 + uint64_t(r));
  const ExpertWeights<float> weights{g, u, d};
  ExpertsRun run{Tensor<float>(), Tensor<float>(), Tensor<float>(g.shape()),
                 Tensor<float>(u.shape()), Tensor<float>(d.shape())};
  const ExpertGrads<float> grads{run.dGate, run.dUp, run.dDown};
  ThreadPool pool(1);
  CpuEpMover mover(comm);
  EpSaved saved;
  EpDispatcher<CpuEpMover> forward(mover, saved, nullptr);
  MOEWB_ASSIGN_OR_RETURN(
      run.y, forward.forward(comm, offsets, chunks, x,
                             [&](EpChunkSaved<CpuEpMover>& chunk, Tensor<float> local) {
                               chunk.xLocal = std::move(local);
                               return Result<Tensor<float>>(expertsForward(
                                   pool, chunk.xLocal, chunk.localOffsets, weights,
                                   chunk.experts));
                             }));
  EpDispatcher<CpuEpMover> backward(mover, saved, nullptr);
  MOEWB_ASSIGN_OR_RETURN(
      run.dx, backward.backward(dy, [&](EpChunkSaved<CpuEpMover>& chunk, Tensor<float> local) {
        return Result<Tensor<float>>(expertsBackward(pool, local, chunk.xLocal,
                                                     chunk.localOffsets, weights, chunk.experts,
                                                     grads));
      }));
  EXPECT_TRUE(saved.chunks.empty());
  return run;
}

TEST(EpDispatcher, ChunksGiveBitwiseEqualExpertsForwardAndBackward) {
  constexpr int32_t kRanks = 2;
  std::vector<std::vector<ExpertsRun>> runs(kLocal);  // [chunks - 1][rank]
  for (std::vector<ExpertsRun>& perRank : runs) perRank.resize(kRanks);
  std::mutex mutex;
  for (int32_t chunks = 1; chunks <= kLocal; ++chunks) {
    const Status status = runRanks(kRanks, [&](Communicator& comm) -> Status {
      MOEWB_ASSIGN_OR_RETURN(ExpertsRun run, expertsOverEp(comm, chunks));
      std::lock_guard<std::mutex> lock(mutex);
      runs[size_t(chunks - 1)][size_t(comm.rank())] = std::move(run);
      return Status::ok();
    });
    ASSERT_TRUE(status.isOk()) << status.toString();
  }
  for (int32_t chunks = 2; chunks <= kLocal; ++chunks) {
    for (int32_t r = 0; r < kRanks; ++r) {
      SCOPED_TRACE("chunks " + std::to_string(chunks) + " rank " + std::to_string(r));
      const ExpertsRun& got = runs[size_t(chunks - 1)][size_t(r)];
      const ExpertsRun& want = runs[0][size_t(r)];
      EXPECT_TRUE(bitwiseEqual(got.y, want.y));
      EXPECT_TRUE(bitwiseEqual(got.dx, want.dx));
      EXPECT_TRUE(bitwiseEqual(got.dGate, want.dGate));
      EXPECT_TRUE(bitwiseEqual(got.dUp, want.dUp));
      EXPECT_TRUE(bitwiseEqual(got.dDown, want.dDown));
    }
  }
  // The weight gradients are not trivially zero (rank 0 receives rows for its experts).
  double sum = 0;
  for (int64_t i = 0; i < runs[0][0].dGate.numel(); ++i) sum += std::abs(runs[0][0].dGate[i]);
  EXPECT_GT(sum, 0.0);
}

}  // namespace
}  // namespace moewb::engine
