// Model<T>: the decoder-only MoE transformer with an explicit forward (saving activations) and
// an explicit backward.
//
//   h = embed(tokens)
//   per layer:  h = h + Attn(RMSNorm(h));  h = h + MoE(RMSNorm(h))
//   logits = RMSNorm(h) Wlm^T (untied head);  loss = mean CE + sum_layers L_aux
// Attention is causal multi-head softmax attention; MoE is router -> permute -> experts ->
// combine (model/moe_ffn.h). Init: every matrix ~ N(0, init_std) from a seeded Rng, the two
// output projections (attention Wo, expert Wd) scaled by 1/sqrt(2L); RMSNorm gains 1.
// forward() emits one PhaseEvent per phase and layer through the recorder (embedding, attention,
// router, permute, experts, combine, loss); backward() the same phases in reverse, pass kBackward.
// Costs per step, roughly: 24 N D^2 L + 18 N k D F L + 6 N V D + 12 B H T^2 K L flops.
// Not thread-safe; one model per trainer, parallel inside through the pool.
#pragma once

#include <cstdint>
#include <vector>

#include "data/batch.h"
#include "model/moe_ffn.h"
#include "model/parameter.h"
#include "ops/attention/attention.h"
#include "runtime/thread_pool.h"
#include "tensor/tensor.h"
#include "trace/phase_recorder.h"

namespace moewb::engine {

struct ForwardResult {
  double loss = 0;     // mean cross-entropy (nats)
  double auxLoss = 0;  // sum over layers of the weighted aux loss
  std::vector<std::vector<int64_t>>
      expertCounts;  // [L][E] assignments per expert, each sums to N k
  double totalLoss() const { return loss + auxLoss; }
};

template <typename T>
class Model {
 public:
  // Allocates every parameter (zeros until initialize()). `pool` must outlive the model.
  Model(const ModelDims& dims, ThreadPool& pool);

  // Draws all weights from `seed` (same seed => identical weights).
  void initialize(uint64_t seed);

  const ModelDims& dims() const { return m_dims; }
  std::vector<Parameter<T>>& parameters() { return m_params; }
  const std::vector<Parameter<T>>& parameters() const { return m_params; }
  int64_t parameterCount() const;
  void zeroGrads();

  // Runs the forward pass on `batch` (B and T must match dims) and keeps the activations.
  // `recorder` may be null.
  ForwardResult forward(const Batch& batch, PhaseRecorder* recorder);

  // Backward of totalLoss() of the last forward; adds into every parameter's grad and releases
  // the activations. Must follow forward().
  void backward(PhaseRecorder* recorder);

 private:
  struct LayerParams {
    int attnNorm, wq, wk, wv, wo, moeNorm, router, gate, up, down;  // indices into m_params
  };
  struct LayerActs {
    Tensor<T> input;  // [N, D] residual stream entering the layer
    Tensor<T> norm1;  // [N, D]
    Tensor<T> rstd1;  // [N]
    AttentionSaved<T> attn;
    Tensor<T> mid;    // [N, D] after the attention residual
    Tensor<T> norm2;  // [N, D]
    Tensor<T> rstd2;  // [N]
    MoeSaved<T> moe;
  };

  int addParam(const std::string& name, std::initializer_list<int64_t> shape, bool decay);
  AttentionDims attentionDims() const;
  AttentionWeights<T> attentionWeights(const LayerParams& p) const;
  AttentionGrads<T> attentionGrads(const LayerParams& p);
  MoeWeights<T> moeWeights(const LayerParams& p) const;
  MoeGrads<T> moeGrads(const LayerParams& p);
  MoeOptions moeOptions() const;
  Tensor<T> layerForward(int32_t layer, Tensor<T> input, PhaseRecorder* recorder);
  Tensor<T> layerBackward(int32_t layer, const Tensor<T>& dOut, PhaseRecorder* recorder);
  double lossForward(const Tensor<T>& h, PhaseRecorder* recorder);
  Tensor<T> lossBackward(PhaseRecorder* recorder);

  ModelDims m_dims;
  ThreadPool& m_pool;
  std::vector<Parameter<T>> m_params;
  int m_embedding = -1, m_finalNorm = -1, m_lmHead = -1;
  std::vector<LayerParams> m_layers;

  // Activations of the last forward.
  bool m_hasActivations = false;
  Tensor<int32_t> m_inputs;   // [N]
  Tensor<int32_t> m_targets;  // [N]
  std::vector<LayerActs> m_acts;
  Tensor<T> m_finalInput;    // [N, D]
  Tensor<T> m_finalNormOut;  // [N, D]
  Tensor<T> m_finalRstd;     // [N]
  Tensor<T> m_logits;        // [N, V]
  Tensor<T> m_lse;           // [N]
};

}  // namespace moewb::engine
