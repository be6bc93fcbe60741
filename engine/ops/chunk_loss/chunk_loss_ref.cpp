// Reference Chunk Loss over OpenBLAS GEMM tiles (see chunk_loss.h).
#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/chunk_loss/chunk_loss.h"
#include "runtime/tensor/gemm.h"

namespace moewb::engine {
namespace {

constexpr int64_t kMinAutoChunkTokens = 64;
constexpr int64_t kLogitRowTile = 64;     // rows of z_c per GEMM task
constexpr int64_t kLogitVocabTile = 512;  // columns of z_c per GEMM task
constexpr int64_t kHiddenColTile = 32;    // columns of dh_c per GEMM task
constexpr int64_t kWeightRowTile = 64;    // rows of dWv per GEMM task
constexpr int64_t kRowGrain = 4;          // logit rows per softmax task

// C[m, n] = op(A) op(B) + beta C, split into fixed (rowTile x colTile) tiles of C, each one GEMM
// with the whole k reduction: the result does not depend on the thread count.
template <typename T>
void tiledGemm(ThreadPool& pool, bool transA, bool transB, int64_t m, int64_t n, int64_t k,
               const T* a, int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc,
               int64_t rowTile, int64_t colTile) {
  if (m == 0 || n == 0) return;
  const int64_t rowTiles = (m + rowTile - 1) / rowTile;
  const int64_t colTiles = (n + colTile - 1) / colTile;
  pool.parallelFor(rowTiles * colTiles, [&](int64_t task) {
    const int64_t r0 = (task / colTiles) * rowTile, c0 = (task % colTiles) * colTile;
    const int64_t rows = std::min(rowTile, m - r0), cols = std::min(colTile, n - c0);
    const T* aTile = transA ? a + r0 : a + r0 * lda;
    const T* bTile = transB ? b + c0 * ldb : b + c0;
    gemm<T>(transA, transB, rows, cols, k, T(1), aTile, lda, bTile, ldb, beta, c + r0 * ldc + c0,
            ldc);
  });
}

// Turns one row of raw logits z[V] into dz[V] in place (capped, softmax, gradient times g) and
// returns lse (of the capped logits). Ignored rows (y == ignoreIndex) become zero.
template <typename T>
T logitRowToGrad(T* z, int64_t vocab, int32_t y, T g, const LinearLossOptions& options,
                 T& targetLogit) {
  const T cap = T(options.softCap);
  if (options.softCap > 0) {
    for (int64_t v = 0; v < vocab; ++v) z[v] = detail::softCapLogit(z[v], cap);
  }
  T maxLogit = z[0];
  for (int64_t v = 1; v < vocab; ++v) maxLogit = std::max(maxLogit, z[v]);
  T sum = 0;
  for (int64_t v = 0; v < vocab; ++v) sum += std::exp(z[v] - maxLogit);
  const T lse = maxLogit + std::log(sum);
  if (y == options.ignoreIndex) {
    std::fill(z, z + vocab, T(0));
    targetLogit = 0;
    return lse;
  }
  targetLogit = z[y];
  const detail::LogitGradCoefs<T> coefs = detail::logitGradCoefs(lse, options);
  for (int64_t v = 0; v < vocab; ++v) z[v] = detail::unscaledLogitGrad(z[v], v == y, coefs) * g;
  return lse;
}

int64_t nextPowerOfTwo(int64_t x) {
  int64_t p = 1;
  while (p < x) p *= 2;
  return p;
}

}  // namespace

int64_t chunkLossAutoTokens(int64_t tokens, int64_t vocab, int64_t dModel) {
  if (tokens <= 0) return 1;
  const int64_t growth = std::max<int64_t>(1, (vocab + dModel - 1) / std::max<int64_t>(1, dModel));
  const int64_t liger = nextPowerOfTwo((tokens + growth - 1) / growth);
  return std::clamp(liger, std::min(kMinAutoChunkTokens, tokens), tokens);
}

template <typename T>
LinearLossResult chunkLossForward(ThreadPool& pool, const Tensor<T>& h, const Tensor<T>& wv,
                                  const Tensor<int32_t>& targets, const ChunkLossOptions& options,
                                  ChunkLossSaved<T>& saved) {
  const int64_t n = h.dim(0), d = h.dim(1), vocab = wv.dim(0);
  MOEWB_CHECK_EQ(wv.dim(1), d);
  MOEWB_CHECK_EQ(targets.numel(), n);
  MOEWB_CHECK(options.chunkTokens >= 0);
  LinearLossResult result;
  result.validTokens = detail::countValidTargets(targets, vocab, options.loss.ignoreIndex);
  saved.dh = Tensor<T>({n, d});       // [N, D]
  saved.dWv = Tensor<T>({vocab, d});  // [V, D]
  if (result.validTokens == 0) return result;

  const int64_t chunk =
      options.chunkTokens > 0 ? std::min(options.chunkTokens, n) : chunkLossAutoTokens(n, vocab, d);
  const T g = T(1.0 / double(result.validTokens));
  const double zCoef = options.loss.zLossCoef;
  Tensor<T> logits({chunk, vocab});             // [Nc, V] z_c, then dz_c in place
  std::vector<double> tokenCe(size_t(n), 0.0);  // [N]
  std::vector<double> tokenZ(size_t(n), 0.0);   // [N]
  for (int64_t c0 = 0; c0 < n; c0 += chunk) {
    const int64_t rows = std::min(chunk, n - c0);
    const T* hc = h.row(c0);
    tiledGemm<T>(pool, false, true, rows, vocab, d, hc, d, wv.data(), d, T(0), logits.data(), vocab,
                 kLogitRowTile, kLogitVocabTile);
    pool.parallelForRange(rows, kRowGrain, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const int64_t t = c0 + r;
        const int32_t y = targets[t];
        T targetLogit = 0;
        const T lse = logitRowToGrad(logits.row(r), vocab, y, g, options.loss, targetLogit);
        if (y == options.loss.ignoreIndex) continue;
        tokenCe[size_t(t)] = double(lse) - double(targetLogit);
        tokenZ[size_t(t)] = zCoef * double(lse) * double(lse);
      }
    });
    // dh_c[rows, D] = dz_c[rows, V] Wv[V, D]
    tiledGemm<T>(pool, false, false, rows, d, vocab, logits.data(), vocab, wv.data(), d, T(0),
                 saved.dh.row(c0), d, kLogitRowTile, kHiddenColTile);
    // dWv[V, D] += dz_c[rows, V]^T h_c[rows, D]
    tiledGemm<T>(pool, true, false, vocab, d, rows, logits.data(), vocab, hc, d, T(1),
                 saved.dWv.data(), d, kWeightRowTile, d);
  }
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
Tensor<T> chunkLossBackward(ThreadPool& pool, ChunkLossSaved<T>& saved, double dLoss,
                            Tensor<T>& dWv) {
  MOEWB_CHECK(dWv.sameShape(saved.dWv));
  Tensor<T> dh = std::move(saved.dh);  // [N, D]
  const T scale = T(dLoss);
  pool.parallelForRange(dh.numel(), 4096, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) dh[i] *= scale;
  });
  pool.parallelForRange(dWv.numel(), 4096, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) dWv[i] += scale * saved.dWv[i];
  });
  saved.dWv = Tensor<T>();
  return dh;
}

#define MOEWB_INSTANTIATE_CHUNK_LOSS(T)                                                          \
  template LinearLossResult chunkLossForward<T>(ThreadPool&, const Tensor<T>&, const Tensor<T>&, \
                                                const Tensor<int32_t>&, const ChunkLossOptions&, \
                                                ChunkLossSaved<T>&);                             \
  template Tensor<T> chunkLossBackward<T>(ThreadPool&, ChunkLossSaved<T>&, double, Tensor<T>&);
MOEWB_INSTANTIATE_CHUNK_LOSS(float)
MOEWB_INSTANTIATE_CHUNK_LOSS(double)

}  // namespace moewb::engine
