// LoRA merge and gradient conversion (see lora.h). Every output element is summed by one thread
// in a fixed order, so results do not depend on the thread count.
#include "ops/lora/lora.h"

#include "moewb/base/check.h"

namespace moewb::engine {
namespace {

// W viewed as [groups, rows, cols]: groups = E for expert tensors, 1 for matrices.
struct GroupedShape {
  int64_t groups = 1, rows = 0, cols = 0;
};

template <typename T>
GroupedShape groupedShape(const Tensor<T>& w) {
  MOEWB_CHECK(w.rank() == 2 || w.rank() == 3);
  if (w.rank() == 2) return {1, w.dim(0), w.dim(1)};
  return {w.dim(0), w.dim(1), w.dim(2)};
}

}  // namespace

bool loraTargets(const std::string& localName, const std::string& targets) {
  static const std::vector<std::string> kAttention = {
      "attn.wq", "attn.wk", "attn.wv",   "attn.wo",   "kda.wq",    "kda.wk",
      "kda.wv",  "kda.wo",  "sparse.wq", "sparse.wk", "sparse.wv", "sparse.wo"};
  static const std::vector<std::string> kExperts = {
      "moe.gate", "moe.up", "moe.down", "moe.shared.gate", "moe.shared.up", "moe.shared.down"};
  auto in = [&](const std::vector<std::string>& names) {
    for (const auto& name : names) {
      if (name == localName) return true;
    }
    return false;
  };
  const bool all = targets == "all";
  return ((all || targets == "attention") && in(kAttention)) ||
         ((all || targets == "experts") && in(kExperts));
}

std::vector<int64_t> loraAShape(const std::vector<int64_t>& w, int64_t rank) {
  if (w.size() == 3) return {w[0], rank, w[2]};
  return {rank, w[1]};
}

std::vector<int64_t> loraBShape(const std::vector<int64_t>& w, int64_t rank) {
  if (w.size() == 3) return {w[0], w[1], rank};
  return {w[0], rank};
}

template <typename T>
void loraMerge(ThreadPool& pool, const Tensor<T>& w, const Tensor<T>& a, const Tensor<T>& b,
               double scale, Tensor<T>& out) {
  const GroupedShape g = groupedShape(w);
  const int64_t r = a.dim(a.rank() - 2);
  MOEWB_CHECK(a.numel() == g.groups * r * g.cols && b.numel() == g.groups * g.rows * r);
  if (out.numel() != w.numel()) out = w.clone();
  const T s = T(scale);
  pool.parallelFor(g.groups * g.rows, [&](int64_t gi) {
    const int64_t e = gi / g.rows, i = gi % g.rows;
    const T* wRow = w.data() + gi * g.cols;           // [cols]
    const T* bRow = b.data() + (e * g.rows + i) * r;  // [r]
    const T* aMat = a.data() + e * r * g.cols;        // [r, cols]
    T* oRow = out.data() + gi * g.cols;
    for (int64_t j = 0; j < g.cols; ++j) oRow[j] = T(0);
    for (int64_t k = 0; k < r; ++k) {
      const T bk = bRow[k];
      const T* aRow = aMat + k * g.cols;
      for (int64_t j = 0; j < g.cols; ++j) oRow[j] += bk * aRow[j];
    }
    for (int64_t j = 0; j < g.cols; ++j) oRow[j] = wRow[j] + s * oRow[j];
  });
}

template <typename T>
void loraBackward(ThreadPool& pool, const Tensor<T>& dW, const Tensor<T>& a, const Tensor<T>& b,
                  double scale, Tensor<T>& dA, Tensor<T>& dB) {
  const GroupedShape g = groupedShape(dW);
  const int64_t r = a.dim(a.rank() - 2);
  MOEWB_CHECK(dA.numel() == a.numel() && dB.numel() == b.numel());
  const T s = T(scale);
  // dB[e, i, k] += s sum_j dW[e, i, j] A[e, k, j]
  pool.parallelFor(g.groups * g.rows, [&](int64_t gi) {
    const int64_t e = gi / g.rows, i = gi % g.rows;
    const T* gRow = dW.data() + gi * g.cols;
    const T* aMat = a.data() + e * r * g.cols;
    T* dbRow = dB.data() + (e * g.rows + i) * r;
    for (int64_t k = 0; k < r; ++k) {
      const T* aRow = aMat + k * g.cols;
      T sum = 0;
      for (int64_t j = 0; j < g.cols; ++j) sum += gRow[j] * aRow[j];
      dbRow[k] += s * sum;
    }
  });
  // dA[e, k, j] += s sum_i B[e, i, k] dW[e, i, j]
  pool.parallelFor(g.groups * r, [&](int64_t gk) {
    const int64_t e = gk / r, k = gk % r;
    T* daRow = dA.data() + gk * g.cols;
    std::vector<T> sum(size_t(g.cols), T(0));
    for (int64_t i = 0; i < g.rows; ++i) {
      const T bik = b.data()[(e * g.rows + i) * r + k];
      const T* gRow = dW.data() + (e * g.rows + i) * g.cols;
      for (int64_t j = 0; j < g.cols; ++j) sum[size_t(j)] += bik * gRow[j];
    }
    for (int64_t j = 0; j < g.cols; ++j) daRow[j] += s * sum[size_t(j)];
  });
}

template void loraMerge<float>(ThreadPool&, const Tensor<float>&, const Tensor<float>&,
                               const Tensor<float>&, double, Tensor<float>&);
template void loraMerge<double>(ThreadPool&, const Tensor<double>&, const Tensor<double>&,
                                const Tensor<double>&, double, Tensor<double>&);
template void loraBackward<float>(ThreadPool&, const Tensor<float>&, const Tensor<float>&,
                                  const Tensor<float>&, double, Tensor<float>&, Tensor<float>&);
template void loraBackward<double>(ThreadPool&, const Tensor<double>&, const Tensor<double>&,
                                   const Tensor<double>&, double, Tensor<double>&, Tensor<double>&);

}  // namespace moewb::engine
