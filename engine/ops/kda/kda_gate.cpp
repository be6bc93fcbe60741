// KDA forget gate (both variants), short conv + SiLU and per-head L2 norm, forward and backward
// (see kda_gate.h).
#include "ops/kda/kda_gate.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace moewb::engine {
namespace {

constexpr int64_t kRowGrain = 64;      // token rows per task
constexpr int64_t kChannelGrain = 16;  // channels per task of the token reductions

template <typename T>
T sigmoid(T x) {
  return T(1) / (T(1) + std::exp(-x));
}

// log(1 + e^x) without overflow.
template <typename T>
T softplus(T x) {
  return std::max(x, T(0)) + std::log1p(std::exp(-std::abs(x)));
}

template <typename T>
void checkGateShapes(const KdaGateParams& params, const Tensor<T>& f, const Tensor<T>& aLog,
                     const Tensor<T>& dtBias) {
  const int64_t width = params.numHeads * params.headDim;
  MOEWB_CHECK(f.rank() == 2 && f.dim(1) == width);
  MOEWB_CHECK(aLog.numel() == params.numHeads && dtBias.numel() == width);
  MOEWB_CHECK(params.kind == KdaGateKind::kDefault || params.lowerBound < 0);
}

}  // namespace

template <typename T>
Tensor<T> kdaGateForward(ThreadPool& pool, const KdaGateParams& params, const Tensor<T>& f,
                         const Tensor<T>& aLog, const Tensor<T>& dtBias) {
  checkGateShapes(params, f, aLog, dtBias);
  const int64_t n = f.dim(0), kd = params.headDim, width = f.dim(1);
  const T lb = T(params.lowerBound);
  std::vector<T> expA(size_t(params.numHeads));  // [H] exp(A_log)
  for (int64_t h = 0; h < params.numHeads; ++h) expA[size_t(h)] = std::exp(aLog[h]);
  Tensor<T> g({n, width});  // [N, H*K]
  pool.parallelForRange(n, kRowGrain, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      for (int64_t c = 0; c < width; ++c) {
        const T a = expA[size_t(c / kd)];
        const T z = f.at(row, c) + dtBias[c];
        g.at(row, c) =
            params.kind == KdaGateKind::kDefault ? -a * softplus(z) : lb * sigmoid(a * z);
      }
    }
  });
  return g;
}

template <typename T>
Tensor<T> kdaGateBackward(ThreadPool& pool, const KdaGateParams& params, const Tensor<T>& dg,
                          const Tensor<T>& f, const Tensor<T>& g, const Tensor<T>& aLog,
                          const Tensor<T>& dtBias, Tensor<T>& dALog, Tensor<T>& dDtBias) {
  checkGateShapes(params, f, aLog, dtBias);
  const int64_t n = f.dim(0), kd = params.headDim, width = f.dim(1);
  MOEWB_CHECK(dg.numel() == f.numel() && g.numel() == f.numel());
  MOEWB_CHECK(dALog.numel() == aLog.numel() && dDtBias.numel() == dtBias.numel());
  const bool isDefault = params.kind == KdaGateKind::kDefault;
  const T lb = T(params.lowerBound);
  std::vector<T> expA(size_t(params.numHeads));  // [H] exp(A_log)
  for (int64_t h = 0; h < params.numHeads; ++h) expA[size_t(h)] = std::exp(aLog[h]);
  Tensor<T> df({n, width});       // [N, H*K]
  Tensor<T> dATerms({n, width});  // [N, H*K] dg * dg/dA_log per element
  pool.parallelForRange(n, kRowGrain, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      for (int64_t c = 0; c < width; ++c) {
        const T a = expA[size_t(c / kd)];
        const T grad = dg.at(row, c), gate = g.at(row, c);
        if (isDefault) {  // dg/dz = -a sigmoid(z), dg/dA = g
          df.at(row, c) = -grad * a * sigmoid(f.at(row, c) + dtBias[c]);
          dATerms.at(row, c) = grad * gate;
        } else {  // s = g / lb: dg/dz = lb s (1 - s) a, dg/dA = dg/dz z
          const T s = gate / lb;
          df.at(row, c) = grad * lb * s * (T(1) - s) * a;
          dATerms.at(row, c) = df.at(row, c) * (f.at(row, c) + dtBias[c]);
        }
      }
    }
  });
  pool.parallelForRange(width, kChannelGrain, [&](int64_t begin, int64_t end) {
    for (int64_t row = 0; row < n; ++row) {
      for (int64_t c = begin; c < end; ++c) dDtBias[c] += df.at(row, c);
    }
  });
  pool.parallelFor(params.numHeads, [&](int64_t head) {
    T sum = 0;
    for (int64_t row = 0; row < n; ++row) {
      for (int64_t c = head * kd; c < (head + 1) * kd; ++c) sum += dATerms.at(row, c);
    }
    dALog[head] += sum;
  });
  return df;
}

namespace {

// out[c] += a[c] * b[c]; restrict-qualified so that it vectorises.
template <typename T>
void addProduct(int64_t n, const T* __restrict a, const T* __restrict b, T* __restrict out) {
  for (int64_t c = 0; c < n; ++c) out[c] += a[c] * b[c];
}

// w [Ch, W] transposed to [W, Ch] so that each tap is a contiguous row.
template <typename T>
std::vector<T> tapsByRow(const Tensor<T>& w) {
  const int64_t ch = w.dim(0), width = w.dim(1);
  std::vector<T> taps(size_t(ch * width));
  for (int64_t c = 0; c < ch; ++c) {
    for (int64_t j = 0; j < width; ++j) taps[size_t(j * ch + c)] = w.at(c, j);
  }
  return taps;
}

}  // namespace

template <typename T>
Tensor<T> kdaShortConvForward(ThreadPool& pool, int64_t batch, int64_t seqLen, const Tensor<T>& x,
                              const Tensor<T>& w, Tensor<T>& preActivation) {
  const int64_t n = batch * seqLen, ch = x.dim(1), width = w.dim(1);
  MOEWB_CHECK(x.rank() == 2 && x.dim(0) == n && w.rank() == 2 && w.dim(0) == ch);
  const std::vector<T> taps = tapsByRow(w);  // [W, Ch]
  Tensor<T> y({n, ch});                      // [N, Ch]
  preActivation = Tensor<T>({n, ch});        // [N, Ch]
  pool.parallelForRange(n, kRowGrain, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const int64_t t = row % seqLen;
      T* out = preActivation.row(row);
      for (int64_t j = 0; j < width; ++j) {
        const int64_t back = width - 1 - j;  // tokens before the current one
        if (back > t) continue;
        addProduct(ch, taps.data() + j * ch, x.row(row - back), out);
      }
      T* yr = y.row(row);
      for (int64_t c = 0; c < ch; ++c) yr[c] = out[c] * sigmoid(out[c]);
    }
  });
  return y;
}

template <typename T>
Tensor<T> kdaShortConvBackward(ThreadPool& pool, int64_t batch, int64_t seqLen, const Tensor<T>& dy,
                               const Tensor<T>& x, const Tensor<T>& w,
                               const Tensor<T>& preActivation, Tensor<T>& dw) {
  const int64_t n = batch * seqLen, ch = x.dim(1), width = w.dim(1);
  MOEWB_CHECK(dy.numel() == n * ch && preActivation.numel() == n * ch && dw.numel() == w.numel());
  const std::vector<T> taps = tapsByRow(w);  // [W, Ch]
  Tensor<T> du({n, ch});                     // [N, Ch] gradient of the conv output
  pool.parallelForRange(n, kRowGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin * ch; i < end * ch; ++i) {
      const T u = preActivation[i];
      const T s = sigmoid(u);
      du[i] = dy[i] * s * (T(1) + u * (T(1) - s));
    }
  });
  Tensor<T> dx({n, ch});  // [N, Ch]
  pool.parallelForRange(n, kRowGrain, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const int64_t t = row % seqLen;
      T* out = dx.row(row);
      for (int64_t j = 0; j < width; ++j) {
        const int64_t ahead = width - 1 - j;  // the output this tap feeds is `ahead` tokens later
        if (t + ahead >= seqLen) continue;
        addProduct(ch, taps.data() + j * ch, du.row(row + ahead), out);
      }
    }
  });
  pool.parallelForRange(ch, kChannelGrain, [&](int64_t begin, int64_t end) {
    std::vector<T> acc(size_t(width * (end - begin)), T(0));  // [W, tile] sums in token order
    for (int64_t row = 0; row < n; ++row) {
      const int64_t t = row % seqLen;
      const T* g = du.row(row);
      for (int64_t j = 0; j < width; ++j) {
        const int64_t back = width - 1 - j;
        if (back > t) continue;
        addProduct(end - begin, g + begin, x.row(row - back) + begin,
                   acc.data() + j * (end - begin));
      }
    }
    for (int64_t c = begin; c < end; ++c) {
      for (int64_t j = 0; j < width; ++j) dw.at(c, j) += acc[size_t(j * (end - begin) + c - begin)];
    }
  });
  return dx;
}

template <typename T>
Tensor<T> kdaL2NormForward(ThreadPool& pool, int64_t headDim, double scale, double eps,
                           const Tensor<T>& x, Tensor<T>& rinv) {
  const int64_t n = x.dim(0), width = x.dim(1), heads = width / headDim;
  MOEWB_CHECK(x.rank() == 2 && heads * headDim == width);
  Tensor<T> y({n, width});       // [N, H*K]
  rinv = Tensor<T>({n, heads});  // [N, H]
  pool.parallelForRange(n, kRowGrain, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      for (int64_t h = 0; h < heads; ++h) {
        const T* xr = x.row(row) + h * headDim;
        T sumSq = 0;
        for (int64_t d = 0; d < headDim; ++d) sumSq += xr[d] * xr[d];
        const T r = T(1) / std::sqrt(sumSq + T(eps));
        rinv.at(row, h) = r;
        T* yr = y.row(row) + h * headDim;
        for (int64_t d = 0; d < headDim; ++d) yr[d] = T(scale) * xr[d] * r;
      }
    }
  });
  return y;
}

template <typename T>
Tensor<T> kdaL2NormBackward(ThreadPool& pool, int64_t headDim, double scale, const Tensor<T>& dy,
                            const Tensor<T>& x, const Tensor<T>& rinv) {
  const int64_t n = x.dim(0), width = x.dim(1), heads = width / headDim;
  MOEWB_CHECK(dy.numel() == x.numel() && rinv.numel() == n * heads);
  Tensor<T> dx({n, width});  // [N, H*K]
  pool.parallelForRange(n, kRowGrain, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      for (int64_t h = 0; h < heads; ++h) {
        const T* xr = x.row(row) + h * headDim;
        const T* dyr = dy.row(row) + h * headDim;
        const T r = rinv.at(row, h);
        T dot = 0;  // y · dy with y = x r
        for (int64_t d = 0; d < headDim; ++d) dot += xr[d] * r * dyr[d];
        T* dxr = dx.row(row) + h * headDim;
        for (int64_t d = 0; d < headDim; ++d) {
          dxr[d] = T(scale) * (dyr[d] - xr[d] * r * dot) * r;
        }
      }
    }
  });
  return dx;
}

#define MOEWB_INSTANTIATE_KDA_GATE(T)                                                              \
  template Tensor<T> kdaGateForward<T>(ThreadPool&, const KdaGateParams&, const Tensor<T>&,        \
                                       const Tensor<T>&, const Tensor<T>&);                        \
  template Tensor<T> kdaGateBackward<T>(ThreadPool&, const KdaGateParams&, const Tensor<T>&,       \
                                        const Tensor<T>&, const Tensor<T>&, const Tensor<T>&,      \
                                        const Tensor<T>&, Tensor<T>&, Tensor<T>&);                 \
  template Tensor<T> kdaShortConvForward<T>(ThreadPool&, int64_t, int64_t, const Tensor<T>&,       \
                                            const Tensor<T>&, Tensor<T>&);                         \
  template Tensor<T> kdaShortConvBackward<T>(ThreadPool&, int64_t, int64_t, const Tensor<T>&,      \
                                             const Tensor<T>&, const Tensor<T>&, const Tensor<T>&, \
                                             Tensor<T>&);                                          \
  template Tensor<T> kdaL2NormForward<T>(ThreadPool&, int64_t, double, double, const Tensor<T>&,   \
                                         Tensor<T>&);                                              \
  template Tensor<T> kdaL2NormBackward<T>(ThreadPool&, int64_t, double, const Tensor<T>&,          \
                                          const Tensor<T>&, const Tensor<T>&);
MOEWB_INSTANTIATE_KDA_GATE(float)
MOEWB_INSTANTIATE_KDA_GATE(double)

}  // namespace moewb::engine
