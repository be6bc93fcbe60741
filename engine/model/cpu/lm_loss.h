// The language-model loss head: final hidden h[N, D] (after the final norm) and the LM head
// Wv[V, D] -> mean cross-entropy over valid targets (negative targets, e.g. image positions, are
// ignored), in one of three forms chosen by loss.kind:
//   dense: logits [N, V] materialised (ops/linear + ops/cross_entropy), the reference;
//   chunk: Chunk Loss over token chunks of loss.chunk_tokens (ops/chunk_loss);
//   cce:   Cut Cross-Entropy over vocabulary blocks, logits never stored (ops/cce).
// All three agree to fp32 rounding. Costs: 2 N V D flops each way; peak extra memory N V (dense),
// chunk_tokens V (chunk), about N + tokenBlock x vocabBlock (cce).
#pragma once

#include <cstdint>

#include "model/cpu/parameter.h"
#include "ops/cce/cce.h"
#include "ops/chunk_loss/chunk_loss.h"
#include "runtime/thread_pool.h"
#include "runtime/tensor/tensor.h"

namespace moewb::engine {

template <typename T>
struct LmLossSaved {
  Tensor<T> logits;         // [N, V] dense only
  Tensor<T> lse;            // [N] dense only
  ChunkLossSaved<T> chunk;  // chunk only: gradients computed in the forward
  CceSaved<T> cce;          // cce only: lse
};

// Returns the mean cross-entropy (nats) over targets >= 0.
template <typename T>
double lmLossForward(ThreadPool& pool, const ModelDims& dims, const Tensor<T>& h /*[N, D]*/,
                     const Tensor<T>& wv /*[V, D]*/, const Tensor<int32_t>& targets /*[N]*/,
                     LmLossSaved<T>& saved);

// Returns dh[N, D] for an upstream gradient of `dLoss` on the mean loss (1: the loss itself; a
// micro-batch's LossWeights::lm); adds into dWv[V, D]; releases the saved state.
template <typename T>
Tensor<T> lmLossBackward(ThreadPool& pool, const ModelDims& dims, const Tensor<T>& h,
                         const Tensor<T>& wv, const Tensor<int32_t>& targets,
                         LmLossSaved<T>& saved, double dLoss, Tensor<T>& dWv /*[V, D]*/);

// The loss heads' options from the model's loss settings, for both backends (the CUDA loss head
// copies them into its own option types): targets kIgnoreTarget are ignored; loss.chunk_tokens;
// loss.cce_vocab_block, loss.cce_filter_eps (0 = exact) and loss.cce_filter_weight_grad with
// CCE's token tile.
ChunkLossOptions chunkLossOptionsOf(const ModelDims& dims);
CceOptions cceOptionsOf(const ModelDims& dims);

}  // namespace moewb::engine
