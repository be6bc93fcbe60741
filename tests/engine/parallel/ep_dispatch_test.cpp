// Expert-parallel experts stage: EP = 2 and 4 against the local grouped experts on the same rows,
// forward and backward, with experts and whole ranks that receive no rows.
#include "model/parallel/ep_dispatch.h"

#include <gtest/gtest.h>

#include <cmath>
#include <mutex>
#include <vector>

#include "comm/in_process_comm.h"
#include "runtime/tensor/rng.h"

namespace moewb::engine {
namespace {

constexpr int64_t kExperts = 4, kWidth = 5, kHidden = 3;

Tensor<float> randomTensor(const std::vector<int64_t>& shape, uint64_t seed) {
  Rng rng(seed);
  Tensor<float> t(shape);
  for (int64_t i = 0; i < t.numel(); ++i) t[i] = float(rng.normal());
  return t;
}

// Rows rank r sends to expert e: some experts get none, and rank 1 routes nothing at all.
int64_t rowsFor(int32_t rank, int64_t expert) {
  if (rank == 1) return 0;
  return (rank + expert) % 3 == 0 ? 0 : 1 + (rank * 7 + expert * 3) % 4;
}

Tensor<int32_t> offsetsFor(int32_t rank) {
  Tensor<int32_t> offsets({kExperts + 1});
  for (int64_t e = 0; e < kExperts; ++e) offsets[e + 1] = offsets[e] + int32_t(rowsFor(rank, e));
  return offsets;
}

Tensor<float> sliceExperts(const Tensor<float>& full, int64_t first, int64_t count) {
  std::vector<int64_t> shape = full.shape();
  shape[0] = count;
  Tensor<float> out(shape);
  const int64_t per = full.numel() / full.dim(0);
  std::copy_n(full.data() + first * per, count * per, out.data());
  return out;
}

void expectNear(const Tensor<float>& a, const Tensor<float>& b, const char* what) {
  ASSERT_EQ(a.numel(), b.numel()) << what;
  for (int64_t i = 0; i < a.numel(); ++i) {
    EXPECT_NEAR(a[i], b[i], 1e-5 * (1 + std::fabs(b[i]))) << what << " element " << i;
  }
}

void runEp(int32_t ep) {
  SCOPED_TRACE("ep " + std::to_string(ep));
  const Tensor<float> gate = randomTensor({kExperts, kHidden, kWidth}, 1);
  const Tensor<float> up = randomTensor({kExperts, kHidden, kWidth}, 2);
  const Tensor<float> down = randomTensor({kExperts, kWidth, kHidden}, 3);
  // The reference: every rank's rows through all experts locally; expert grads summed over ranks.
  Tensor<float> refGate({kExperts, kHidden, kWidth}), refUp(refGate.shape()), refDown(down.shape());
  std::vector<Tensor<float>> refY, refDx;
  ThreadPool pool(1);
  for (int32_t r = 0; r < ep; ++r) {
    const Tensor<int32_t> offsets = offsetsFor(r);
    const Tensor<float> x = randomTensor({offsets[kExperts], kWidth}, 10 + r);
    const Tensor<float> dy = randomTensor({offsets[kExperts], kWidth}, 20 + r);
    ExpertsSaved<float> saved;
    refY.push_back(expertsForward(pool, x, offsets, ExpertWeights<float>{gate, up, down}, saved));
    refDx.push_back(expertsBackward(pool, dy, x, offsets, ExpertWeights<float>{gate, up, down},
                                    saved, ExpertGrads<float>{refGate, refUp, refDown}));
  }
  std::mutex mutex;
  const Status status = runRanks(ep, [&](Communicator& comm) -> Status {
    const int32_t r = comm.rank();
    const int64_t el = kExperts / ep;
    ThreadPool rankPool(1);
    const Tensor<int32_t> offsets = offsetsFor(r);
    const Tensor<float> x = randomTensor({offsets[kExperts], kWidth}, 10 + r);
    const Tensor<float> dy = randomTensor({offsets[kExperts], kWidth}, 20 + r);
    const Tensor<float> g = sliceExperts(gate, r * el, el), u = sliceExperts(up, r * el, el);
    const Tensor<float> d = sliceExperts(down, r * el, el);
    Tensor<float> dg(g.shape()), du(u.shape()), dd(d.shape());
    EpSaved saved;
    CommTag tag;
    const Tensor<float> y = epExpertsForward(rankPool, comm, x, offsets,
                                             ExpertWeights<float>{g, u, d}, {}, saved, &tag);
    const Tensor<float> dx = epExpertsBackward(rankPool, comm, dy, ExpertWeights<float>{g, u, d},
                                               ExpertGrads<float>{dg, du, dd}, {}, saved, &tag);
    std::lock_guard<std::mutex> lock(mutex);
    expectNear(y, refY[size_t(r)], "y");
    expectNear(dx, refDx[size_t(r)], "dx");
    expectNear(dg, sliceExperts(refGate, r * el, el), "dgate");
    expectNear(du, sliceExperts(refUp, r * el, el), "dup");
    expectNear(dd, sliceExperts(refDown, r * el, el), "ddown");
    return Status::ok();
  });
  EXPECT_TRUE(status.isOk()) << status.toString();
}

TEST(EpDispatch, MatchesLocalExpertsWithEmptyExpertsAndRanks) {
  runEp(2);
  runEp(4);
}

}  // namespace
}  // namespace moewb::engine
