// Reference grouped GLU experts: per-tile GEMMs over each expert's contiguous row block, with the
// optional input gather and output weighting of ExpertsIo (see experts.h).
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

// Permuted input rows [begin, end): a pointer into x, or (fused permute) gathered into `buffer`.
template <typename T>
const T* inputRows(const Tensor<T>& x, const Tensor<int32_t>* gatherIndex, int64_t begin,
                   int64_t end, std::vector<T>& buffer) {
  if (gatherIndex == nullptr) return x.row(begin);
  const int64_t d = x.dim(1);
  buffer.resize(size_t((end - begin) * d));
  for (int64_t r = begin; r < end; ++r) {
    std::copy_n(x.row((*gatherIndex)[r]), d, buffer.data() + (r - begin) * d);
  }
  return buffer.data();
}

template <typename T>
void checkIo(const Tensor<T>& x, int64_t rows, const ExpertsIo<T>& io) {
  if (io.gatherIndex == nullptr) {
    MOEWB_CHECK(x.dim(0) == rows);
  } else {
    MOEWB_CHECK(io.gatherIndex->numel() == rows);
  }
  if (io.rowWeight != nullptr) {
    MOEWB_CHECK(io.rowWeight->numel() == rows);
    MOEWB_CHECK(io.outputIndex != nullptr && io.outputIndex->numel() == rows);
  }
}

}  // namespace

template <typename T>
Tensor<T> expertsForward(ThreadPool& pool, const Tensor<T>& x, const Tensor<int32_t>& offsets,
                         const ExpertWeights<T>& weights, ExpertsSaved<T>& saved,
                         const GluParams& activation, const ExpertsIo<T>& io) {
  const int64_t rows = offsets[offsets.numel() - 1], d = x.dim(1), f = weights.gate.dim(1);
  checkIo(x, rows, io);
  saved.gatePre = Tensor<T>({rows, f});
  saved.upPre = Tensor<T>({rows, f});
  saved.hidden = Tensor<T>({rows, f});
  Tensor<T> yPerm({rows, d});  // [R, D]
  const std::vector<RowTile> tiles = rowTiles(offsets);
  pool.parallelFor(int64_t(tiles.size()), [&](int64_t task) {
    const RowTile& tile = tiles[size_t(task)];
    const int64_t n = tile.end - tile.begin;
    std::vector<T> gathered;
    const T* xs = inputRows(x, io.gatherIndex, tile.begin, tile.end, gathered);
    T* g = saved.gatePre.row(tile.begin);
    T* u = saved.upPre.row(tile.begin);
    T* h = saved.hidden.row(tile.begin);
    linearForwardSerial(xs, weights.gate.row(tile.expert), g, n, d, f, false);
    linearForwardSerial(xs, weights.up.row(tile.expert), u, n, d, f, false);
    gluForward(activation, g, u, h, n * f);
    T* y = yPerm.row(tile.begin);
    linearForwardSerial(h, weights.down.row(tile.expert), y, n, f, d, false);
    if (io.rowWeight == nullptr) return;
    for (int64_t i = 0; i < n; ++i) {
      const T w = (*io.rowWeight)[tile.begin + i];
      for (int64_t c = 0; c < d; ++c) y[i * d + c] = w * y[i * d + c];
    }
  });
  return yPerm;
}

namespace {

// Weight gradients: per expert, tiles of the output rows of Wd (D rows) and Wg / Wu (F rows).
// dYDown[R, D] is the gradient of the unweighted expert output rows.
template <typename T>
void expertsWeightGrads(ThreadPool& pool, const Tensor<T>& dYDown, const Tensor<T>& x,
                        const Tensor<int32_t>& offsets, const ExpertsSaved<T>& saved,
                        const Tensor<T>& dGate, const Tensor<T>& dUp, const ExpertGrads<T>& grads,
                        const Tensor<int32_t>* gatherIndex) {
  const int64_t d = x.dim(1), f = grads.gate.dim(1), experts = offsets.numel() - 1;
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
      linearBackwardWeightSerial(dYDown.row(begin), saved.hidden.row(begin), grads.down.row(e), n,
                                 f, d, o0, o1);
      return;
    }
    tile -= downTiles;
    const bool isGate = tile < ffTiles;
    if (!isGate) tile -= ffTiles;
    const int64_t o0 = tile * kLinearWeightTile, o1 = std::min(f, o0 + kLinearWeightTile);
    const T* dz = isGate ? dGate.row(begin) : dUp.row(begin);
    T* dw = isGate ? grads.gate.row(e) : grads.up.row(e);
    std::vector<T> gathered;
    const T* xs = inputRows(x, gatherIndex, begin, begin + n, gathered);
    linearBackwardWeightSerial(dz, xs, dw, n, d, f, o0, o1);
  });
}

// [R, D] rows w_r dy[token(r)] (the unfused combine's dYPerm) from the token gradient dy[N, D].
template <typename T>
Tensor<T> weightedRows(ThreadPool& pool, const Tensor<T>& dy, const Tensor<T>& rowWeight,
                       const Tensor<int32_t>& token) {
  const int64_t rows = rowWeight.numel(), d = dy.dim(1);
  Tensor<T> out({rows, d});
  pool.parallelForRange(rows, kLinearRowTile, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const T w = rowWeight[r];
      const T* g = dy.row(token[r]);
      for (int64_t c = 0; c < d; ++c) out.at(r, c) = w * g[c];
    }
  });
  return out;
}

// dRowWeight[r] = <dy_r, yPerm_r> for rows [begin, end) of one expert, with the unweighted
// output rows recomputed as h Wd^T by the same GEMM as the forward (so the values and the dot's
// order equal the unfused combine's backward).
template <typename T>
void rowWeightGradients(const Tensor<T>& dy, const Tensor<int32_t>& token, const T* down,
                        const ExpertsSaved<T>& saved, int64_t begin, int64_t end, int64_t f,
                        Tensor<T>& dRowWeight) {
  const int64_t n = end - begin, d = dy.dim(1);
  std::vector<T> y(static_cast<size_t>(n * d));  // [n, D] unweighted expert outputs
  linearForwardSerial(saved.hidden.row(begin), down, y.data(), n, f, d, false);
  for (int64_t i = 0; i < n; ++i) {
    const T* g = dy.row(token[begin + i]);
    T dot = 0;
    for (int64_t c = 0; c < d; ++c) dot += g[c] * y[size_t(i * d + c)];
    dRowWeight[begin + i] = dot;
  }
}

}  // namespace

template <typename T>
Tensor<T> expertsBackward(ThreadPool& pool, const Tensor<T>& dY, const Tensor<T>& x,
                          const Tensor<int32_t>& offsets, const ExpertWeights<T>& weights,
                          const ExpertsSaved<T>& saved, const ExpertGrads<T>& grads,
                          const GluParams& activation, const ExpertsIo<T>& io,
                          Tensor<T>* dRowWeight) {
  const int64_t rows = offsets[offsets.numel() - 1], d = x.dim(1), f = weights.gate.dim(1);
  checkIo(x, rows, io);
  const bool weighted = io.rowWeight != nullptr;
  // Gradient of the unweighted output rows: dY itself, or w_r dy[token(r)] when folded.
  Tensor<T> dYWeighted;
  if (weighted) {
    MOEWB_CHECK(dRowWeight != nullptr);
    *dRowWeight = Tensor<T>({rows});
    dYWeighted = weightedRows(pool, dY, *io.rowWeight, *io.outputIndex);  // [R, D]
  } else {
    MOEWB_CHECK(dY.dim(0) == rows);
  }
  const Tensor<T>& dYOut = weighted ? dYWeighted : dY;
  Tensor<T> dGate({rows, f});
  Tensor<T> dUp({rows, f});
  Tensor<T> dXPerm({rows, d});
  const std::vector<RowTile> tiles = rowTiles(offsets);
  pool.parallelFor(int64_t(tiles.size()), [&](int64_t task) {
    const RowTile& tile = tiles[size_t(task)];
    const int64_t n = tile.end - tile.begin;
    if (weighted) {
      rowWeightGradients(dY, *io.outputIndex, weights.down.row(tile.expert), saved, tile.begin,
                         tile.end, f, *dRowWeight);
    }
    T* dg = dGate.row(tile.begin);
    T* du = dUp.row(tile.begin);
    // dh into dg, then split into dg and du elementwise.
    linearBackwardDataSerial(dYOut.row(tile.begin), weights.down.row(tile.expert), dg, n, f, d,
                             false);
    gluBackward(activation, saved.gatePre.row(tile.begin), saved.upPre.row(tile.begin), dg, du,
                n * f);
    T* dx = dXPerm.row(tile.begin);
    linearBackwardDataSerial(dg, weights.gate.row(tile.expert), dx, n, d, f, false);
    linearBackwardDataSerial(du, weights.up.row(tile.expert), dx, n, d, f, true);
  });
  expertsWeightGrads(pool, dYOut, x, offsets, saved, dGate, dUp, grads, io.gatherIndex);
  return dXPerm;
}

#define MOEWB_INSTANTIATE_EXPERTS(T)                                                          \
  template Tensor<T> expertsForward<T>(ThreadPool&, const Tensor<T>&, const Tensor<int32_t>&, \
                                       const ExpertWeights<T>&, ExpertsSaved<T>&,             \
                                       const GluParams&, const ExpertsIo<T>&);                \
  template Tensor<T> expertsBackward<T>(ThreadPool&, const Tensor<T>&, const Tensor<T>&,      \
                                        const Tensor<int32_t>&, const ExpertWeights<T>&,      \
                                        const ExpertsSaved<T>&, const ExpertGrads<T>&,        \
                                        const GluParams&, const ExpertsIo<T>&, Tensor<T>*);
MOEWB_INSTANTIATE_EXPERTS(float)
MOEWB_INSTANTIATE_EXPERTS(double)

}  // namespace moewb::engine
