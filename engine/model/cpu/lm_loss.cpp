// LM loss head dispatch over dense / chunk / CCE (see lm_loss.h).
#include "model/cpu/lm_loss.h"

#include "model/batch.h"
#include "ops/cross_entropy/cross_entropy.h"
#include "ops/linear/linear.h"

namespace moewb::engine {

ChunkLossOptions chunkLossOptionsOf(const ModelDims& dims) {
  ChunkLossOptions options;
  options.chunkTokens = dims.loss.chunkTokens;
  options.loss.ignoreIndex = kIgnoreTarget;
  return options;
}

CceOptions cceOptionsOf(const ModelDims& dims) {
  CceOptions options;
  options.vocabBlock = dims.loss.cceVocabBlock;
  options.filterEps = dims.loss.cceFilterEps;  // 0 = exact
  options.filterWeightGrad = dims.loss.cceFilterWeightGrad;
  options.loss.ignoreIndex = kIgnoreTarget;
  return options;
}

template <typename T>
double lmLossForward(ThreadPool& pool, const ModelDims& dims, const Tensor<T>& h,
                     const Tensor<T>& wv, const Tensor<int32_t>& targets, LmLossSaved<T>& saved) {
  if (dims.loss.kind == "chunk") {
    return chunkLossForward(pool, h, wv, targets, chunkLossOptionsOf(dims), saved.chunk).loss;
  }
  if (dims.loss.kind == "cce") {
    return cceForward(pool, h, wv, targets, cceOptionsOf(dims), saved.cce).loss;
  }
  const int64_t n = h.dim(0), d = h.dim(1), v = wv.dim(0);
  saved.logits = Tensor<T>({n, v});
  linearForward(pool, h.data(), wv.data(), saved.logits.data(), n, d, v);
  return crossEntropyForward(pool, saved.logits, targets, saved.lse);
}

template <typename T>
Tensor<T> lmLossBackward(ThreadPool& pool, const ModelDims& dims, const Tensor<T>& h,
                         const Tensor<T>& wv, const Tensor<int32_t>& targets,
                         LmLossSaved<T>& saved, double dLoss, Tensor<T>& dWv) {
  if (dims.loss.kind == "chunk") {
    Tensor<T> dh = chunkLossBackward(pool, saved.chunk, dLoss, dWv);
    saved.chunk = {};
    return dh;
  }
  if (dims.loss.kind == "cce") {
    Tensor<T> dh = cceBackward(pool, h, wv, targets, cceOptionsOf(dims), saved.cce, dLoss, dWv);
    saved.cce = {};
    return dh;
  }
  const int64_t n = h.dim(0), d = h.dim(1), v = wv.dim(0);
  Tensor<T> dLogits =
      crossEntropyBackward(pool, saved.logits, targets, saved.lse, dLoss);  // [N, V]
  saved.logits = Tensor<T>();
  Tensor<T> dh({n, d});
  linearBackwardData(pool, dLogits.data(), wv.data(), dh.data(), n, d, v);
  linearBackwardWeight(pool, dLogits.data(), h.data(), dWv.data(), n, d, v);
  return dh;
}

#define MOEWB_INSTANTIATE_LM_LOSS(T)                                                            \
  template double lmLossForward<T>(ThreadPool&, const ModelDims&, const Tensor<T>&,             \
                                   const Tensor<T>&, const Tensor<int32_t>&, LmLossSaved<T>&);  \
  template Tensor<T> lmLossBackward<T>(ThreadPool&, const ModelDims&, const Tensor<T>&,         \
                                       const Tensor<T>&, const Tensor<int32_t>&,                \
                                       LmLossSaved<T>&, double, Tensor<T>&);
MOEWB_INSTANTIATE_LM_LOSS(float)
MOEWB_INSTANTIATE_LM_LOSS(double)

}  // namespace moewb::engine
