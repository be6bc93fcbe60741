// LoRA adapters on the reference engine (ENGINE-MATH §5.10): W' = W + s B A with s = alpha / r,
// per expert for the 3-D expert tensors. The reference materialises W' before each forward (the
// ops then see an ordinary weight) and turns the gradient dW' that the ops leave in the frozen
// base weight's grad buffer into the adapters' gradients after the backward:
//   dB = s dW' A^T,  dA = s B^T dW'   (per expert)
// The grouped form that never materialises W' is the GPU fast path.
//
// Shapes: a weight W [m, n] takes A [r, n], B [m, r]; an expert tensor W [E, m, n] takes
// A [E, r, n], B [E, m, r]. Costs: O(E m n r) per merge and per gradient conversion; one extra
// copy of every adapted weight (the effective weight) lives alongside the model.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/thread_pool.h"
#include "runtime/tensor/tensor.h"

namespace moewb::engine {

// True when the parameter with local name `localName` ("attn.wq", "moe.gate", ...) is adapted
// under lora.targets = `targets` ("experts", "attention" or "all").
bool loraTargets(const std::string& localName, const std::string& targets);

// Shapes of the adapters of a weight of shape `weightShape` (rank 2 or 3) at rank `rank`.
std::vector<int64_t> loraAShape(const std::vector<int64_t>& weightShape, int64_t rank);
std::vector<int64_t> loraBShape(const std::vector<int64_t>& weightShape, int64_t rank);

// out = w + scale * B A (per expert); `out` is (re)allocated to w's shape when needed.
template <typename T>
void loraMerge(ThreadPool& pool, const Tensor<T>& w, const Tensor<T>& a, const Tensor<T>& b,
               double scale, Tensor<T>& out);

// dA += scale * B^T dW, dB += scale * dW A^T (per expert), for dW the gradient of W'.
template <typename T>
void loraBackward(ThreadPool& pool, const Tensor<T>& dW, const Tensor<T>& a, const Tensor<T>& b,
                  double scale, Tensor<T>& dA, Tensor<T>& dB);

}  // namespace moewb::engine
