// KDA core: the chunked WY/UT form against the naive recurrence (fp32, awkward T, partial last
// chunks, GVA), state hand-off, extreme decays, the chunked backward against finite differences of
// the naive recurrence in double, and bitwise determinism across thread counts.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kda_test_util.h"
#include "ops/kda/kda.h"

namespace moewb::engine {
namespace {

using test::convertInputs;
using test::expectClose;
using test::KdaCoreInputs;
using test::randomCoreInputs;

template <typename T>
Tensor<T> naive(ThreadPool& pool, const KdaCoreDims& dims, const KdaCoreInputs<T>& in,
                Tensor<T>& finalState) {
  return kdaNaiveForward(pool, dims, in.q, in.k, in.v, in.g, in.beta, in.s0, finalState);
}

template <typename T>
Tensor<T> chunked(ThreadPool& pool, const KdaCoreDims& dims, const KdaCoreInputs<T>& in,
                  Tensor<T>& finalState, KdaChunkSaved<T>* saved = nullptr) {
  return kdaChunkForward(pool, dims, in.q, in.k, in.v, in.g, in.beta, in.s0, finalState, saved);
}

// Tokens [t0, t1) of every sequence of x [B*T, W] as a [B*(t1-t0), W] tensor.
template <typename T>
Tensor<T> sliceTime(const Tensor<T>& x, int64_t batch, int64_t seqLen, int64_t t0, int64_t t1) {
  const int64_t width = x.dim(1);
  Tensor<T> y({batch * (t1 - t0), width});
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t t = t0; t < t1; ++t) {
      for (int64_t c = 0; c < width; ++c) y.at(b * (t1 - t0) + t - t0, c) = x.at(b * seqLen + t, c);
    }
  }
  return y;
}

template <typename T>
KdaCoreInputs<T> sliceInputs(const KdaCoreInputs<T>& in, const KdaCoreDims& dims, int64_t t0,
                             int64_t t1) {
  const int64_t b = dims.batch, t = dims.seqLen;
  return {sliceTime(in.q, b, t, t0, t1),    sliceTime(in.k, b, t, t0, t1),
          sliceTime(in.v, b, t, t0, t1),    sliceTime(in.g, b, t, t0, t1),
          sliceTime(in.beta, b, t, t0, t1), Tensor<T>()};
}

TEST(KdaChunk, ForwardMatchesNaiveRecurrenceFloat) {
  ThreadPool pool(2);
  for (int64_t seqLen : {1, 5, 63, 64, 65, 130}) {
    for (int64_t chunk : {16, 64}) {
      for (bool withState : {false, true}) {
        Rng rng(uint64_t(1000 + seqLen * 7 + chunk + (withState ? 1 : 0)));
        const KdaCoreDims dims{2, seqLen, 2, 2, 16, 12, chunk};
        KdaCoreInputs<double> ind = randomCoreInputs<double>(dims, rng, -5.0, withState);
        KdaCoreInputs<float> inf = convertInputs<float>(ind);
        Tensor<float> naiveState, chunkState;
        Tensor<double> refState;
        Tensor<float> oNaive = naive(pool, dims, inf, naiveState);
        Tensor<float> oChunk = chunked(pool, dims, inf, chunkState);
        Tensor<double> oRef = naive(pool, dims, ind, refState);  // fp64 for the record
        SCOPED_TRACE("T=" + std::to_string(seqLen) + " C=" + std::to_string(chunk) +
                     (withState ? " with S0" : ""));
        expectClose("o chunk vs naive", oChunk, oNaive, 1e-5);
        expectClose("final state chunk vs naive", chunkState, naiveState, 1e-5);
        expectClose("o chunk fp32 vs fp64", oChunk, oRef, 1e-5);
        expectClose("state chunk fp32 vs fp64", chunkState, refState, 1e-5);
      }
    }
  }
}

TEST(KdaChunk, GroupedValueHeadsMatchNaive) {
  ThreadPool pool(2);
  Rng rng(31);
  const KdaCoreDims dims{2, 45, 2, 6, 8, 5, 16};  // HV = 3 H
  KdaCoreInputs<double> in = randomCoreInputs<double>(dims, rng, -3.0, true);
  Tensor<double> s1, s2;
  Tensor<double> o1 = naive(pool, dims, in, s1);
  Tensor<double> o2 = chunked(pool, dims, in, s2);
  expectClose("o", o2, o1, 1e-12);
  expectClose("state", s2, s1, 1e-12);
}

TEST(KdaChunk, StateHandOffMatchesUnsplitRun) {
  ThreadPool pool(2);
  Rng rng(11);
  const KdaCoreDims full{2, 130, 2, 2, 16, 12, 64};
  KdaCoreInputs<float> in = convertInputs<float>(randomCoreInputs<double>(full, rng, -5.0, true));
  Tensor<float> fullState;
  Tensor<float> oFull = chunked(pool, full, in, fullState);
  const int64_t split = 65;
  KdaCoreDims firstDims = full, secondDims = full;
  firstDims.seqLen = split;
  secondDims.seqLen = full.seqLen - split;
  KdaCoreInputs<float> first = sliceInputs(in, full, 0, split);
  KdaCoreInputs<float> second = sliceInputs(in, full, split, full.seqLen);
  first.s0 = in.s0.clone();
  Tensor<float> midState, endState;
  Tensor<float> o1 = chunked(pool, firstDims, first, midState);
  second.s0 = std::move(midState);
  Tensor<float> o2 = chunked(pool, secondDims, second, endState);
  expectClose("first half", o1, sliceTime(oFull, 2, full.seqLen, 0, split), 1e-5);
  expectClose("second half", o2, sliceTime(oFull, 2, full.seqLen, split, full.seqLen), 1e-5);
  expectClose("final state", endState, fullState, 1e-5);
}

TEST(KdaChunk, ExtremeDecaysStayFiniteAndMatch) {
  ThreadPool pool(1);
  uint64_t seed = 17;
  for (double gMin : {-1e-4, -60.0, -400.0}) {
    Rng rng(seed++);
    const KdaCoreDims dims{1, 130, 1, 1, 16, 8, 64};
    KdaCoreInputs<float> in = convertInputs<float>(randomCoreInputs<double>(dims, rng, gMin, true));
    Tensor<float> s1, s2;
    Tensor<float> o1 = naive(pool, dims, in, s1);
    Tensor<float> o2 = chunked(pool, dims, in, s2);
    SCOPED_TRACE("gMin=" + std::to_string(gMin));
    expectClose("o", o2, o1, 2e-5);
    expectClose("state", s2, s1, 2e-5);
  }
}

// Gradients of loss = <o, RO> + <S_T, RS> from kdaChunkBackward vs central differences of the
// naive recurrence, in double, for every input element.
void checkChunkBackward(const KdaCoreDims& dims, uint64_t seed) {
  ThreadPool pool(2);
  Rng rng(seed);
  KdaCoreInputs<double> in = randomCoreInputs<double>(dims, rng, -1.5, true);
  Tensor<double> ro =
      test::randomTensor<double>({dims.tokens(), dims.valueHeads() * dims.valueDim}, rng);
  Tensor<double> rs =
      test::randomTensor<double>({dims.batch, dims.valueHeads(), dims.keyDim, dims.valueDim}, rng);
  auto loss = [&] {
    Tensor<double> state;
    Tensor<double> o = naive(pool, dims, in, state);
    return test::dot(o, ro) + test::dot(state, rs);
  };
  KdaChunkSaved<double> saved;
  Tensor<double> state;
  chunked(pool, dims, in, state, &saved);
  KdaCoreGrads<double> grads =
      kdaChunkBackward(pool, dims, ro, rs, in.q, in.k, in.v, in.g, in.beta, in.s0, saved);
  test::expectGradientMatches("dq", in.q, grads.dq, loss);
  test::expectGradientMatches("dk", in.k, grads.dk, loss);
  test::expectGradientMatches("dv", in.v, grads.dv, loss);
  test::expectGradientMatches("dg", in.g, grads.dg, loss);
  test::expectGradientMatches("dbeta", in.beta, grads.dbeta, loss);
  test::expectGradientMatches("dS0", in.s0, grads.dInitialState, loss);
}

TEST(KdaChunk, BackwardMatchesFiniteDifferencesOfNaive) {
  checkChunkBackward(KdaCoreDims{2, 37, 1, 1, 4, 3, 16}, 5);
}

TEST(KdaChunk, BackwardMatchesFiniteDifferencesSingleAndPartialChunk) {
  checkChunkBackward(KdaCoreDims{1, 13, 1, 1, 4, 3, 16}, 6);  // one partial chunk
  checkChunkBackward(KdaCoreDims{1, 9, 1, 1, 3, 2, 1}, 7);    // C = 1: pure inter-chunk pass
}

TEST(KdaChunk, BackwardMatchesFiniteDifferencesAcrossSubBlocks) {
  // Chunks longer than one 16-row sub-block exercise the factored off-diagonal sub-blocks.
  checkChunkBackward(KdaCoreDims{1, 70, 1, 1, 4, 3, 48}, 9);   // chunks of 48 and 22 rows
  checkChunkBackward(KdaCoreDims{2, 37, 1, 1, 5, 2, 64}, 10);  // one partial chunk, 16+16+5
}

TEST(KdaChunk, BackwardMatchesFiniteDifferencesGroupedValueHeads) {
  checkChunkBackward(KdaCoreDims{2, 21, 1, 2, 4, 3, 8}, 8);  // HV = 2 H: dq, dk summed
}

void checkDeterminism(const KdaCoreDims& dims) {
  Rng rng(21);
  KdaCoreInputs<float> in = convertInputs<float>(randomCoreInputs<double>(dims, rng, -4.0, true));
  Tensor<float> dO = test::randomTensor<float>({dims.tokens(), 4 * 6}, rng);
  Tensor<float> dS = test::randomTensor<float>({3, 4, 8, 6}, rng);
  auto run = [&](int32_t threads, Tensor<float>& o, KdaCoreGrads<float>& grads) {
    ThreadPool pool(threads);
    KdaChunkSaved<float> saved;
    Tensor<float> state;
    o = chunked(pool, dims, in, state, &saved);
    grads = kdaChunkBackward(pool, dims, dO, dS, in.q, in.k, in.v, in.g, in.beta, in.s0, saved);
  };
  Tensor<float> o1, o2;
  KdaCoreGrads<float> g1, g2;
  run(1, o1, g1);
  run(2, o2, g2);
  test::expectBitwiseEqual("o", o1, o2);
  test::expectBitwiseEqual("dq", g1.dq, g2.dq);
  test::expectBitwiseEqual("dk", g1.dk, g2.dk);
  test::expectBitwiseEqual("dv", g1.dv, g2.dv);
  test::expectBitwiseEqual("dg", g1.dg, g2.dg);
  test::expectBitwiseEqual("dbeta", g1.dbeta, g2.dbeta);
  test::expectBitwiseEqual("dS0", g1.dInitialState, g2.dInitialState);
}

TEST(KdaChunk, ResultsDoNotDependOnThreadCount) {
  for (int64_t chunk : {16, 64}) {
    checkDeterminism(KdaCoreDims{3, 70, 2, 4, 8, 6, chunk});
  }
}

}  // namespace
}  // namespace moewb::engine
