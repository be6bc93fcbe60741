// AttnResState<T>: the Block AttnRes bookkeeping of one forward/backward pass (ENGINE-MATH §4.2,
// fla's rule). It owns the residual "stream" of an AttnRes model: the completed block sums and
// the partial sum of the block being built, decides which sources each AttnRes call sees, runs
// the AttnRes op (attnres.h) and, in the backward, routes every source gradient to the tensors
// that formed it.
//
// Sublayers are numbered s = 0, 1, ... in call order (for the decoder: s = 2 l for the attention
// and 2 l + 1 for the MoE/FFN sublayer of layer l). With block size B (in sublayers; 1 = full
// AttnRes, 2 = one block per layer):
//   begin(emb):                         completed = [], prefix = emb
//   mixBeforeSublayer(s) -> x_s:        sources = completed + [prefix];
//                                       if s % B == 0: completed = sources, prefix = none
//                                       x_s = AttnRes(w_s, gamma_s, sources)
//   addSublayerOutput(out_s):           prefix = out_s if none, else prefix + out_s
//   mixFinal() -> x_top:                x_top = AttnRes(w_top, gamma_top, completed + [prefix])
// s = 0 is always a boundary, so the first call sees [emb] alone and returns it unchanged.
// K3-style "a slot every 12 layers" is B = 24 (boundaries at the attention sublayer of layers
// 0, 12, 24, ...); the paper's "about 8 blocks" is B = 2 L / 8.
//
// How the model uses it (per step; one AttnResState `st` held by the model; AttnRes parameters:
// one (query w, keyGain gamma) pair of [D] tensors per sublayer plus one for the top, w
// zero-initialised, gamma ones, neither weight-decayed):
//   forward:
//     st.begin(embeddingForward(...));                       // [N, D]
//     for l in 0..L-1:
//       x1 = st.mixBeforeSublayer(pool, wAttn[l], gAttn[l]); // replaces the residual input h
//       a  = attention(rmsNorm(x1));                         // keep x1 for the norm backward
//       st.addSublayerOutput(pool, std::move(a));            // no "h + a": the state sums
//       x2 = st.mixBeforeSublayer(pool, wMoe[l], gMoe[l]);
//       m  = moe(rmsNorm(x2));
//       st.addSublayerOutput(pool, std::move(m));
//     xTop = st.mixFinal(pool, wTop, gTop);                  // then final norm, LM head, loss
//   backward (exactly the reverse order; each call consumes what the forward saved):
//     st.backwardFinal(pool, dxTop, wTop, gTop, dwTop, dgTop);  // dxTop from the final norm
//     for l in L-1..0:
//       dm  = st.backwardSublayerOutput();                   // dL/dm, complete
//       dx2 = rmsNormBackward(moeBackward(dm));
//       st.backwardMixBeforeSublayer(pool, dx2, wMoe[l], gMoe[l], dwMoe[l], dgMoe[l]);
//       da  = st.backwardSublayerOutput();                   // dL/da, complete
//       dx1 = rmsNormBackward(attentionBackward(da));
//       st.backwardMixBeforeSublayer(pool, dx1, wAttn[l], gAttn[l], dwAttn[l], dgAttn[l]);
//     embeddingBackward(st.takeEmbeddingGrad());
// Gradients of the AttnRes parameters are added into the given tensors (accumulate). Each source
// receives gradient from every later call that saw it: the state keeps one gradient buffer per
// completed block plus one for the current prefix and accumulates into them; when the backward
// passes the boundary call that created a block, that block's gradient becomes the prefix's.
// A call out of this order is a bug and aborts (MOEWB_CHECK).
//
// Memory: the forward keeps every completed block and, for each non-boundary sublayer, the prefix
// it saw ([N, D] each: at most one tensor per sublayer, like a plain residual model's saved
// inputs); the backward frees them as it passes. Costs: the AttnRes op's O(sources N D) per call.
// Not thread-safe; parallel inside through the pool; results do not depend on its thread count.
#pragma once

#include <cstdint>
#include <vector>

#include "ops/attnres/attnres.h"
#include "runtime/thread_pool.h"
#include "runtime/tensor/tensor.h"

namespace moewb::engine {

template <typename T>
class AttnResState {
 public:
  // blockSize: sublayers per block (>= 1, checked).
  AttnResState(int64_t blockSize, const AttnResOptions& options);

  // True when sublayer s closes the previous block (s % blockSize == 0).
  static bool isBoundary(int64_t sublayer, int64_t blockSize) { return sublayer % blockSize == 0; }

  // Starts a forward pass from the embedding output [N, D]; drops any earlier pass.
  void begin(Tensor<T> embedding);
  // The input x_s [N, D] of the next sublayer (before its pre-norm); see the file comment.
  Tensor<T> mixBeforeSublayer(ThreadPool& pool, const Tensor<T>& query /*[D]*/,
                              const Tensor<T>& keyGain /*[D]*/);
  // Adds the output [N, D] of the sublayer whose input mixBeforeSublayer just returned.
  void addSublayerOutput(ThreadPool& pool, Tensor<T> output);
  // The input [N, D] of the final norm; ends the forward.
  Tensor<T> mixFinal(ThreadPool& pool, const Tensor<T>& query, const Tensor<T>& keyGain);

  // Backward of mixFinal given dL/dx_top [N, D]; adds into dQuery[D], dKeyGain[D].
  void backwardFinal(ThreadPool& pool, const Tensor<T>& dMixed, const Tensor<T>& query,
                     const Tensor<T>& keyGain, Tensor<T>& dQuery, Tensor<T>& dKeyGain);
  // dL/d(out_s) [N, D] for the last sublayer not yet reversed (complete: every later use of the
  // output has been reversed).
  Tensor<T> backwardSublayerOutput();
  // Backward of that sublayer's mixBeforeSublayer given dL/dx_s [N, D]; adds into dQuery,
  // dKeyGain and the source gradients.
  void backwardMixBeforeSublayer(ThreadPool& pool, const Tensor<T>& dMixed, const Tensor<T>& query,
                                 const Tensor<T>& keyGain, Tensor<T>& dQuery, Tensor<T>& dKeyGain);
  // dL/d(embedding) [N, D] once every sublayer is reversed; ends the pass.
  Tensor<T> takeEmbeddingGrad();

  int64_t blockSize() const { return m_blockSize; }
  // Sublayers mixed so far in this forward (or not yet reversed, in the backward).
  int64_t sublayers() const { return int64_t(m_calls.size()); }
  // Completed block sums currently held.
  int64_t completedBlocks() const { return int64_t(m_blocks.size()); }
  // Bytes of the activations the state holds (blocks, prefixes, gradient buffers).
  int64_t heldBytes() const;

 private:
  enum class Stage { kIdle, kMix, kOutput, kForwardDone, kBackOutput, kBackMix, kBackDone };
  struct Call {
    int64_t blocksBefore = 0;  // completed blocks before the call
    bool boundary = false;     // the prefix became block blocksBefore at this call
  };

  std::vector<const Tensor<T>*> sourcesOf(size_t call) const;
  void expectStage(Stage stage) const;

  int64_t m_blockSize;
  AttnResOptions m_options;
  Stage m_stage = Stage::kIdle;
  std::vector<Call> m_calls;
  std::vector<Tensor<T>> m_blocks;     // completed block sums, [N, D] each
  std::vector<Tensor<T>> m_snapshots;  // per call: its prefix source (empty at boundaries)
  Tensor<T> m_prefix;                  // [N, D] partial sum of the open block (forward)
  Tensor<T> m_finalPrefix;             // [N, D] the prefix mixFinal saw
  std::vector<Tensor<T>> m_dBlocks;    // [N, D] gradient per completed block (backward)
  Tensor<T> m_dPrefix;                 // [N, D] gradient of the current prefix (backward)
};

}  // namespace moewb::engine
