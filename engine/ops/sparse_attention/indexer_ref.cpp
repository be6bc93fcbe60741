// Reference lightning indexer: projections, scores, top-k, KL objective and backward
// (see indexer.h). Scores come per (sequence, tile of kQueryTile query positions) from one GEMM,
// raw = qI_tile kI_seq^T over the keys before the tile's end; the top-k, the logits and the
// backward all evaluate that same GEMM on the same tiles, so the ReLU pattern of the backward is
// exactly the forward's and nothing depends on the thread count.
#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/linear/linear.h"
#include "ops/sparse_attention/indexer.h"
#include "ops/sparse_attention/selection.h"
#include "runtime/tensor/gemm.h"

namespace moewb::engine {
namespace {

constexpr int64_t kQueryTile = 16;    // query positions per score GEMM
constexpr int64_t kRowGrain = 16;     // tokens per task of the row-wise loops
constexpr int64_t kColumnGrain = 16;  // columns per task of the norm gain/bias reduction

struct QueryTile {
  int64_t seq = 0;    // sequence b
  int64_t begin = 0;  // first query position t of the tile
  int64_t end = 0;    // one past the last; keys s < end are scored
};

int64_t tilesPerSequence(const IndexerDims& dims) {
  return (dims.seqLen + kQueryTile - 1) / kQueryTile;
}

QueryTile queryTile(const IndexerDims& dims, int64_t seq, int64_t tile) {
  const int64_t begin = tile * kQueryTile;
  return {seq, begin, std::min(begin + kQueryTile, dims.seqLen)};
}

// raw [(end - begin) * HI, end]: raw[(t - begin) * HI + j, s] = qI[t, j] . kI[s].
template <typename T>
void rawScores(const IndexerDims& dims, const IndexerSaved<T>& saved, const QueryTile& tile,
               std::vector<T>& raw) {
  const int64_t rows = (tile.end - tile.begin) * dims.numHeads, base = tile.seq * dims.seqLen;
  raw.assign(size_t(rows * tile.end), T(0));
  gemm<T>(false, true, rows, tile.end, dims.headDim, T(1), saved.q.row(base + tile.begin),
          dims.headDim, saved.k.row(base), dims.headDim, T(0), raw.data(), tile.end);
}

// scores [(end - begin), end]: I[t, s] for s <= t, 0 above the diagonal.
template <typename T>
void tileScores(const IndexerDims& dims, const IndexerSaved<T>& saved, const QueryTile& tile,
                std::vector<T>& raw, std::vector<T>& scores) {
  rawScores(dims, saved, tile, raw);
  const int64_t hi = dims.numHeads, ld = tile.end, base = tile.seq * dims.seqLen;
  const T c = T(1) / std::sqrt(T(dims.headDim));
  scores.assign(size_t((tile.end - tile.begin) * ld), T(0));
  for (int64_t t = tile.begin; t < tile.end; ++t) {
    T* out = scores.data() + (t - tile.begin) * ld;
    for (int64_t j = 0; j < hi; ++j) {
      const T* r = raw.data() + ((t - tile.begin) * hi + j) * ld;
      const T wj = saved.w.at(base + t, j);
      for (int64_t s = 0; s <= t; ++s) out[s] += wj * std::max(r[s], T(0));
    }
    for (int64_t s = 0; s <= t; ++s) out[s] *= c;
  }
}

// Backward of one sequence, tile by tile in order: coef[(t, j), s] = dI[t, s] wI[t, j] dI^-0.5
// where raw > 0 (selected keys only), then dq_tile = coef kI (GEMM), dk += coef^T qI_tile (GEMM,
// accumulated in tile order) and dwPre[t, j] = dI^-0.5 HI^-0.5 sum_s dI[t, s] ReLU(raw).
template <typename T>
void indexerSequenceGrads(const IndexerDims& dims, const IndexerSaved<T>& saved,
                          const Tensor<int32_t>& selected, const Tensor<T>& dLogits, int64_t seq,
                          Tensor<T>& dq, Tensor<T>& dwPre, Tensor<T>& dk) {
  const int64_t hi = dims.numHeads, di = dims.headDim, width = selected.dim(1);
  const int64_t base = seq * dims.seqLen;
  const T c = T(1) / std::sqrt(T(di)), headScale = T(1) / std::sqrt(T(hi));
  std::vector<T> raw, coef;
  for (int64_t index = 0; index < tilesPerSequence(dims); ++index) {
    const QueryTile tile = queryTile(dims, seq, index);
    rawScores(dims, saved, tile, raw);
    const int64_t ld = tile.end, rows = (tile.end - tile.begin) * hi;
    coef.assign(size_t(rows * ld), T(0));
    for (int64_t t = tile.begin; t < tile.end; ++t) {
      const int32_t* sel = selected.row(base + t);
      const int64_t count = selectedCount(sel, width);
      for (int64_t j = 0; j < hi; ++j) {
        const int64_t offset = ((t - tile.begin) * hi + j) * ld;
        const T wj = saved.w.at(base + t, j);
        T dwAcc = 0;
        for (int64_t slot = 0; slot < count; ++slot) {
          const T a = raw[size_t(offset + sel[slot])];
          if (!(a > T(0))) continue;
          const T g = dLogits.at(base + t, slot);
          dwAcc += g * a;
          coef[size_t(offset + sel[slot])] = g * wj * c;
        }
        dwPre.at(base + t, j) = dwAcc * c * headScale;
      }
    }
    gemm<T>(false, false, rows, di, ld, T(1), coef.data(), ld, saved.k.row(base), di, T(0),
            dq.row(base + tile.begin), di);
    gemm<T>(true, false, ld, di, rows, T(1), coef.data(), ld, saved.q.row(base + tile.begin), di,
            T(1), dk.row(base), di);
  }
}

// LayerNorm backward of the key: returns d(x WkI^T) [N, dI]; adds into the gain and bias grads
// (reduced over rows in row order per column tile).
template <typename T>
Tensor<T> keyNormBackward(ThreadPool& pool, const IndexerSaved<T>& saved, const Tensor<T>& dk,
                          const Tensor<T>& gain, Tensor<T>& dGain, Tensor<T>& dBias) {
  const int64_t n = dk.dim(0), di = dk.dim(1);
  Tensor<T> dPre({n, di});  // [N, dI]
  pool.parallelForRange(n, kRowGrain, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const T* g = dk.row(r);
      const T* xhat = saved.kHat.row(r);
      T sumG = 0, sumGX = 0;
      for (int64_t i = 0; i < di; ++i) {
        sumG += g[i] * gain[i];
        sumGX += g[i] * gain[i] * xhat[i];
      }
      const T meanG = sumG / T(di), meanGX = sumGX / T(di), rstd = saved.rstd[r];
      T* out = dPre.row(r);
      for (int64_t i = 0; i < di; ++i) out[i] = rstd * (g[i] * gain[i] - meanG - xhat[i] * meanGX);
    }
  });
  pool.parallelForRange(di, kColumnGrain, [&](int64_t begin, int64_t end) {
    for (int64_t r = 0; r < n; ++r) {
      for (int64_t i = begin; i < end; ++i) {
        dGain[i] += dk.at(r, i) * saved.kHat.at(r, i);
        dBias[i] += dk.at(r, i);
      }
    }
  });
  return dPre;
}

}  // namespace

template <typename T>
void indexerForward(ThreadPool& pool, const IndexerDims& dims, const Tensor<T>& x,
                    const IndexerWeights<T>& weights, IndexerSaved<T>& saved) {
  const int64_t n = dims.tokens(), d = dims.dModel, hi = dims.numHeads, di = dims.headDim;
  MOEWB_CHECK(x.dim(0) == n && x.dim(1) == d);
  MOEWB_CHECK(weights.wq.numel() == hi * di * d && weights.wk.numel() == di * d);
  MOEWB_CHECK(weights.ww.numel() == hi * d && weights.normGain.numel() == di &&
              weights.normBias.numel() == di);
  saved.q = Tensor<T>({n, hi * di});
  linearForward(pool, x.data(), weights.wq.data(), saved.q.data(), n, d, hi * di);
  Tensor<T> kPre({n, di});  // [N, dI]
  linearForward(pool, x.data(), weights.wk.data(), kPre.data(), n, d, di);
  saved.w = Tensor<T>({n, hi});
  linearForward(pool, x.data(), weights.ww.data(), saved.w.data(), n, d, hi);
  saved.kHat = Tensor<T>({n, di});
  saved.k = Tensor<T>({n, di});
  saved.rstd = Tensor<T>({n});
  const T headScale = T(1) / std::sqrt(T(hi));
  pool.parallelForRange(n, kRowGrain, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const T* pre = kPre.row(r);
      T mean = 0, var = 0;
      for (int64_t i = 0; i < di; ++i) mean += pre[i];
      mean /= T(di);
      for (int64_t i = 0; i < di; ++i) var += (pre[i] - mean) * (pre[i] - mean);
      const T rstd = T(1) / std::sqrt(var / T(di) + T(dims.normEps));
      saved.rstd[r] = rstd;
      for (int64_t i = 0; i < di; ++i) {
        saved.kHat.at(r, i) = (pre[i] - mean) * rstd;
        saved.k.at(r, i) = saved.kHat.at(r, i) * weights.normGain[i] + weights.normBias[i];
      }
      for (int64_t j = 0; j < hi; ++j) saved.w.at(r, j) *= headScale;
    }
  });
}

template <typename T>
Tensor<int32_t> indexerTopK(ThreadPool& pool, const IndexerDims& dims, const IndexerSaved<T>& saved,
                            int64_t topK) {
  MOEWB_CHECK(topK >= 1);
  const int64_t width = std::min(topK, dims.seqLen), tiles = tilesPerSequence(dims);
  Tensor<int32_t> selected({dims.tokens(), width});  // [N, W]
  pool.parallelFor(dims.batch * tiles, [&](int64_t task) {
    const QueryTile tile = queryTile(dims, task / tiles, task % tiles);
    std::vector<T> raw, scores;
    tileScores(dims, saved, tile, raw, scores);
    for (int64_t t = tile.begin; t < tile.end; ++t) {
      topKRow(scores.data() + (t - tile.begin) * tile.end, t + 1, width,
              selected.row(tile.seq * dims.seqLen + t), width);
    }
  });
  return selected;
}

template <typename T>
Tensor<T> indexerLogits(ThreadPool& pool, const IndexerDims& dims, const IndexerSaved<T>& saved,
                        const Tensor<int32_t>& selected) {
  const int64_t width = selected.dim(1), tiles = tilesPerSequence(dims);
  Tensor<T> logits({dims.tokens(), width});  // [N, W]
  pool.parallelFor(dims.batch * tiles, [&](int64_t task) {
    const QueryTile tile = queryTile(dims, task / tiles, task % tiles);
    std::vector<T> raw, scores;
    tileScores(dims, saved, tile, raw, scores);
    for (int64_t t = tile.begin; t < tile.end; ++t) {
      const int64_t n = tile.seq * dims.seqLen + t;
      const int32_t* sel = selected.row(n);
      const T* row = scores.data() + (t - tile.begin) * tile.end;
      const int64_t count = selectedCount(sel, width);
      for (int64_t slot = 0; slot < count; ++slot) logits.at(n, slot) = row[sel[slot]];
    }
  });
  return logits;
}

template <typename T>
double indexerKlForward(ThreadPool& pool, const Tensor<T>& logits, const Tensor<T>& target,
                        const Tensor<int32_t>& selected, Tensor<T>& probs) {
  const int64_t n = logits.dim(0), width = logits.dim(1);
  MOEWB_CHECK(target.sameShape(logits) && selected.dim(0) == n && selected.dim(1) == width);
  probs = Tensor<T>({n, width});
  std::vector<double> rowKl(size_t(n), 0.0);
  pool.parallelForRange(n, kRowGrain, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const int64_t count = selectedCount(selected.row(r), width);
      const T* l = logits.row(r);
      T maxValue = l[0];
      for (int64_t s = 1; s < count; ++s) maxValue = std::max(maxValue, l[s]);
      T sum = 0;
      for (int64_t s = 0; s < count; ++s) sum += std::exp(l[s] - maxValue);
      const T lse = maxValue + std::log(sum);
      double kl = 0;
      for (int64_t s = 0; s < count; ++s) {
        const T logP = l[s] - lse;
        probs.at(r, s) = std::exp(logP);
        const double p = double(target.at(r, s));
        if (p > 0) kl += p * (std::log(p) - double(logP));
      }
      rowKl[size_t(r)] = kl;
    }
  });
  double total = 0;
  for (double kl : rowKl) total += kl;
  return total;
}

template <typename T>
Tensor<T> indexerKlBackward(ThreadPool& pool, const Tensor<T>& probs, const Tensor<T>& target,
                            const Tensor<int32_t>& selected, double scale) {
  const int64_t n = probs.dim(0), width = probs.dim(1);
  Tensor<T> dLogits({n, width});  // [N, W]
  pool.parallelForRange(n, kRowGrain, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const int64_t count = selectedCount(selected.row(r), width);
      for (int64_t s = 0; s < count; ++s) {
        dLogits.at(r, s) = T(scale) * (probs.at(r, s) - target.at(r, s));
      }
    }
  });
  return dLogits;
}

template <typename T>
void indexerBackward(ThreadPool& pool, const IndexerDims& dims, const Tensor<T>& x,
                     const IndexerSaved<T>& saved, const Tensor<int32_t>& selected,
                     const Tensor<T>& dLogits, const IndexerWeights<T>& weights,
                     const IndexerGrads<T>& grads) {
  const int64_t n = dims.tokens(), d = dims.dModel, hi = dims.numHeads, di = dims.headDim;
  const int64_t width = selected.dim(1);
  MOEWB_CHECK(dLogits.dim(0) == n && dLogits.dim(1) == width);
  Tensor<T> dq({n, hi * di});  // [N, HI*dI]
  Tensor<T> dwPre({n, hi});    // [N, HI] gradient of x Ww^T
  Tensor<T> dk({n, di});       // [N, dI] gradient of the normalised key
  pool.parallelFor(dims.batch, [&](int64_t seq) {
    indexerSequenceGrads(dims, saved, selected, dLogits, seq, dq, dwPre, dk);
  });
  Tensor<T> dkPre = keyNormBackward(pool, saved, dk, weights.normGain, grads.normGain,
                                    grads.normBias);  // [N, dI]
  linearBackwardWeight(pool, dq.data(), x.data(), grads.wq.data(), n, d, hi * di);
  linearBackwardWeight(pool, dkPre.data(), x.data(), grads.wk.data(), n, d, di);
  linearBackwardWeight(pool, dwPre.data(), x.data(), grads.ww.data(), n, d, hi);
}

#define MOEWB_INSTANTIATE_INDEXER(T)                                                               \
  template void indexerForward<T>(ThreadPool&, const IndexerDims&, const Tensor<T>&,               \
                                  const IndexerWeights<T>&, IndexerSaved<T>&);                     \
  template Tensor<int32_t> indexerTopK<T>(ThreadPool&, const IndexerDims&, const IndexerSaved<T>&, \
                                          int64_t);                                                \
  template Tensor<T> indexerLogits<T>(ThreadPool&, const IndexerDims&, const IndexerSaved<T>&,     \
                                      const Tensor<int32_t>&);                                     \
  template double indexerKlForward<T>(ThreadPool&, const Tensor<T>&, const Tensor<T>&,             \
                                      const Tensor<int32_t>&, Tensor<T>&);                         \
  template Tensor<T> indexerKlBackward<T>(ThreadPool&, const Tensor<T>&, const Tensor<T>&,         \
                                          const Tensor<int32_t>&, double);                         \
  template void indexerBackward<T>(                                                                \
      ThreadPool&, const IndexerDims&, const Tensor<T>&, const IndexerSaved<T>&,                   \
      const Tensor<int32_t>&, const Tensor<T>&, const IndexerWeights<T>&, const IndexerGrads<T>&);
MOEWB_INSTANTIATE_INDEXER(float)
MOEWB_INSTANTIATE_INDEXER(double)

}  // namespace moewb::engine
