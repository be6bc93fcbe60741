// Device-side GLU activations of the expert and shared FFNs (ENGINE-MATH §5.8), the GPU twin of
// ops/experts/glu_activation.h, for any kernel that wants to fuse them (grouped expert GEMM
// epilogues, the dense FFN):
//   SwiGLU:   h = g sigmoid(g) u
//   SiTU-GLU: h = beta1 tanh(g / beta1) sigmoid(g) * beta2 tanh(u / beta2)
// and the backward (dg, du) = (dh c(u) a'(g), dh a(g) c'(u)). Everything in fp32 (callers load
// bf16 and round the results). The formulas are those of glu_activation.h term for term.
// Include only from .cu files.
#pragma once

#include <cuda_runtime.h>

#include "ops/experts/glu_activation.h"

namespace moewb::engine::cuda {

// GluParams in a form a kernel can take by value.
struct GluDeviceParams {
  bool situ = false;    // false: SwiGLU
  float beta1 = 4.0f;   // gate soft clip (SiTU only)
  float beta2 = 25.0f;  // linear-branch soft clip (SiTU only)
};

inline GluDeviceParams gluDeviceParams(const GluParams& params) {
  return GluDeviceParams{params.kind == GluKind::kSitu, float(params.situBeta1),
                         float(params.situBeta2)};
}

__device__ __forceinline__ float gluSigmoidDevice(float x) {
  return 1.0f / (1.0f + expf(-x));
}

// h = a(g) c(u).
__device__ __forceinline__ float gluForwardDevice(const GluDeviceParams& p, float g, float u) {
  const float s = gluSigmoidDevice(g);
  if (!p.situ) return g * s * u;
  const float a = p.beta1 * tanhf(g / p.beta1) * s;
  return a * (p.beta2 * tanhf(u / p.beta2));
}

// (dg, du) from dh at (g, u).
__device__ __forceinline__ void gluBackwardDevice(const GluDeviceParams& p, float g, float u,
                                                  float dh, float& dg, float& du) {
  const float s = gluSigmoidDevice(g);
  if (!p.situ) {
    du = dh * g * s;
    dg = dh * u * (s + g * s * (1.0f - s));
    return;
  }
  const float th = tanhf(g / p.beta1);
  const float tu = tanhf(u / p.beta2);
  const float a = p.beta1 * th * s;
  const float da = (1.0f - th * th) * s + p.beta1 * th * s * (1.0f - s);
  du = dh * a * (1.0f - tu * tu);
  dg = dh * (p.beta2 * tu) * da;
}

}  // namespace moewb::engine::cuda
