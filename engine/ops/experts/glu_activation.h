// The gated activation of the expert and shared FFNs (ENGINE-MATH §5.8): h = a(g) ⊙ c(u) with
// g = x Wg^T, u = x Wu^T, and two kinds:
//   SwiGLU:   a(g) = g sigmoid(g),                       c(u) = u
//   SiTU-GLU: a(g) = beta1 tanh(g / beta1) sigmoid(g),   c(u) = beta2 tanh(u / beta2)
// SiTU tends to SwiGLU as beta1, beta2 -> inf; beta2 soft-clips the linear branch.
// Derivatives (dg = dh ⊙ c(u) ⊙ a'(g), du = dh ⊙ a(g) ⊙ c'(u)):
//   SwiGLU:   a' = s + g s (1 - s),                  c' = 1
//   SiTU-GLU: a' = (1 - th^2) s + beta1 th s (1 - s),  c' = 1 - tanh^2(u / beta2)
// with s = sigmoid(g), th = tanh(g / beta1).
// Evaluated elementwise in the tensor's precision (fp32 for float); the SwiGLU expressions are
// exactly those of the original experts op, so its results are unchanged. O(n) each way.
#pragma once

#include <cmath>
#include <cstdint>

namespace moewb::engine {

enum class GluKind { kSwiGlu, kSitu };

struct GluParams {
  GluKind kind = GluKind::kSwiGlu;
  double situBeta1 = 4.0;   // gate soft clip (SiTU only)
  double situBeta2 = 25.0;  // linear-branch soft clip (SiTU only)
};

template <typename T>
inline T gluSigmoid(T x) {
  return T(1) / (T(1) + std::exp(-x));
}

// h[i] = a(g[i]) * c(u[i]) for i < n.
template <typename T>
void gluForward(const GluParams& p, const T* g, const T* u, T* h, int64_t n) {
  if (p.kind == GluKind::kSwiGlu) {
    for (int64_t i = 0; i < n; ++i) h[i] = g[i] * gluSigmoid(g[i]) * u[i];
    return;
  }
  const T b1 = T(p.situBeta1), b2 = T(p.situBeta2);
  for (int64_t i = 0; i < n; ++i) {
    const T a = b1 * std::tanh(g[i] / b1) * gluSigmoid(g[i]);
    h[i] = a * (b2 * std::tanh(u[i] / b2));
  }
}

// Given dh[i] (read from dgInOut), writes dg[i] into dgInOut and du[i] into du.
template <typename T>
void gluBackward(const GluParams& p, const T* g, const T* u, T* dgInOut, T* du, int64_t n) {
  if (p.kind == GluKind::kSwiGlu) {
    for (int64_t i = 0; i < n; ++i) {
      const T s = gluSigmoid(g[i]);
      const T dh = dgInOut[i];
      du[i] = dh * g[i] * s;
      dgInOut[i] = dh * u[i] * (s + g[i] * s * (T(1) - s));
    }
    return;
  }
  const T b1 = T(p.situBeta1), b2 = T(p.situBeta2);
  for (int64_t i = 0; i < n; ++i) {
    const T s = gluSigmoid(g[i]);
    const T th = std::tanh(g[i] / b1);
    const T tu = std::tanh(u[i] / b2);
    const T a = b1 * th * s;
    const T da = (T(1) - th * th) * s + b1 * th * s * (T(1) - s);
    const T dh = dgInOut[i];
    du[i] = dh * a * (T(1) - tu * tu);
    dgInOut[i] = dh * (b2 * tu) * da;
  }
}

}  // namespace moewb::engine
