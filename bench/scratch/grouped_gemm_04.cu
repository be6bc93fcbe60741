// Grouped expert GEMMs, round 4 (issue 14, "round 2" of grouped_gemm_03.md): grouped_gemm_03.cu
// plus a third variant, wgmma round 2, for the two stages it changes: the weight gradients with
// the gather index read one K tile ahead (gw::grouped_wgrad_prefetch_kernel) and the dRowWeight
// recompute with its epilogue loads batched (gw::grouped_bwd_rowweight_batched_kernel). Every
// other stage of round 2 is round 1's kernel. Round 1 (gw::grouped_wgrad_kernel,
// gw::grouped_bwd_rowweight_kernel) is checked as in grouped_gemm_03.cu (fp32 reference, v2,
// bitwise rerun); round 2 must then equal round 1 bitwise (every output and gradient) and rerun
// bitwise. The timing table has v2, wgmma round 1 and round 2 per stage.
// Round 3's description, which still holds:
// (round 3) the wgmma stages the engine now runs on compute capability 9.0
// (engine/ops/experts/grouped_gemm_wgmma_cuda.cuh, launched by experts_wgmma_cuda.cu) against
// the mma.sync v2 kernels (grouped_gemm_v2_cuda.cuh), both the engine's headers. Stages: forward
// gate+up (fc1, with the gather prologue), forward down (fc2), fc2 with the row weight in the
// epilogue (the folded combine), the dRowWeight recompute (fc2's mainloop, per-tile dot
// epilogue, then v1's fixed-order sum), dh with the GLU backward and dx (dgrad: the weights read
// [K, N], the MN-major B operand), and the three weight gradients (both operands MN-major,
// largest expert first, accumulated into non-zero fp32 gradients). Per problem: every stage of
// both variants against an fp32 reference (relative L2 error and max |error|; sampled rows at the
// benchmark shape), the wgmma outputs against v2's (relative L2, max |difference|, elements that
// differ), the wgmma outputs bitwise run to run, rows >= R and empty experts' gradients
// untouched. Each stage reads v2's outputs of the stage before, so each comparison isolates one
// stage. Problems: awkward shapes (ragged groups, empty experts, rows not a multiple of the
// 128-row tile, D / F not multiples of 64 or 128, no gather), then T=16384 D=2048 E=64 k=8
// F=1024 (R = 131072) balanced and skewed (one expert 8x the mean), timed per stage (median of
// 20) with TFLOP/s. Design and predictions: grouped_gemm_03.md.
// Build (here or on the H200; seconds):
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -lineinfo -Xptxas -v \
//        -I/work/main/engine -o /work/main/.scratch/bin/grouped_gemm_04 \
//        bench/scratch/grouped_gemm_04.cu
// Run: .scratch/bin/grouped_gemm_04   (no arguments; exit 1 on any FAIL or CUDA error)
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "ops/experts/grouped_gemm_cuda.cuh"
#include "ops/experts/grouped_gemm_v2_cuda.cuh"
#include "ops/experts/grouped_gemm_wgmma_cuda.cuh"

namespace gg = moewb::engine::cuda::grouped;
namespace g2 = moewb::engine::cuda::grouped::v2;
namespace gw = moewb::engine::cuda::grouped::wg;
using bf16 = __nv_bfloat16;
using moewb::engine::cuda::GluDeviceParams;

#define CK(x)                                                                              \
  do {                                                                                     \
    cudaError_t e_ = (x);                                                                  \
    if (e_ != cudaSuccess) {                                                               \
      std::printf("CUDA error %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__); \
      std::exit(1);                                                                        \
    }                                                                                      \
  } while (0)

static bool gAllPass = true;
static bool gRound2 = false;  // variant 3 runs wgmma round 2's wgrad / dRowWeight kernels

// ---- device helpers -------------------------------------------------------------------------
__device__ float hashUniform(uint64_t i, uint64_t seed) {
  uint64_t z = i * 0x9E3779B97F4A7C15ull + seed * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return float(z >> 40) / float(1ull << 24) * 2.0f - 1.0f;  // [-1, 1)
}
__global__ void fillBf16(bf16* p, int64_t n, uint64_t seed, float scale) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    p[i] = __float2bfloat16(scale * hashUniform(i, seed));
}
__global__ void fillF32(float* p, int64_t n, uint64_t seed, float lo, float hi) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    p[i] = lo + (hi - lo) * 0.5f * (hashUniform(i, seed) + 1.0f);
}

// ref[r][n] = sum_k a[idx(r)][k] w[e(r)][n][k] (w stored [E][N][K]) for rows r % rowStep == 0.
__global__ void refRowGemmNK(const bf16* a, const int32_t* idx, const bf16* w,
                             const int32_t* rowExpert, int64_t rows, int rowStep, int64_t kSize,
                             int64_t nSize, float* ref) {
  const int64_t n = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  const int64_t r = int64_t(blockIdx.y) * rowStep;
  if (n >= nSize || r >= rows) return;
  const int64_t src = idx != nullptr ? idx[r] : r;
  const bf16* ar = a + src * kSize;
  const bf16* wr = w + (int64_t(rowExpert[r]) * nSize + n) * kSize;
  float acc = 0.0f;
  for (int64_t k = 0; k < kSize; ++k) acc += __bfloat162float(ar[k]) * __bfloat162float(wr[k]);
  ref[r * nSize + n] = acc;
}

// ref[r][n] = sum_k a1[r][k] w1[e(r)][k][n] (+ a2[r][k] w2[e(r)][k][n]) (w stored [E][K][N]) for
// rows r % rowStep == 0.
__global__ void refRowGemmKN(const bf16* a1, const bf16* a2, const bf16* w1, const bf16* w2,
                             const int32_t* rowExpert, int64_t rows, int rowStep, int64_t kSize,
                             int64_t nSize, float* ref) {
  const int64_t n = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  const int64_t r = int64_t(blockIdx.y) * rowStep;
  if (n >= nSize || r >= rows) return;
  const int64_t w0 = int64_t(rowExpert[r]) * kSize * nSize;
  float acc = 0.0f;
  for (int part = 0; part < (a2 != nullptr ? 2 : 1); ++part) {
    const bf16* a = (part == 0 ? a1 : a2) + r * kSize;
    const bf16* w = (part == 0 ? w1 : w2) + w0 + n;
    for (int64_t k = 0; k < kSize; ++k)
      acc += __bfloat162float(a[k]) * __bfloat162float(w[k * nSize]);
  }
  ref[r * nSize + n] = acc;
}

// ref[e][m][n] = sum_{r in e} a[r][m] b[idx(r)][n] for m % mStep == 0.
__global__ void refWgrad(const bf16* a, const bf16* b, const int32_t* idx, const int32_t* offsets,
                         int64_t mSize, int64_t nSize, int mStep, float* ref) {
  const int64_t n = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  const int64_t m = int64_t(blockIdx.y) * mStep;
  const int e = blockIdx.z;
  if (n >= nSize || m >= mSize) return;
  float acc = 0.0f;
  for (int64_t r = offsets[e]; r < offsets[e + 1]; ++r) {
    const int64_t src = idx != nullptr ? idx[r] : r;
    acc += __bfloat162float(a[r * mSize + m]) * __bfloat162float(b[src * nSize + n]);
  }
  ref[(e * mSize + m) * nSize + n] = acc;
}

// ---- host helpers ---------------------------------------------------------------------------
static float bf(bf16 v) {
  return __bfloat162float(v);
}
template <class T>
static std::vector<T> toHost(const T* d, int64_t n) {
  std::vector<T> h(size_t(std::max<int64_t>(n, 0)));
  if (n > 0) CK(cudaMemcpy(h.data(), d, size_t(n) * sizeof(T), cudaMemcpyDeviceToHost));
  return h;
}
static void fill(bf16* p, int64_t n, uint64_t seed, float scale) {
  fillBf16<<<1024, 256>>>(p, n, seed, scale);
  CK(cudaGetLastError());
}
static float sigm(float x) {
  return 1.0f / (1.0f + std::exp(-x));
}
static float silu(float x) {
  return x * sigm(x);
}

// Relative L2 error and max |got - want| over the pairs added.
struct ErrAcc {
  double num = 0, den = 0, maxAbs = 0;
  int64_t differ = 0;
  void add(double got, double want) {
    const double e = got - want;
    num += e * e;
    den += want * want;
    maxAbs = std::max(maxAbs, std::isfinite(e) ? std::fabs(e) : INFINITY);
    differ += got != want;
  }
  double rel() const { return den > 0 ? std::sqrt(num / den) : (num > 0 ? 1e30 : 0.0); }
};

static void check(const std::string& name, const std::string& shape, const ErrAcc& e,
                  double tol) {
  const bool pass = e.rel() < tol && std::isfinite(e.rel()) && std::isfinite(e.maxAbs);
  if (!pass) gAllPass = false;
  std::printf("RESULT name=%s shape=%s rel=%.3e maxabs=%.3e differ=%lld status=%s\n",
              name.c_str(), shape.c_str(), e.rel(), e.maxAbs, (long long)e.differ,
              pass ? "PASS" : "FAIL");
}
static void checkCount(const std::string& name, const std::string& shape, int64_t bad) {
  if (bad != 0) gAllPass = false;
  std::printf("RESULT name=%s shape=%s bad=%lld status=%s\n", name.c_str(), shape.c_str(),
              (long long)bad, bad == 0 ? "PASS" : "FAIL");
}

template <class F>
static double timeMs(F launch, int reps = 20) {
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  for (int i = 0; i < 3; ++i) launch();
  CK(cudaDeviceSynchronize());
  std::vector<float> t;
  for (int i = 0; i < reps; ++i) {
    CK(cudaEventRecord(a));
    launch();
    CK(cudaEventRecord(b));
    CK(cudaEventSynchronize(b));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, a, b));
    t.push_back(ms);
  }
  CK(cudaGetLastError());
  CK(cudaEventDestroy(a));
  CK(cudaEventDestroy(b));
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

struct Problem {
  std::string name;
  int64_t n = 0, d = 0, f = 0, maxRows = 0;  // n: x rows with gather (tokens)
  std::vector<int32_t> counts;
  bool gather = true;
  int rowStep = 1, mStep = 1;  // reference sampling (rows; weight-gradient rows)
  bool time = false;
};

// Per-variant outputs (v2 = 2, wgmma = 3).
struct Outputs {
  bf16 *g, *u, *h, *y, *yW, *dg, *du, *dx;
  float *partial, *dRW;
  float* grad[3];  // wgrad down [E, D, F], gate [E, F, D], up [E, F, D]
};

struct TableRow {
  std::string name;
  double v2Ms, wgMs, r2Ms, flops;
};
static std::vector<TableRow> gTable;

static void runProblem(const Problem& p) {
  const int64_t E = int64_t(p.counts.size()), D = p.d, F = p.f, maxRows = p.maxRows;
  std::vector<int32_t> offsets(E + 1, 0), rowExpert(maxRows, 0), gidx(maxRows, 0);
  for (int64_t e = 0; e < E; ++e) offsets[e + 1] = offsets[e] + p.counts[e];
  const int64_t R = offsets[E];
  const int64_t nTok = p.gather ? p.n : maxRows;  // x rows, and dy rows of the folded combine
  if (R > maxRows || nTok < 1) {
    std::printf("bad problem %s\n", p.name.c_str());
    std::exit(1);
  }
  for (int64_t e = 0; e < E; ++e)
    for (int64_t j = 0; j < p.counts[e]; ++j) {
      const int64_t r = offsets[e] + j;
      rowExpert[r] = int32_t(e);
      gidx[r] = p.gather ? int32_t(std::min<int64_t>(nTok - 1, (j * nTok) / p.counts[e] + e % 3))
                         : int32_t(r);
    }
  const std::string shape = p.name + "_E" + std::to_string(E) + "_D" + std::to_string(D) + "_F" +
                            std::to_string(F) + "_R" + std::to_string(R);
  const int64_t wSize = E * F * D, rf = maxRows * F, rd = maxRows * D;
  const int64_t colTiles = (D + g2::kBN - 1) / g2::kBN;
  bf16 *x, *wg, *wu, *wd, *dyTok, *dY;
  float *rowW, *ref, *ref2;
  int32_t *dOffsets, *dRowExpert, *dIdx, *tileStart, *dOrder;
  CK(cudaMalloc(&x, nTok * D * 2));
  CK(cudaMalloc(&dyTok, nTok * D * 2));
  CK(cudaMalloc(&dY, rd * 2));
  CK(cudaMalloc(&wg, wSize * 2));
  CK(cudaMalloc(&wu, wSize * 2));
  CK(cudaMalloc(&wd, wSize * 2));
  CK(cudaMalloc(&rowW, maxRows * 4));
  CK(cudaMalloc(&ref, std::max(std::max(rf, rd), wSize) * 4));
  CK(cudaMalloc(&ref2, std::max(rf, rd) * 4));
  CK(cudaMalloc(&dOffsets, (E + 1) * 4));
  CK(cudaMalloc(&tileStart, (E + 1) * 4));
  CK(cudaMalloc(&dOrder, E * 4));
  CK(cudaMalloc(&dRowExpert, maxRows * 4));
  CK(cudaMalloc(&dIdx, maxRows * 4));
  Outputs out[2];
  for (Outputs& o : out) {
    for (bf16** q : {&o.g, &o.u, &o.h, &o.dg, &o.du}) CK(cudaMalloc(q, rf * 2));
    for (bf16** q : {&o.y, &o.yW, &o.dx}) CK(cudaMalloc(q, rd * 2));
    CK(cudaMalloc(&o.partial, colTiles * maxRows * 4));
    CK(cudaMalloc(&o.dRW, maxRows * 4));
    for (bf16* q : {o.g, o.u, o.h, o.dg, o.du}) CK(cudaMemset(q, 0xFF, rf * 2));  // NaN poison
    for (bf16* q : {o.y, o.yW, o.dx}) CK(cudaMemset(q, 0xFF, rd * 2));
    CK(cudaMemset(o.dRW, 0xFF, maxRows * 4));
    for (float*& q : o.grad) CK(cudaMalloc(&q, wSize * 4));
  }
  // Same non-zero base gradients for both variants (the stages add into them).
  auto fillGrads = [&](Outputs& o) {
    for (int w = 0; w < 3; ++w) fillF32<<<1024, 256>>>(o.grad[w], wSize, 30 + w, -0.5f, 0.5f);
    CK(cudaGetLastError());
  };
  for (Outputs& o : out) fillGrads(o);
  CK(cudaMemcpy(dOffsets, offsets.data(), (E + 1) * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dRowExpert, rowExpert.data(), maxRows * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dIdx, gidx.data(), maxRows * 4, cudaMemcpyHostToDevice));
  const float in = 1.0f / std::sqrt(float(D)), hid = 1.0f / std::sqrt(float(F));
  fill(x, nTok * D, 11, 1.0f);
  fill(dyTok, nTok * D, 15, 1.0f);
  fill(dY, rd, 17, 1.0f);
  fill(wg, wSize, 12, 2.0f * in);
  fill(wu, wSize, 13, 2.0f * in);
  fill(wd, wSize, 14, 2.0f * hid);
  fillF32<<<1024, 256>>>(rowW, maxRows, 16, 0.05f, 1.0f);
  CK(cudaGetLastError());
  const int32_t* xIdx = p.gather ? dIdx : nullptr;
  const GluDeviceParams glu;  // SwiGLU

  const unsigned slots = unsigned(maxRows / gg::kBM + E);
  auto tilesOf = [](int64_t v, int t) { return unsigned(std::max<int64_t>(1, (v + t - 1) / t)); };
  const cudaFuncAttribute kSmemAttr = cudaFuncAttributeMaxDynamicSharedMemorySize;
  for (const void* k : {(const void*)g2::grouped_fwd_gate_up_kernel,
                        (const void*)g2::grouped_fwd_down_kernel,
                        (const void*)g2::grouped_bwd_rowweight_kernel,
                        (const void*)g2::grouped_bwd_dh_kernel,
                        (const void*)g2::grouped_bwd_dx_kernel,
                        (const void*)g2::grouped_wgrad_kernel})
    CK(cudaFuncSetAttribute(k, kSmemAttr, g2::kSmemBytes));
  for (const void* k : {(const void*)gw::grouped_fwd_gate_up_kernel,
                        (const void*)gw::grouped_fwd_down_kernel,
                        (const void*)gw::grouped_bwd_rowweight_kernel,
                        (const void*)gw::grouped_bwd_dh_kernel,
                        (const void*)gw::grouped_bwd_dx_kernel,
                        (const void*)gw::grouped_wgrad_kernel,
                        (const void*)gw::grouped_bwd_rowweight_batched_kernel,
                        (const void*)gw::grouped_wgrad_prefetch_kernel})
    CK(cudaFuncSetAttribute(k, kSmemAttr, gw::kSmemBytes));
  gg::grouped_schedule_kernel<<<1, 32>>>(dOffsets, int(E), gg::kBM, tileStart);
  gg::grouped_expert_order_kernel<<<1, 1024>>>(dOffsets, int(E), dOrder);
  CK(cudaGetLastError());
  // Launchers: variant v (2 or 3) into out[v - 2]; every stage after fc1 reads v2's outputs of
  // the stage before (h for fc2, g and u for dh, dg and du for dx), so that each comparison
  // isolates one stage.
  auto fc1 = [&](int v) {
    Outputs& o = out[v - 2];
    const dim3 grid(tilesOf(F, g2::kGateUpCols), slots);
    if (v == 3) {
      gw::grouped_fwd_gate_up_kernel<<<grid, gw::kThreads, gw::kSmemBytes>>>(
          x, xIdx, wg, wu, D, F, dOffsets, tileStart, int(E), glu, o.g, o.u, o.h);
    } else {
      g2::grouped_fwd_gate_up_kernel<<<grid, g2::kThreads, g2::kSmemBytes>>>(
          x, xIdx, wg, wu, D, F, dOffsets, tileStart, int(E), glu, o.g, o.u, o.h);
    }
  };
  const bf16* hIn = out[0].h;
  auto fc2 = [&](int v, const float* rw) {
    Outputs& o = out[v - 2];
    const dim3 grid(tilesOf(D, g2::kBN), slots);
    bf16* y = rw != nullptr ? o.yW : o.y;
    if (v == 3) {
      gw::grouped_fwd_down_kernel<<<grid, gw::kThreads, gw::kSmemBytes>>>(
          hIn, wd, D, F, dOffsets, tileStart, int(E), rw, y);
    } else {
      g2::grouped_fwd_down_kernel<<<grid, g2::kThreads, g2::kSmemBytes>>>(
          hIn, wd, D, F, dOffsets, tileStart, int(E), rw, y);
    }
  };
  auto rowWeightStage = [&](int v) {
    Outputs& o = out[v - 2];
    const dim3 grid(tilesOf(D, g2::kBN), slots);
    if (v == 3 && gRound2) {
      gw::grouped_bwd_rowweight_batched_kernel<<<grid, gw::kThreads, gw::kSmemBytes>>>(
          hIn, wd, D, F, dOffsets, tileStart, int(E), dyTok, dIdx, maxRows, o.partial);
    } else if (v == 3) {
      gw::grouped_bwd_rowweight_kernel<<<grid, gw::kThreads, gw::kSmemBytes>>>(
          hIn, wd, D, F, dOffsets, tileStart, int(E), dyTok, dIdx, maxRows, o.partial);
    } else {
      g2::grouped_bwd_rowweight_kernel<<<grid, g2::kThreads, g2::kSmemBytes>>>(
          hIn, wd, D, F, dOffsets, tileStart, int(E), dyTok, dIdx, maxRows, o.partial);
    }
    gg::grouped_rowweight_sum_kernel<<<1024, 256>>>(o.partial, int(colTiles), maxRows, dOffsets,
                                                    int(E), o.dRW);
  };
  auto dh = [&](int v) {
    Outputs& o = out[v - 2];
    const dim3 grid(tilesOf(F, g2::kBN), slots);
    if (v == 3) {
      gw::grouped_bwd_dh_kernel<<<grid, gw::kThreads, gw::kSmemBytes>>>(
          dY, wd, D, F, dOffsets, tileStart, int(E), glu, out[0].g, out[0].u, o.dg, o.du);
    } else {
      g2::grouped_bwd_dh_kernel<<<grid, g2::kThreads, g2::kSmemBytes>>>(
          dY, wd, D, F, dOffsets, tileStart, int(E), glu, out[0].g, out[0].u, o.dg, o.du);
    }
  };
  auto dxs = [&](int v) {
    Outputs& o = out[v - 2];
    const dim3 grid(tilesOf(D, g2::kBN), slots);
    if (v == 3) {
      gw::grouped_bwd_dx_kernel<<<grid, gw::kThreads, gw::kSmemBytes>>>(
          out[0].dg, out[0].du, wg, wu, D, F, dOffsets, tileStart, int(E), o.dx);
    } else {
      g2::grouped_bwd_dx_kernel<<<grid, g2::kThreads, g2::kSmemBytes>>>(
          out[0].dg, out[0].du, wg, wu, D, F, dOffsets, tileStart, int(E), o.dx);
    }
  };
  // Weight gradient w (0 down: dY^T h, 1 gate: dg^T x, 2 up: du^T x; v2's h, dg, du).
  struct WgradArgs {
    const bf16 *a, *b;
    const int32_t* idx;
    int64_t m, n;
  };
  const WgradArgs wgArgs[3] = {{dY, hIn, nullptr, D, F},
                               {out[0].dg, x, xIdx, F, D},
                               {out[0].du, x, xIdx, F, D}};
  auto wgrad = [&](int v, int w) {
    const WgradArgs& a = wgArgs[w];
    const dim3 grid(tilesOf(a.n, g2::kBN), tilesOf(a.m, g2::kBM), unsigned(E));
    float* grad = out[v - 2].grad[w];
    if (v == 3 && gRound2) {
      gw::grouped_wgrad_prefetch_kernel<<<grid, gw::kThreads, gw::kSmemBytes>>>(
          a.a, a.b, a.idx, a.m, a.n, dOffsets, dOrder, grad);
    } else if (v == 3) {
      gw::grouped_wgrad_kernel<<<grid, gw::kThreads, gw::kSmemBytes>>>(a.a, a.b, a.idx, a.m, a.n,
                                                                       dOffsets, dOrder, grad);
    } else {
      g2::grouped_wgrad_kernel<<<grid, g2::kThreads, g2::kSmemBytes>>>(a.a, a.b, a.idx, a.m, a.n,
                                                                       dOffsets, dOrder, grad);
    }
  };
  auto runAll = [&](int v) {
    fc1(v);
    if (v == 2) CK(cudaDeviceSynchronize());  // hIn = v2's h
    fc2(v, nullptr);
    fc2(v, rowW);
    rowWeightStage(v);
    dh(v);
    dxs(v);
    if (v == 2) CK(cudaDeviceSynchronize());  // v2's dg, du: the wgrad inputs
    for (int w = 0; w < 3; ++w) wgrad(v, w);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
  };
  std::vector<std::vector<float>> base;
  for (int w = 0; w < 3; ++w) base.push_back(toHost(out[0].grad[w], wSize));
  runAll(2);
  runAll(3);

  // ---- checks ----
  struct Snap {
    std::vector<bf16> g, u, h, y, yW, dg, du, dx;
    std::vector<float> dRW;
  };
  auto snap = [&](const Outputs& o) {
    return Snap{toHost(o.g, rf),   toHost(o.u, rf),   toHost(o.h, rf),
                toHost(o.y, rd),   toHost(o.yW, rd),  toHost(o.dg, rf),
                toHost(o.du, rf),  toHost(o.dx, rd),  toHost(o.dRW, maxRows)};
  };
  const Snap s2 = snap(out[0]), s3 = snap(out[1]);
  auto sampled = [&](auto fn) {
    for (int64_t r = 0; r < R; r += p.rowStep) fn(r);
  };
  std::vector<float> rg, ru, ry, rdh, rdx;
  if (R > 0) {
    const dim3 blk(128);
    auto grid = [&](int64_t n) {
      return dim3(tilesOf(n, 128), unsigned((R + p.rowStep - 1) / p.rowStep));
    };
    refRowGemmNK<<<grid(F), blk>>>(x, xIdx, wg, dRowExpert, R, p.rowStep, D, F, ref);
    refRowGemmNK<<<grid(F), blk>>>(x, xIdx, wu, dRowExpert, R, p.rowStep, D, F, ref2);
    CK(cudaGetLastError());
    rg = toHost(ref, rf);
    ru = toHost(ref2, rf);
    refRowGemmNK<<<grid(D), blk>>>(hIn, nullptr, wd, dRowExpert, R, p.rowStep, F, D, ref);
    CK(cudaGetLastError());
    ry = toHost(ref, rd);
    refRowGemmKN<<<grid(F), blk>>>(dY, nullptr, wd, nullptr, dRowExpert, R, p.rowStep, D, F, ref);
    CK(cudaGetLastError());
    rdh = toHost(ref, rf);
    refRowGemmKN<<<grid(D), blk>>>(out[0].dg, out[0].du, wg, wu, dRowExpert, R, p.rowStep, F, D,
                                   ref);
    CK(cudaGetLastError());
    rdx = toHost(ref, rd);
  }
  const std::vector<float> hRowW = toHost(rowW, maxRows);
  const std::vector<bf16> hDy = toHost(dyTok, nTok * D);
  for (int v : {2, 3}) {
    const Snap& s = v == 2 ? s2 : s3;
    const std::string tag = v == 2 ? "v2_" : "wgmma_";
    ErrAcc eg, eu, eh, ey, eyw, erw, edg, edu, edx;
    sampled([&](int64_t r) {
      for (int64_t c = 0; c < F; ++c) {
        const int64_t i = r * F + c;
        eg.add(bf(s.g[i]), rg[i]);
        eu.add(bf(s.u[i]), ru[i]);
        eh.add(bf(s.h[i]), silu(rg[i]) * ru[i]);
        // GLU backward at v2's saved g, u (the dh input of both variants).
        const float gv = bf(s2.g[i]), uv = bf(s2.u[i]), sg = sigm(gv);
        edu.add(bf(s.du[i]), rdh[i] * gv * sg);
        edg.add(bf(s.dg[i]), rdh[i] * uv * (sg + gv * sg * (1.0f - sg)));
      }
      for (int64_t c = 0; c < D; ++c) {
        const int64_t i = r * D + c;
        ey.add(bf(s.y[i]), ry[i]);
        eyw.add(bf(s.yW[i]), double(hRowW[r]) * ry[i]);
        edx.add(bf(s.dx[i]), rdx[i]);
      }
    });
    // dRowWeight against double dots of dy[token(r)] and this variant's bf16 y (every row).
    for (int64_t r = 0; r < R; ++r) {
      double dot = 0;
      for (int64_t c = 0; c < D; ++c) dot += double(bf(hDy[gidx[r] * D + c])) * bf(s.y[r * D + c]);
      erw.add(s.dRW[r], dot);
    }
    if (R > 0) {
      check(tag + "fc1_gate", shape, eg, 1e-2);
      check(tag + "fc1_up", shape, eu, 1e-2);
      check(tag + "fc1_glu", shape, eh, 1e-2);
      check(tag + "fc2", shape, ey, 1e-2);
      check(tag + "fc2_rowweight", shape, eyw, 1e-2);
      check(tag + "drowweight", shape, erw, 1e-4);
      check(tag + "dh_dgate", shape, edg, 1e-2);
      check(tag + "dh_dup", shape, edu, 1e-2);
      check(tag + "dx", shape, edx, 1e-2);
    }
    // Rows < R finite, rows >= R untouched (poison).
    int64_t bad = 0;
    auto rowsWritten = [&](const std::vector<bf16>& t, int64_t width) {
      for (int64_t i = 0; i < maxRows * width; ++i) {
        uint16_t bits;
        std::memcpy(&bits, &t[i], 2);
        const bool finite = (bits & 0x7F80) != 0x7F80;
        bad += i < R * width ? !finite : bits != 0xFFFF;
      }
    };
    for (const auto* t : {&s.g, &s.u, &s.h, &s.dg, &s.du}) rowsWritten(*t, F);
    for (const auto* t : {&s.y, &s.yW, &s.dx}) rowsWritten(*t, D);
    checkCount(tag + "rows_written_only", shape, bad);
  }
  // wgmma against v2 (every row) and wgmma run to run.
  auto vsV2 = [&](const char* what, const std::vector<bf16>& a, const std::vector<bf16>& b,
                  int64_t width) {
    ErrAcc e;
    for (int64_t i = 0; i < R * width; ++i) e.add(bf(a[i]), bf(b[i]));
    check(std::string("wgmma_vs_v2_") + what, shape, e, 5e-3);
  };
  vsV2("gatePre", s3.g, s2.g, F);
  vsV2("upPre", s3.u, s2.u, F);
  vsV2("hidden", s3.h, s2.h, F);
  vsV2("y", s3.y, s2.y, D);
  vsV2("y_rowweight", s3.yW, s2.yW, D);
  vsV2("dGate", s3.dg, s2.dg, F);
  vsV2("dUp", s3.du, s2.du, F);
  vsV2("dx", s3.dx, s2.dx, D);
  {
    ErrAcc e;
    for (int64_t r = 0; r < R; ++r) e.add(s3.dRW[r], s2.dRW[r]);
    check("wgmma_vs_v2_drowweight", shape, e, 5e-3);
  }
  // Weight gradients: (got - base) against the reference (sampled m), against v2's (everything),
  // empty experts untouched (bitwise).
  const char* wgNames[3] = {"wgrad_down", "wgrad_gate", "wgrad_up"};
  std::vector<std::vector<float>> grads3;
  for (int w = 0; w < 3; ++w) {
    const WgradArgs& a = wgArgs[w];
    refWgrad<<<dim3(tilesOf(a.n, 128), unsigned((a.m + p.mStep - 1) / p.mStep), unsigned(E)),
               128>>>(a.a, a.b, a.idx, dOffsets, a.m, a.n, p.mStep, ref);
    CK(cudaGetLastError());
    const std::vector<float> want = toHost(ref, wSize);
    const std::vector<float> got2 = toHost(out[0].grad[w], wSize);
    grads3.push_back(toHost(out[1].grad[w], wSize));
    const std::vector<float>& got3 = grads3.back();
    ErrAcc e2, e3, vs;
    int64_t emptyTouched = 0;
    for (int64_t e = 0; e < E; ++e)
      for (int64_t m = 0; m < a.m; ++m)
        for (int64_t n = 0; n < a.n; ++n) {
          const int64_t i = (e * a.m + m) * a.n + n;
          const float b = base[w][i];
          if (p.counts[e] == 0) {
            emptyTouched += std::memcmp(&got2[i], &b, 4) != 0;
            emptyTouched += std::memcmp(&got3[i], &b, 4) != 0;
            continue;
          }
          vs.add(double(got3[i]) - b, double(got2[i]) - b);
          if (m % p.mStep != 0) continue;
          e2.add(double(got2[i]) - b, want[i]);
          e3.add(double(got3[i]) - b, want[i]);
        }
    if (R > 0) {
      check(std::string("v2_") + wgNames[w], shape, e2, 1e-2);
      check(std::string("wgmma_") + wgNames[w], shape, e3, 1e-2);
      check(std::string("wgmma_vs_v2_") + wgNames[w], shape, vs, 5e-3);
    }
    checkCount(std::string("empty_experts_untouched_") + wgNames[w], shape, emptyTouched);
  }
  // Round 1 rerun (determinism), then round 2 (must write round 1's bits), then round 2 again.
  for (int pass = 0; pass < 3; ++pass) {
    gRound2 = pass > 0;
    fillGrads(out[1]);
    runAll(3);
    const Snap again = snap(out[1]);
    auto bits = [](const auto& a, const auto& b) {
      return a.size() == b.size() &&
             std::memcmp(a.data(), b.data(), a.size() * sizeof(a[0])) == 0;
    };
    const bool same = bits(again.g, s3.g) && bits(again.u, s3.u) && bits(again.h, s3.h) &&
                      bits(again.y, s3.y) && bits(again.yW, s3.yW) && bits(again.dRW, s3.dRW) &&
                      bits(again.dg, s3.dg) && bits(again.du, s3.du) && bits(again.dx, s3.dx) &&
                      bits(toHost(out[1].grad[0], wSize), grads3[0]) &&
                      bits(toHost(out[1].grad[1], wSize), grads3[1]) &&
                      bits(toHost(out[1].grad[2], wSize), grads3[2]);
    const char* names[3] = {"wgmma_bitwise_rerun", "wgmma_round2_bitwise_equal_round1",
                            "wgmma_round2_bitwise_rerun"};
    checkCount(names[pass], shape, same ? 0 : 1);
  }
  gRound2 = false;

  if (p.time) {
    const double rdf = double(R) * D * F;
    struct Stage {
      const char* name;
      double flops;
      int which;
    };
    const Stage stages[] = {{"fc1_gate_up", 4 * rdf, 0},
                            {"fc2_down", 2 * rdf, 1},
                            {"fc2_down_rowweight", 2 * rdf, 2},
                            {"drowweight_recompute", 2 * rdf, 3},
                            {"dgrad_dh", 2 * rdf, 4},
                            {"dgrad_dx", 4 * rdf, 5},
                            {"wgrad_down", 2 * rdf, 6},
                            {"wgrad_gate", 2 * rdf, 7},
                            {"wgrad_up", 2 * rdf, 8}};
    for (const Stage& st : stages) {
      double ms[3];
      for (int v : {2, 3, 4}) {
        gRound2 = v == 4;
        const int vv = v == 4 ? 3 : v;
        ms[v - 2] = timeMs([&] {
          if (st.which == 0) fc1(vv);
          if (st.which == 1) fc2(vv, nullptr);
          if (st.which == 2) fc2(vv, rowW);
          if (st.which == 3) rowWeightStage(vv);
          if (st.which == 4) dh(vv);
          if (st.which == 5) dxs(vv);
          if (st.which >= 6) wgrad(vv, st.which - 6);
        });
        const char* variant = v == 2 ? "v2" : v == 3 ? "wgmma" : "wgmma_r2";
        std::printf("RESULT name=time_%s_%s shape=%s ms=%.4f tflops=%.1f\n", variant, st.name,
                    shape.c_str(), ms[v - 2], st.flops / ms[v - 2] / 1e9);
      }
      gRound2 = false;
      gTable.push_back({p.name + " " + st.name, ms[0], ms[1], ms[2], st.flops});
    }
  }
  for (void* q : {(void*)x, (void*)dyTok, (void*)dY, (void*)wg, (void*)wu, (void*)wd, (void*)rowW,
                  (void*)ref, (void*)ref2, (void*)dOffsets, (void*)tileStart, (void*)dRowExpert,
                  (void*)dIdx, (void*)dOrder})
    CK(cudaFree(q));
  for (Outputs& o : out)
    for (void* q : {(void*)o.g, (void*)o.u, (void*)o.h, (void*)o.y, (void*)o.yW, (void*)o.dg,
                    (void*)o.du, (void*)o.dx, (void*)o.partial, (void*)o.dRW, (void*)o.grad[0],
                    (void*)o.grad[1], (void*)o.grad[2]})
      CK(cudaFree(q));
}

int main() {
  int device = 0;
  cudaDeviceProp prop{};
  CK(cudaGetDevice(&device));
  CK(cudaGetDeviceProperties(&prop, device));
  std::printf("device %s, compute capability %d.%d\n", prop.name, prop.major, prop.minor);
  if (prop.major != 9 || prop.minor != 0) {
    std::printf("FAIL: the wgmma kernels need compute capability 9.0 (sm_90a)\n");
    return 1;
  }
  {
    Problem p;  // ragged, empty experts, 1-row expert, D, F not multiples of 64, gather
    p.name = "awkward_gather";
    p.n = 200;
    p.d = 136;
    p.f = 88;
    p.counts = {0, 1, 130, 257, 0, 40};
    p.maxRows = 428 + 37;
    runProblem(p);
  }
  {
    Problem p;  // no gather, 2.06 column tiles, whole + partial K tiles, an empty expert
    p.name = "awkward_plain";
    p.d = 264;
    p.f = 136;
    p.counts = {300, 0, 5, 129, 1};
    p.maxRows = 500;
    p.gather = false;
    runProblem(p);
  }
  {
    Problem p;  // one K chunk of 8
    p.name = "tiny";
    p.n = 3;
    p.d = 8;
    p.f = 8;
    p.counts = {1, 0, 2};
    p.maxRows = 5;
    runProblem(p);
  }
  const int64_t T = 16384, E = 64, K = 8, R = T * K;
  {
    Problem p;
    p.name = "balanced";
    p.n = T;
    p.d = 2048;
    p.f = 1024;
    p.counts.assign(E, int32_t(R / E));
    p.maxRows = R;
    p.rowStep = 97;
    p.mStep = 61;
    p.time = true;
    runProblem(p);
  }
  {
    Problem p;  // expert 0 at 8x the mean, the rest share the remainder (ragged counts)
    p.name = "skewed";
    p.n = T;
    p.d = 2048;
    p.f = 1024;
    const int64_t hot = 8 * R / E, rest = R - hot;
    p.counts.push_back(int32_t(hot));
    for (int64_t e = 1; e < E; ++e)
      p.counts.push_back(int32_t(rest / (E - 1) + (e <= rest % (E - 1) ? 1 : 0)));
    p.maxRows = R;
    p.rowStep = 97;
    p.mStep = 61;
    p.time = true;
    runProblem(p);
  }
  std::printf(
      "\n| stage | v2 ms (TFLOP/s) | wgmma r1 ms (TFLOP/s) | wgmma r2 ms (TFLOP/s) | r2 vs r1 |"
      "\n|---|---|---|---|---|\n");
  for (const TableRow& t : gTable)
    std::printf("| %s | %.3f (%.0f) | %.3f (%.0f) | %.3f (%.0f) | %.2fx |\n", t.name.c_str(),
                t.v2Ms, t.flops / t.v2Ms / 1e9, t.wgMs, t.flops / t.wgMs / 1e9, t.r2Ms,
                t.flops / t.r2Ms / 1e9, t.wgMs / t.r2Ms);
  std::printf("\n%s\n", gAllPass ? "ALL PASS" : "SOME FAIL");
  return gAllPass ? 0 : 1;
}
