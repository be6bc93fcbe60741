// The token mixer of a decoder layer, one of three kinds chosen per layer by
// model.mixer_pattern: 'A' causal softmax attention (ops/attention), 'K' KDA linear attention
// (ops/kda) or 'S' gated sparse attention with a lightning indexer (ops/sparse_attention).
//
// Operations: list a kind's parameters (local names, shapes, decay), initialise one parameter,
// and run forward / backward given the parameters as a span of tensors in list order. The model
// owns the tensors; MixerSaved keeps what the backward needs. The sparse kind adds its indexer
// KL loss (already weighted) to `auxLoss`; its stage (dense warm-up or sparse) follows the
// training step. Costs: those of the op (see each op's header).
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "model/cpu/parameter.h"
#include "ops/attention/attention.h"
#include "ops/registry.h"
#include "model/layers/kda_layer.h"
#include "ops/sparse_attention/sparse_attention.h"
#include "runtime/thread_pool.h"
#include "runtime/tensor/rng.h"

namespace moewb::engine {

struct MixerParamSpec {
  std::string name;            // local name, prefixed by the model ("attn.wq", "kda.wq", ...)
  std::vector<int64_t> shape;
  bool decay = true;
};

template <typename T>
struct MixerSaved {
  std::variant<std::monostate, AttentionSaved<T>, KdaSaved<T>, SparseAttentionSaved<T>> state;
  double auxLoss = 0;  // weighted indexer KL loss (sparse kind), else 0
};

// The KDA op's dimensions for the model (kda.* with defaults from model.*).
KdaDims mixerKdaDims(const ModelDims& dims);

// The settings of `dims` that decide which ops run and at which sizes (ops/registry.h).
OpProblem opProblemOf(const ModelDims& dims);
// The sparse-attention op's dimensions at optimizer step `step` (dense warm-up stage while
// step < sparse.warmup_steps).
SparseAttentionDims mixerSparseDims(const ModelDims& dims, int64_t step);

// Parameters of a mixer kind, in the order forward/backward expect them.
std::vector<MixerParamSpec> mixerParameterSpecs(char kind, const ModelDims& dims);

// Draws the initial value of one parameter (by its local name) from `rng`.
template <typename T>
void mixerInitializeParameter(char kind, const ModelDims& dims, const std::string& localName,
                              Tensor<T>& value, Rng& rng);

// y[N, D] for x[N, D] (already normed). `values` in mixerParameterSpecs order. `step` selects the
// sparse kind's stage (dense warm-up while step < sparse.warmup_steps).
template <typename T>
Tensor<T> mixerForward(ThreadPool& pool, char kind, const ModelDims& dims, int64_t step,
                       const Tensor<T>& x, const std::vector<const Tensor<T>*>& values,
                       MixerSaved<T>& saved);

// dx[N, D]; adds into `grads` (same order as values).
template <typename T>
Tensor<T> mixerBackward(ThreadPool& pool, char kind, const ModelDims& dims, int64_t step,
                        const Tensor<T>& dy, const Tensor<T>& x,
                        const std::vector<const Tensor<T>*>& values,
                        const std::vector<Tensor<T>*>& grads, const MixerSaved<T>& saved);

}  // namespace moewb::engine
