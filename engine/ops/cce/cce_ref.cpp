// Reference CCE: blocked online log-sum-exp forward and tile-recomputing backward (see cce.h).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "ops/cce/cce.h"
#include "runtime/tensor/gemm.h"

namespace moewb::engine {
namespace {

constexpr int64_t kWeightRowTile = 16;  // rows of a vocab block's dWv per task

void checkShapes(int64_t n, int64_t d, const Tensor<int32_t>& targets, const CceOptions& options,
                 int64_t wvCols) {
  MOEWB_CHECK_EQ(wvCols, d);
  MOEWB_CHECK_EQ(targets.numel(), n);
  MOEWB_CHECK(options.tokenBlock > 0 && options.vocabBlock > 0);
}

// Folds the capped logits of one tile row z[cols] into the running (max, sum).
template <typename T>
void foldLseRow(T* z, int64_t cols, T cap, T& runMax, T& runSum) {
  if (cap > T(0)) {
    for (int64_t c = 0; c < cols; ++c) z[c] = detail::softCapLogit(z[c], cap);
  }
  T tileMax = z[0];
  for (int64_t c = 1; c < cols; ++c) tileMax = std::max(tileMax, z[c]);
  const T newMax = std::max(runMax, tileMax);
  T sum = runSum * std::exp(runMax - newMax);
  for (int64_t c = 0; c < cols; ++c) sum += std::exp(z[c] - newMax);
  runMax = newMax;
  runSum = sum;
}

// Forward of the token rows [t0, t1): lse, and per-token CE and z-loss terms.
template <typename T>
void forwardTokenBlock(const Tensor<T>& h, const Tensor<T>& wv, const Tensor<int32_t>& targets,
                       const CceOptions& options, int64_t t0, int64_t t1, Tensor<T>& lse,
                       std::vector<double>& tokenCe, std::vector<double>& tokenZ) {
  const int64_t rows = t1 - t0, d = h.dim(1), vocab = wv.dim(0);
  const int64_t vb = std::min(options.vocabBlock, vocab);
  const T cap = T(options.loss.softCap);
  Tensor<T> tile({rows, vb});  // [Tb, Vb] scratch
  std::vector<T> runMax(size_t(rows), -std::numeric_limits<T>::infinity());
  std::vector<T> runSum(size_t(rows), T(0));
  for (int64_t v0 = 0; v0 < vocab; v0 += vb) {
    const int64_t cols = std::min(vb, vocab - v0);
    gemm<T>(false, true, rows, cols, d, T(1), h.row(t0), d, wv.row(v0), d, T(0), tile.data(), cols);
    for (int64_t r = 0; r < rows; ++r) {
      foldLseRow(tile.data() + r * cols, cols, cap, runMax[size_t(r)], runSum[size_t(r)]);
    }
  }
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t t = t0 + r;
    lse[t] = runMax[size_t(r)] + std::log(runSum[size_t(r)]);
    const int32_t y = targets[t];
    if (y == options.loss.ignoreIndex) continue;
    const T* ht = h.row(t);
    const T* wy = wv.row(y);
    T dot = 0;  // indexed dot h_t . Wv[y_t]
    for (int64_t j = 0; j < d; ++j) dot += ht[j] * wy[j];
    const T targetLogit = detail::softCapLogit(dot, cap);
    tokenCe[size_t(t)] = double(lse[t]) - double(targetLogit);
    tokenZ[size_t(t)] = options.loss.zLossCoef * double(lse[t]) * double(lse[t]);
  }
}

// Turns the raw logit tile g[rows, cols] (tokens t0.., vocab v0..) into dz in place and returns
// max |dz / g_t| over it (0 for ignored rows, which become zero).
template <typename T>
T logitTileToGrad(T* tile, int64_t rows, int64_t cols, int64_t t0, int64_t v0,
                  const Tensor<int32_t>& targets, const Tensor<T>& lse, T g,
                  const LinearLossOptions& options) {
  const T cap = T(options.softCap);
  T maxAbs = 0;
  for (int64_t r = 0; r < rows; ++r) {
    T* z = tile + r * cols;
    const int32_t y = targets[t0 + r];
    if (y == options.ignoreIndex) {
      std::fill(z, z + cols, T(0));
      continue;
    }
    const detail::LogitGradCoefs<T> coefs = detail::logitGradCoefs(lse[t0 + r], options);
    for (int64_t c = 0; c < cols; ++c) {
      const T grad = detail::unscaledLogitGrad(detail::softCapLogit(z[c], cap), v0 + c == y, coefs);
      maxAbs = std::max(maxAbs, std::abs(grad));
      z[c] = grad * g;
    }
  }
  return maxAbs;
}

// Everything one backward shares across its (token group, vocab block) steps.
template <typename T>
struct BackwardPass {
  const Tensor<T>& h;              // [N, D]
  const Tensor<T>& wv;             // [V, D]
  const Tensor<int32_t>& targets;  // [N]
  const LinearLossOptions& loss;
  const Tensor<T>& lse;  // [N]
  Tensor<T>& dh;         // [N, D]
  Tensor<T>& dWv;        // [V, D]
  bool filter = false;
  bool filterWeights = false;
  double eps = 0;
  T g = 0;  // dLoss / N_valid
  int64_t tokenBlock = 1;
  T* strip = nullptr;            // [group, Vb] scratch
  std::vector<uint8_t> skipped;  // per token block of the group
};

// Tokens [g0, g0 + rows) x vocabulary [v0, v0 + cols): (1) per token block, in parallel: G into
// the strip, dh += G Wv_block unless filtered; (2) per 16 vocabulary rows, in parallel:
// dWv_rows += G^T h_group (one GEMM, or the unfiltered token blocks in order).
template <typename T>
void backwardTile(ThreadPool& pool, BackwardPass<T>& p, int64_t g0, int64_t rows, int64_t v0,
                  int64_t cols, CceStats* stats) {
  const int64_t d = p.h.dim(1), tb = p.tokenBlock;
  const int64_t blocks = (rows + tb - 1) / tb;
  const T* wTile = p.wv.row(v0);  // [cols, D]
  pool.parallelFor(blocks, [&](int64_t block) {
    const int64_t t0 = g0 + block * tb, blockRows = std::min(tb, g0 + rows - t0);
    T* tile = p.strip + (t0 - g0) * cols;  // [blockRows, cols], leading dimension cols
    gemm<T>(false, true, blockRows, cols, d, T(1), p.h.row(t0), d, wTile, d, T(0), tile, cols);
    const T maxAbs = logitTileToGrad(tile, blockRows, cols, t0, v0, p.targets, p.lse, p.g, p.loss);
    const bool skip = p.filter && double(maxAbs) < p.eps;
    p.skipped[size_t(block)] = skip ? 1 : 0;
    if (!skip) {
      gemm<T>(false, false, blockRows, d, cols, T(1), tile, cols, wTile, d, T(1), p.dh.row(t0), d);
    }
  });
  if (stats != nullptr) {
    stats->tiles += blocks;
    for (int64_t block = 0; block < blocks; ++block)
      stats->skippedTiles += p.skipped[size_t(block)];
  }
  pool.parallelForRange(cols, kWeightRowTile, [&](int64_t r0, int64_t r1) {
    T* dwRows = p.dWv.row(v0 + r0);
    if (!p.filterWeights) {
      gemm<T>(true, false, r1 - r0, d, rows, T(1), p.strip + r0, cols, p.h.row(g0), d, T(1), dwRows,
              d);
      return;
    }
    for (int64_t block = 0; block < blocks; ++block) {
      if (p.skipped[size_t(block)]) continue;
      const int64_t t0 = g0 + block * tb, blockRows = std::min(tb, g0 + rows - t0);
      gemm<T>(true, false, r1 - r0, d, blockRows, T(1), p.strip + (t0 - g0) * cols + r0, cols,
              p.h.row(t0), d, T(1), dwRows, d);
    }
  });
}

}  // namespace

template <typename T>
double cceFilterThreshold(const CceOptions& options) {
  if (options.filterEps < 0) return double(std::numeric_limits<T>::epsilon()) / 32;
  return options.filterEps;
}

template <typename T>
LinearLossResult cceForward(ThreadPool& pool, const Tensor<T>& h, const Tensor<T>& wv,
                            const Tensor<int32_t>& targets, const CceOptions& options,
                            CceSaved<T>& saved) {
  const int64_t n = h.dim(0), d = h.dim(1), vocab = wv.dim(0);
  checkShapes(n, d, targets, options, wv.dim(1));
  LinearLossResult result;
  result.validTokens = detail::countValidTargets(targets, vocab, options.loss.ignoreIndex);
  saved.lse = Tensor<T>({n});  // [N]
  saved.validTokens = result.validTokens;
  if (result.validTokens == 0) return result;

  std::vector<double> tokenCe(size_t(n), 0.0);  // [N]
  std::vector<double> tokenZ(size_t(n), 0.0);   // [N]
  pool.parallelForRange(n, options.tokenBlock, [&](int64_t t0, int64_t t1) {
    forwardTokenBlock(h, wv, targets, options, t0, t1, saved.lse, tokenCe, tokenZ);
  });
  double ceSum = 0, zSum = 0;
  for (int64_t t = 0; t < n; ++t) {
    ceSum += tokenCe[size_t(t)];
    zSum += tokenZ[size_t(t)];
  }
  result.loss = ceSum / double(result.validTokens);
  result.zLoss = zSum / double(result.validTokens);
  return result;
}

template <typename T>
Tensor<T> cceBackward(ThreadPool& pool, const Tensor<T>& h, const Tensor<T>& wv,
                      const Tensor<int32_t>& targets, const CceOptions& options,
                      const CceSaved<T>& saved, double dLoss, Tensor<T>& dWv, CceStats* stats) {
  const int64_t n = h.dim(0), d = h.dim(1), vocab = wv.dim(0);
  checkShapes(n, d, targets, options, wv.dim(1));
  MOEWB_CHECK(options.groupTokens > 0);
  MOEWB_CHECK(dWv.sameShape(wv));
  MOEWB_CHECK_EQ(saved.lse.numel(), n);
  Tensor<T> dh({n, d});  // [N, D]
  if (stats != nullptr) *stats = CceStats();
  if (saved.validTokens == 0) return dh;

  BackwardPass<T> pass{h, wv, targets, options.loss, saved.lse, dh, dWv};
  const double eps = cceFilterThreshold<T>(options);
  pass.filter = eps > 0;
  pass.filterWeights = pass.filter && options.filterWeightGrad;
  pass.eps = eps;
  pass.g = T(dLoss / double(saved.validTokens));
  pass.tokenBlock = std::min(options.tokenBlock, n);
  const int64_t vb = std::min(options.vocabBlock, vocab);
  // Groups are whole token blocks, so the tiles and dh do not depend on groupTokens; only the
  // order in which dWv accumulates over groups does.
  const int64_t group =
      std::min(n, std::max<int64_t>(1, options.groupTokens / pass.tokenBlock) * pass.tokenBlock);
  Tensor<T> strip({group, vb});  // [group, Vb] G of one (token group, vocab block)
  pass.strip = strip.data();
  pass.skipped.assign(size_t((group + pass.tokenBlock - 1) / pass.tokenBlock), 0);
  for (int64_t g0 = 0; g0 < n; g0 += group) {
    for (int64_t v0 = 0; v0 < vocab; v0 += vb) {
      backwardTile(pool, pass, g0, std::min(group, n - g0), v0, std::min(vb, vocab - v0), stats);
    }
  }
  return dh;
}

#define MOEWB_INSTANTIATE_CCE(T)                                                                   \
  template double cceFilterThreshold<T>(const CceOptions&);                                        \
  template LinearLossResult cceForward<T>(ThreadPool&, const Tensor<T>&, const Tensor<T>&,         \
                                          const Tensor<int32_t>&, const CceOptions&,               \
                                          CceSaved<T>&);                                           \
  template Tensor<T> cceBackward<T>(ThreadPool&, const Tensor<T>&, const Tensor<T>&,               \
                                    const Tensor<int32_t>&, const CceOptions&, const CceSaved<T>&, \
                                    double, Tensor<T>&, CceStats*);
MOEWB_INSTANTIATE_CCE(float)
MOEWB_INSTANTIATE_CCE(double)

}  // namespace moewb::engine
