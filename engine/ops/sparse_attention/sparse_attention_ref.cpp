// Reference gated sparse attention layer: projections, gate, indexer selection, core, output
// projection and the indexer objective, forward and backward (see sparse_attention.h).
#include <algorithm>
#include <cmath>

#include "ops/linear/linear.h"
#include "ops/sparse_attention/selection.h"
#include "ops/sparse_attention/sparse_attention.h"

namespace moewb::engine {
namespace {

constexpr int64_t kRowGrain = 64;  // tokens per task of the elementwise gate loops

template <typename T>
T sigmoid(T a) {
  if (a >= T(0)) return T(1) / (T(1) + std::exp(-a));
  const T e = std::exp(a);
  return e / (T(1) + e);
}

template <typename T>
void checkShapes(const SparseAttentionDims& dims, const Tensor<T>& x,
                 const SparseAttentionWeights<T>& w) {
  const int64_t d = dims.dModel, qw = dims.qWidth(), kvw = dims.kvWidth();
  MOEWB_CHECK(dims.numHeads > 0 && dims.kvHeads > 0 && dims.numHeads % dims.kvHeads == 0);
  MOEWB_CHECK(dims.stage == SparseStage::kDenseWarmup || dims.topK >= 1);
  MOEWB_CHECK(x.dim(0) == dims.tokens() && x.dim(1) == d);
  MOEWB_CHECK(w.wq.numel() == qw * d && w.wk.numel() == kvw * d && w.wv.numel() == kvw * d);
  MOEWB_CHECK(w.wo.numel() == d * qw && w.wgate.numel() == qw * d);
  MOEWB_CHECK(w.sink.numel() == dims.numHeads);
}

// p*, the indexer's softmax over the selection, and the KL into saved.indexer* (forward side of
// the indexer objective).
template <typename T>
void indexerObjectiveForward(ThreadPool& pool, const SparseAttentionDims& dims,
                             SparseAttentionSaved<T>& saved) {
  const Tensor<T> logits = indexerLogits(pool, dims.indexerDims(), saved.indexer, saved.selected);
  saved.indexerTarget = indexerTargetFromProbs(pool, saved.probs, saved.selected);
  const double klSum =
      indexerKlForward(pool, logits, saved.indexerTarget, saved.selected, saved.indexerProbs);
  saved.indexerKl = dims.tokens() > 0 ? klSum / double(dims.tokens()) : 0.0;
  saved.indexerLoss = dims.indexerLossCoef * saved.indexerKl;
}

}  // namespace

int64_t SparseAttentionDims::selectionWidth() const {
  return stage == SparseStage::kDenseWarmup ? seqLen : std::min(topK, seqLen);
}

IndexerDims SparseAttentionDims::indexerDims() const {
  return IndexerDims{batch, seqLen, dModel, indexerHeads, indexerDim, indexerNormEps};
}

template <typename T>
Tensor<T> sparseAttentionForward(ThreadPool& pool, const SparseAttentionDims& dims,
                                 const Tensor<T>& x, const SparseAttentionWeights<T>& weights,
                                 SparseAttentionSaved<T>& saved) {
  checkShapes(dims, x, weights);
  const int64_t n = dims.tokens(), d = dims.dModel, qw = dims.qWidth(), kvw = dims.kvWidth();
  saved.q = Tensor<T>({n, qw});
  saved.k = Tensor<T>({n, kvw});
  saved.v = Tensor<T>({n, kvw});
  saved.gate = Tensor<T>({n, qw});
  linearForward(pool, x.data(), weights.wq.data(), saved.q.data(), n, d, qw);
  linearForward(pool, x.data(), weights.wk.data(), saved.k.data(), n, d, kvw);
  linearForward(pool, x.data(), weights.wv.data(), saved.v.data(), n, d, kvw);
  linearForward(pool, x.data(), weights.wgate.data(), saved.gate.data(), n, d, qw);
  const IndexerDims indexerDims = dims.indexerDims();
  indexerForward(pool, indexerDims, x, weights.indexer(), saved.indexer);
  saved.selected = dims.stage == SparseStage::kDenseWarmup
                       ? causalSelection(dims.batch, dims.seqLen)
                       : indexerTopK(pool, indexerDims, saved.indexer, dims.topK);
  sparseAttentionCoreForward(pool, dims, saved.q, saved.k, saved.v, weights.sink, saved.selected,
                             saved.probs, saved.sinkProbs, saved.context);
  saved.gated = Tensor<T>({n, qw});
  pool.parallelForRange(n, kRowGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin * qw; i < end * qw; ++i) {
      saved.gate[i] = sigmoid(saved.gate[i]);
      saved.gated[i] = saved.context[i] * saved.gate[i];
    }
  });
  Tensor<T> y({n, d});  // [N, D]
  linearForward(pool, saved.gated.data(), weights.wo.data(), y.data(), n, qw, d);
  indexerObjectiveForward(pool, dims, saved);
  return y;
}

template <typename T>
Tensor<T> sparseAttentionBackward(ThreadPool& pool, const SparseAttentionDims& dims,
                                  const Tensor<T>& dy, const Tensor<T>& x,
                                  const SparseAttentionWeights<T>& weights,
                                  const SparseAttentionSaved<T>& saved,
                                  const SparseAttentionGrads<T>& grads) {
  const int64_t n = dims.tokens(), d = dims.dModel, qw = dims.qWidth(), kvw = dims.kvWidth();
  MOEWB_CHECK(dy.dim(0) == n && dy.dim(1) == d);
  Tensor<T> dGated({n, qw});  // [N, H*dh] gradient of o ⊙ gate
  linearBackwardData(pool, dy.data(), weights.wo.data(), dGated.data(), n, qw, d);
  linearBackwardWeight(pool, dy.data(), saved.gated.data(), grads.wo.data(), n, qw, d);
  Tensor<T> dGatePre({n, qw});  // [N, H*dh] gradient of x Wgate^T
  Tensor<T> dContext({n, qw});  // [N, H*dh] gradient of o
  pool.parallelForRange(n, kRowGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin * qw; i < end * qw; ++i) {
      const T g = saved.gate[i];
      dGatePre[i] = dGated[i] * saved.context[i] * g * (T(1) - g);
      dContext[i] = dGated[i] * g;
    }
  });
  Tensor<T> dq, dk, dv;  // [N, H*dh], [N, Hkv*dh], [N, Hkv*dh]
  sparseAttentionCoreBackward(pool, dims, dContext, saved, dq, dk, dv, grads.sink);
  Tensor<T> dx({n, d});  // [N, D]
  linearBackwardData(pool, dq.data(), weights.wq.data(), dx.data(), n, d, qw, false);
  linearBackwardData(pool, dk.data(), weights.wk.data(), dx.data(), n, d, kvw, true);
  linearBackwardData(pool, dv.data(), weights.wv.data(), dx.data(), n, d, kvw, true);
  linearBackwardData(pool, dGatePre.data(), weights.wgate.data(), dx.data(), n, d, qw, true);
  linearBackwardWeight(pool, dq.data(), x.data(), grads.wq.data(), n, d, qw);
  linearBackwardWeight(pool, dk.data(), x.data(), grads.wk.data(), n, d, kvw);
  linearBackwardWeight(pool, dv.data(), x.data(), grads.wv.data(), n, d, kvw);
  linearBackwardWeight(pool, dGatePre.data(), x.data(), grads.wgate.data(), n, d, qw);
  if (dims.indexerLossCoef != 0 && n > 0) {
    const Tensor<T> dLogits = indexerKlBackward(pool, saved.indexerProbs, saved.indexerTarget,
                                                saved.selected, dims.indexerLossCoef / double(n));
    indexerBackward(pool, dims.indexerDims(), x, saved.indexer, saved.selected, dLogits,
                    weights.indexer(), grads.indexer());
  }
  return dx;
}

std::vector<SparseAttentionParamShape> sparseAttentionParameterShapes(
    const SparseAttentionDims& dims) {
  const int64_t d = dims.dModel, qw = dims.qWidth(), kvw = dims.kvWidth();
  const int64_t hi = dims.indexerHeads, di = dims.indexerDim;
  return {
      {"wq", {qw, d}, true},
      {"wk", {kvw, d}, true},
      {"wv", {kvw, d}, true},
      {"wo", {d, qw}, true},
      {"wgate", {qw, d}, true},
      {"sink", {dims.numHeads}, false},
      {"indexer.wq", {hi * di, d}, true},
      {"indexer.wk", {di, d}, true},
      {"indexer.k_norm.gain", {di}, false},
      {"indexer.k_norm.bias", {di}, false},
      {"indexer.ww", {hi, d}, true},
  };
}

template <typename T>
void initSparseAttentionParameter(const std::string& name, Tensor<T>& value, double initStd,
                                  int64_t numLayers, Rng& rng) {
  if (name == "sink" || name == "indexer.k_norm.bias") {
    value.fill(T(0));
    return;
  }
  if (name == "indexer.k_norm.gain") {
    value.fill(T(1));
    return;
  }
  const bool known = name == "wq" || name == "wk" || name == "wv" || name == "wo" ||
                     name == "wgate" || name == "indexer.wq" || name == "indexer.wk" ||
                     name == "indexer.ww";
  MOEWB_CHECK_MSG(known, "unknown sparse attention parameter '" << name << "'");
  const double stddev =
      name == "wo" ? initStd / std::sqrt(2.0 * double(std::max<int64_t>(numLayers, 1))) : initStd;
  for (int64_t i = 0; i < value.numel(); ++i) value[i] = T(rng.normal() * stddev);
}

#define MOEWB_INSTANTIATE_SPARSE_ATTENTION(T)                                                      \
  template Tensor<T> sparseAttentionForward<T>(ThreadPool&, const SparseAttentionDims&,            \
                                               const Tensor<T>&, const SparseAttentionWeights<T>&, \
                                               SparseAttentionSaved<T>&);                          \
  template Tensor<T> sparseAttentionBackward<T>(                                                   \
      ThreadPool&, const SparseAttentionDims&, const Tensor<T>&, const Tensor<T>&,                 \
      const SparseAttentionWeights<T>&, const SparseAttentionSaved<T>&,                            \
      const SparseAttentionGrads<T>&);                                                             \
  template void initSparseAttentionParameter<T>(const std::string&, Tensor<T>&, double, int64_t,   \
                                                Rng&);
MOEWB_INSTANTIATE_SPARSE_ATTENTION(float)
MOEWB_INSTANTIATE_SPARSE_ATTENTION(double)

}  // namespace moewb::engine
