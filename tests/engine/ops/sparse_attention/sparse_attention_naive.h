// Naive dense oracle for the gated sparse attention layer (ENGINE-MATH §3, "Naive reference"),
// written straight from the equations and sharing no code with the engine: per sequence it
// builds the dense indexer matrix I[T, T], a causal mask, a top-k mask per row by ranking (ties to
// the lower position), masked dense softmax attention with a sink column, the sigmoid gate from
// x, Wo, and the indexer KL against the head-summed, renormalised attention probabilities.
// Everything in double, O(B T^2 (H dh + HI dI)) time. Test-only.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "ops/sparse_attention/sparse_attention.h"

namespace moewb::engine::test {

struct NaiveSparseResult {
  std::vector<double> y;      // [N, D]
  std::vector<uint8_t> mask;  // [N, T] 1 where query n attends to key position s
  double indexerKl = 0;       // mean over query tokens
};

namespace naive_detail {

// out[r, o] = sum_i x[r, i] w[o, i] over the rows [row0, row0 + rows).
template <typename T>
std::vector<double> project(const Tensor<T>& x, const Tensor<T>& w, int64_t row0, int64_t rows) {
  const int64_t in = x.dim(1), out = w.dim(0);
  std::vector<double> result(size_t(rows * out), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t o = 0; o < out; ++o) {
      double sum = 0;
      for (int64_t i = 0; i < in; ++i) sum += double(x.at(row0 + r, i)) * double(w.at(o, i));
      result[size_t(r * out + o)] = sum;
    }
  }
  return result;
}

// Dense indexer matrix of one sequence, I[t * T + s] for s <= t.
template <typename T>
std::vector<double> indexerMatrix(const SparseAttentionDims& dims, const Tensor<T>& x,
                                  const SparseAttentionWeights<T>& w, int64_t row0) {
  const int64_t tl = dims.seqLen, hi = dims.indexerHeads, di = dims.indexerDim;
  const std::vector<double> qI = project(x, w.wqI, row0, tl);
  std::vector<double> kI = project(x, w.wkI, row0, tl);
  const std::vector<double> wI = project(x, w.ww, row0, tl);
  for (int64_t s = 0; s < tl; ++s) {  // LayerNorm with gain and bias
    double mean = 0, var = 0;
    for (int64_t i = 0; i < di; ++i) mean += kI[size_t(s * di + i)] / double(di);
    for (int64_t i = 0; i < di; ++i) var += std::pow(kI[size_t(s * di + i)] - mean, 2) / double(di);
    for (int64_t i = 0; i < di; ++i) {
      double& value = kI[size_t(s * di + i)];
      value = (value - mean) / std::sqrt(var + dims.indexerNormEps) * double(w.kINormGain[i]) +
              double(w.kINormBias[i]);
    }
  }
  std::vector<double> scores(size_t(tl * tl), 0.0);
  for (int64_t t = 0; t < tl; ++t) {
    for (int64_t s = 0; s <= t; ++s) {
      double sum = 0;
      for (int64_t j = 0; j < hi; ++j) {
        double a = 0;
        for (int64_t i = 0; i < di; ++i)
          a += qI[size_t(t * hi * di + j * di + i)] * kI[size_t(s * di + i)];
        sum += wI[size_t(t * hi + j)] / std::sqrt(double(hi)) / std::sqrt(double(di)) *
               std::max(a, 0.0);
      }
      scores[size_t(t * tl + s)] = sum;
    }
  }
  return scores;
}

// mask[t * T + s]: causal, and in the sparse stage ranked among the topK best of row t.
inline std::vector<uint8_t> selectionMask(const SparseAttentionDims& dims,
                                          const std::vector<double>& scores) {
  const int64_t tl = dims.seqLen;
  std::vector<uint8_t> mask(size_t(tl * tl), 0);
  for (int64_t t = 0; t < tl; ++t) {
    for (int64_t s = 0; s <= t; ++s) {
      int64_t rank = 0;  // keys ahead of s: higher score, or equal score at a lower position
      for (int64_t r = 0; r <= t; ++r) {
        const double a = scores[size_t(t * tl + r)], b = scores[size_t(t * tl + s)];
        if (a > b || (a == b && r < s)) ++rank;
      }
      mask[size_t(t * tl + s)] = dims.stage == SparseStage::kDenseWarmup || rank < dims.topK;
    }
  }
  return mask;
}

// One sequence, all heads: masked softmax with a sink column. Adds each head's probabilities
// into probSum [T, T] and writes the concatenated head outputs into context [T, H*dh].
template <typename T>
void attendSequence(const SparseAttentionDims& dims, const SparseAttentionWeights<T>& w,
                    const std::vector<double>& q, const std::vector<double>& k,
                    const std::vector<double>& v, const std::vector<uint8_t>& mask,
                    std::vector<double>& probSum, std::vector<double>& context) {
  const int64_t tl = dims.seqLen, hd = dims.headDim, qw = dims.numHeads * hd;
  const int64_t kvw = dims.kvHeads * hd, group = dims.numHeads / dims.kvHeads;
  for (int64_t h = 0; h < dims.numHeads; ++h) {
    const double sink = double(w.sink[h]);
    const int64_t qOff = h * hd, kvOff = (h / group) * hd;
    for (int64_t t = 0; t < tl; ++t) {
      std::vector<double> z(size_t(tl + 1), -INFINITY);  // column T is the sink
      z[size_t(tl)] = sink;
      for (int64_t s = 0; s < tl; ++s) {
        if (!mask[size_t(t * tl + s)]) continue;
        double dotQk = 0;
        for (int64_t i = 0; i < hd; ++i) {
          dotQk += q[size_t(t * qw + qOff + i)] * k[size_t(s * kvw + kvOff + i)];
        }
        z[size_t(s)] = dotQk / std::sqrt(double(hd));
      }
      const double maxValue = *std::max_element(z.begin(), z.end());
      double den = 0;
      for (double value : z) den += std::exp(value - maxValue);
      for (int64_t s = 0; s < tl; ++s) {
        const double p = std::exp(z[size_t(s)] - maxValue) / den;
        probSum[size_t(t * tl + s)] += p;
        for (int64_t i = 0; i < hd; ++i) {
          context[size_t(t * qw + qOff + i)] += p * v[size_t(s * kvw + kvOff + i)];
        }
      }
    }
  }
}

// Sum over the rows of one sequence of KL(p* || softmax of the masked indexer scores), with p*
// the masked, renormalised head sum of the attention probabilities.
inline double sequenceKl(int64_t tl, const std::vector<double>& scores,
                         const std::vector<uint8_t>& mask, const std::vector<double>& probSum) {
  double kl = 0;
  for (int64_t t = 0; t < tl; ++t) {
    double targetSum = 0, indexerSum = 0, indexerMax = -INFINITY;
    for (int64_t s = 0; s < tl; ++s) {
      if (!mask[size_t(t * tl + s)]) continue;
      targetSum += probSum[size_t(t * tl + s)];
      indexerMax = std::max(indexerMax, scores[size_t(t * tl + s)]);
    }
    for (int64_t s = 0; s < tl; ++s) {
      if (mask[size_t(t * tl + s)]) indexerSum += std::exp(scores[size_t(t * tl + s)] - indexerMax);
    }
    for (int64_t s = 0; s < tl; ++s) {
      if (!mask[size_t(t * tl + s)]) continue;
      const double target = probSum[size_t(t * tl + s)] / targetSum;
      const double indexerP = std::exp(scores[size_t(t * tl + s)] - indexerMax) / indexerSum;
      kl += target * std::log(target / indexerP);
    }
  }
  return kl;
}

}  // namespace naive_detail

template <typename T>
NaiveSparseResult naiveSparseAttention(const SparseAttentionDims& dims, const Tensor<T>& x,
                                       const SparseAttentionWeights<T>& w) {
  using namespace naive_detail;
  const int64_t tl = dims.seqLen, dm = dims.dModel, qw = dims.numHeads * dims.headDim;
  NaiveSparseResult result;
  result.y.assign(size_t(dims.tokens() * dm), 0.0);
  result.mask.assign(size_t(dims.tokens() * tl), 0);
  double klSum = 0;
  for (int64_t b = 0; b < dims.batch; ++b) {
    const int64_t row0 = b * tl;
    const std::vector<double> scores = indexerMatrix(dims, x, w, row0);
    const std::vector<uint8_t> mask = selectionMask(dims, scores);
    std::copy(mask.begin(), mask.end(), result.mask.begin() + row0 * tl);
    std::vector<double> probSum(size_t(tl * tl), 0.0), context(size_t(tl * qw), 0.0);
    attendSequence(dims, w, project(x, w.wq, row0, tl), project(x, w.wk, row0, tl),
                   project(x, w.wv, row0, tl), mask, probSum, context);
    const std::vector<double> gatePre = project(x, w.wgate, row0, tl);
    for (int64_t t = 0; t < tl; ++t) {
      for (int64_t o = 0; o < dm; ++o) {
        double sum = 0;
        for (int64_t c = 0; c < qw; ++c) {
          const double gate = 1.0 / (1.0 + std::exp(-gatePre[size_t(t * qw + c)]));
          sum += context[size_t(t * qw + c)] * gate * double(w.wo.at(o, c));
        }
        result.y[size_t((row0 + t) * dm + o)] = sum;
      }
    }
    klSum += sequenceKl(tl, scores, mask, probSum);
  }
  result.indexerKl = klSum / double(dims.tokens());
  return result;
}

}  // namespace moewb::engine::test
