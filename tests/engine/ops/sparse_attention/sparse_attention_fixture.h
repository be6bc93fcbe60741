// Test helpers for the sparse attention layer: caller-owned parameters (random values, or the
// float copy of a double set) and zeroed gradients, viewed as the op's Weights/Grads structs.
#pragma once

#include <vector>

#include "grad_check.h"
#include "ops/sparse_attention/sparse_attention.h"

namespace moewb::engine::test {

template <typename T>
Tensor<T> tensorOfShape(const std::vector<int64_t>& shape) {
  return shape.size() == 1 ? Tensor<T>({shape[0]}) : Tensor<T>({shape[0], shape[1]});
}

// One tensor per entry of sparseAttentionParameterShapes, in that order.
template <typename T>
struct SparseParams {
  explicit SparseParams(const SparseAttentionDims& dims) {
    for (const auto& spec : sparseAttentionParameterShapes(dims)) {
      names.push_back(spec.name);
      tensors.push_back(tensorOfShape<T>(spec.shape));
    }
  }
  // Random values: matrices N(0, weightStd^2), sink N(0, 0.25), gain 1 + N(0, 0.04), bias N(0,
  // 0.04).
  void randomize(Rng& rng, double weightStd) {
    for (size_t i = 0; i < tensors.size(); ++i) {
      const bool isGain = names[i] == "indexer.k_norm.gain";
      const double stddev = tensors[i].rank() == 2 ? weightStd : (names[i] == "sink" ? 0.5 : 0.2);
      fillNormal(tensors[i], rng, stddev);
      if (isGain) {
        for (int64_t j = 0; j < tensors[i].numel(); ++j) tensors[i][j] += T(1);
      }
    }
  }
  template <typename U>
  void copyFrom(const SparseParams<U>& other) {
    for (size_t i = 0; i < tensors.size(); ++i) {
      for (int64_t j = 0; j < tensors[i].numel(); ++j) tensors[i][j] = T(other.tensors[i][j]);
    }
  }
  Tensor<T>& operator[](const std::string& name) {
    for (size_t i = 0; i < names.size(); ++i) {
      if (names[i] == name) return tensors[i];
    }
    ADD_FAILURE() << "no parameter " << name;
    return tensors[0];
  }
  SparseAttentionWeights<T> weights() const {
    const auto& t = tensors;
    return {t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7], t[8], t[9], t[10]};
  }
  SparseAttentionGrads<T> grads() {
    auto& t = tensors;
    return {t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7], t[8], t[9], t[10]};
  }
  bool isIndexer(size_t i) const { return names[i].starts_with("indexer."); }

  std::vector<std::string> names;
  std::vector<Tensor<T>> tensors;
};

}  // namespace moewb::engine::test
