// Reference grouped SwiGLU experts: per-tile GEMMs over each expert's contiguous row block
// (see experts.h).
#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/experts/experts.h"
#include "ops/linear/linear.h"

namespace moewb::engine {
namespace {

struct RowTile {
  int64_t expert;
  int64_t begin;  // first row (absolute, in the permuted matrix)
  int64_t end;
};

std::vector<RowTile> rowTiles(const Tensor<int32_t>& offsets) {
  std::vector<RowTile> tiles;
  const int64_t experts = offsets.numel() - 1;
  for (int64_t e = 0; e < experts; ++e) {
    for (int64_t r = offsets[e]; r < offsets[e + 1]; r += kLinearRowTile) {
      tiles.push_back({e, r, std::min<int64_t>(offsets[e + 1], r + kLinearRowTile)});
    }
  }
  return tiles;
}

template <typename T>
T sigmoid(T x) {
  return T(1) / (T(1) + std::exp(-x));
}

}  // namespace

template <typename T>
Tensor<T> expertsForward(ThreadPool& pool, const Tensor<T>& xPerm, const Tensor<int32_t>& offsets,
                         const ExpertWeights<T>& weights, ExpertsSaved<T>& saved) {
  const int64_t rows = xPerm.dim(0), d = xPerm.dim(1), f = weights.gate.dim(1);
  MOEWB_CHECK(offsets[offsets.numel() - 1] == rows);
  saved.gatePre = Tensor<T>({rows, f});
  saved.upPre = Tensor<T>({rows, f});
  saved.hidden = Tensor<T>({rows, f});
  Tensor<T> yPerm({rows, d});  // [R, D]
  const std::vector<RowTile> tiles = rowTiles(offsets);
  pool.parallelFor(int64_t(tiles.size()), [&](int64_t task) {
    const RowTile& tile = tiles[size_t(task)];
    const int64_t n = tile.end - tile.begin;
    const T* x = xPerm.row(tile.begin);
    T* g = saved.gatePre.row(tile.begin);
    T* u = saved.upPre.row(tile.begin);
    T* h = saved.hidden.row(tile.begin);
    linearForwardSerial(x, weights.gate.row(tile.expert), g, n, d, f, false);
    linearForwardSerial(x, weights.up.row(tile.expert), u, n, d, f, false);
    for (int64_t i = 0; i < n * f; ++i) h[i] = g[i] * sigmoid(g[i]) * u[i];
    linearForwardSerial(h, weights.down.row(tile.expert), yPerm.row(tile.begin), n, f, d, false);
  });
  return yPerm;
}

template <typename T>
Tensor<T> expertsBackward(ThreadPool& pool, const Tensor<T>& dYPerm, const Tensor<T>& xPerm,
                          const Tensor<int32_t>& offsets, const ExpertWeights<T>& weights,
                          const ExpertsSaved<T>& saved, const ExpertGrads<T>& grads) {
  const int64_t rows = xPerm.dim(0), d = xPerm.dim(1), f = weights.gate.dim(1);
  const int64_t experts = offsets.numel() - 1;
  Tensor<T> dGate({rows, f});   // [R, F]
  Tensor<T> dUp({rows, f});     // [R, F]
  Tensor<T> dXPerm({rows, d});  // [R, D]
  const std::vector<RowTile> tiles = rowTiles(offsets);
  pool.parallelFor(int64_t(tiles.size()), [&](int64_t task) {
    const RowTile& tile = tiles[size_t(task)];
    const int64_t n = tile.end - tile.begin;
    T* dg = dGate.row(tile.begin);
    T* du = dUp.row(tile.begin);
    // dh into dg, then split into dg and du elementwise.
    linearBackwardDataSerial(dYPerm.row(tile.begin), weights.down.row(tile.expert), dg, n, f, d,
                             false);
    const T* g = saved.gatePre.row(tile.begin);
    const T* u = saved.upPre.row(tile.begin);
    for (int64_t i = 0; i < n * f; ++i) {
      const T s = sigmoid(g[i]);
      const T dh = dg[i];
      du[i] = dh * g[i] * s;
      dg[i] = dh * u[i] * (s + g[i] * s * (T(1) - s));
    }
    T* dx = dXPerm.row(tile.begin);
    linearBackwardDataSerial(dg, weights.gate.row(tile.expert), dx, n, d, f, false);
    linearBackwardDataSerial(du, weights.up.row(tile.expert), dx, n, d, f, true);
  });
  // Weight gradients: per expert, tiles of the output rows of Wd (D rows) and Wg / Wu (F rows).
  const int64_t downTiles = (d + kLinearWeightTile - 1) / kLinearWeightTile;
  const int64_t ffTiles = (f + kLinearWeightTile - 1) / kLinearWeightTile;
  const int64_t tilesPerExpert = downTiles + 2 * ffTiles;
  pool.parallelFor(experts * tilesPerExpert, [&](int64_t task) {
    const int64_t e = task / tilesPerExpert;
    int64_t tile = task % tilesPerExpert;
    const int64_t begin = offsets[e], n = offsets[e + 1] - offsets[e];
    if (n == 0) return;
    if (tile < downTiles) {
      const int64_t o0 = tile * kLinearWeightTile, o1 = std::min(d, o0 + kLinearWeightTile);
      linearBackwardWeightSerial(dYPerm.row(begin), saved.hidden.row(begin), grads.down.row(e), n,
                                 f, d, o0, o1);
      return;
    }
    tile -= downTiles;
    const bool isGate = tile < ffTiles;
    if (!isGate) tile -= ffTiles;
    const int64_t o0 = tile * kLinearWeightTile, o1 = std::min(f, o0 + kLinearWeightTile);
    const T* dz = isGate ? dGate.row(begin) : dUp.row(begin);
    T* dw = isGate ? grads.gate.row(e) : grads.up.row(e);
    linearBackwardWeightSerial(dz, xPerm.row(begin), dw, n, d, f, o0, o1);
  });
  return dXPerm;
}

#define MOEWB_INSTANTIATE_EXPERTS(T)                                                          \
  template Tensor<T> expertsForward<T>(ThreadPool&, const Tensor<T>&, const Tensor<int32_t>&, \
                                       const ExpertWeights<T>&, ExpertsSaved<T>&);            \
  template Tensor<T> expertsBackward<T>(ThreadPool&, const Tensor<T>&, const Tensor<T>&,      \
                                        const Tensor<int32_t>&, const ExpertWeights<T>&,      \
                                        const ExpertsSaved<T>&, const ExpertGrads<T>&);
MOEWB_INSTANTIATE_EXPERTS(float)
MOEWB_INSTANTIATE_EXPERTS(double)

}  // namespace moewb::engine
