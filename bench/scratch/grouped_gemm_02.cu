// Grouped expert GEMMs, round 2: mainloop v2 (engine/ops/experts/grouped_gemm_v2_cuda.cuh:
// 128 x 128 CTA tiles of 4 warps at 64 x 64, K step 64, 3-stage cp.async into XOR-swizzled shared
// memory, fragments double-buffered, epilogues staged through shared memory with 16-byte stores)
// against round 1's v1 kernels (engine/ops/experts/grouped_gemm_cuda.cuh, 128 x 128 tiles of 8
// warps at 64 x 32, the engine's round-1 configuration "nb1"). Both headers are the engine's.
// Checks every stage of both versions against an fp32 device reference (awkward small shapes, then
// the benchmark shape on sampled rows), checks v2 bitwise against v1 (same k16 accumulation order
// and epilogue arithmetic; dRowWeight to 1e-5: different fixed reduction order), then times each
// stage at T=16384 D=2048 E=64 k=8 F=1024 (R = 131072 rows), balanced and skewed routing (max/mean
// load 8), plus one dense cuBLAS GEMM of fc1's size.
// Build:
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90,code=sm_90 -lineinfo -Xptxas -v -lcublas \
//        -I/work/main/engine -o /work/main/.scratch/bin/grouped_gemm_02 \
//        bench/scratch/grouped_gemm_02.cu
// Run: .scratch/bin/grouped_gemm_02   (no arguments; exit 1 on any FAIL or CUDA error)
#include <cublas_v2.h>
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
#ifdef MOEWB_GROUPED_WGMMA
#include "grouped_gemm_wgmma_cuda.cuh"  // sm_90a, not in the engine yet
namespace gw = moewb::engine::cuda::grouped::wg;
// Variants of this binary: v2 and v3 (= v2 with the wgmma mainloop for gate+up and down).
static const int kVariants[] = {2, 3};
#else
// Variants of this binary: v1 (round 1) and v2.
static const int kVariants[] = {1, 2};
#endif

namespace gg = moewb::engine::cuda::grouped;
namespace g2 = moewb::engine::cuda::grouped::v2;
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
#define CKB(x)                                                    \
  do {                                                            \
    if ((x) != CUBLAS_STATUS_SUCCESS) {                           \
      std::printf("cuBLAS error at %s:%d\n", __FILE__, __LINE__); \
      std::exit(1);                                               \
    }                                                             \
  } while (0)

static bool gAllPass = true;

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
__global__ void fillF32(float* p, int64_t n, uint64_t seed, float scale) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    p[i] = scale * hashUniform(i, seed);
}

// ref[r][n] = sum_k A1[idx(r)][k] W1(e, k, n) (+ A2[r][k] W2(e, k, n)) for rows r % rowStep == 0
// (r < R); W stored [E][N][K] (nk) or [E][K][N] (!nk). Other rows untouched.
__global__ void refRowGemm(const bf16* a1, const bf16* a2, const int32_t* idx, const bf16* w1,
                           const bf16* w2, bool nk, const int32_t* rowExpert, int64_t rows,
                           int rowStep, int64_t kSize, int64_t nSize, float* ref) {
  const int64_t n = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  const int64_t r = int64_t(blockIdx.y) * rowStep;
  if (n >= nSize || r >= rows) return;
  const int64_t e = rowExpert[r];
  const int64_t src = idx != nullptr ? idx[r] : r;
  float acc = 0.0f;
  for (int part = 0; part < (a2 != nullptr ? 2 : 1); ++part) {
    const bf16* a = part == 0 ? a1 + src * kSize : a2 + r * kSize;
    const bf16* w = (part == 0 ? w1 : w2) + e * kSize * nSize;
    for (int64_t k = 0; k < kSize; ++k) {
      const float wv = __bfloat162float(nk ? w[n * kSize + k] : w[k * nSize + n]);
      acc += __bfloat162float(a[k]) * wv;
    }
  }
  ref[r * nSize + n] = acc;
}

// ref[e][m][n] = sum_{r in e} A[r][m] B[idx(r)][n] for m % mStep == 0.
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
  std::vector<T> h(n);
  CK(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
  return h;
}
static void fill(bf16* p, int64_t n, uint64_t seed, float scale) {
  fillBf16<<<1024, 256>>>(p, n, seed, scale);
  CK(cudaGetLastError());
}
static float sigm(float x) {
  return 1.0f / (1.0f + std::exp(-x));
}

struct ErrAcc {
  double num = 0, den = 0;
  void add(double got, double want) {
    num += (got - want) * (got - want);
    den += want * want;
  }
  double err() const { return den > 0 ? std::sqrt(num / den) : (num > 0 ? 1e30 : 0.0); }
};

static void report(const std::string& name, const std::string& shape, double ms, double flops,
                   double err, double tol) {
  const bool pass = err < tol && std::isfinite(err);
  if (!pass) gAllPass = false;
  std::printf("RESULT name=%s shape=%s ms=%.4f tflops=%.1f err=%.3e status=%s\n", name.c_str(),
              shape.c_str(), ms, ms > 0 ? flops / ms / 1e9 : 0.0, err, pass ? "PASS" : "FAIL");
}

struct Problem {
  std::string name;
  int64_t n = 0, d = 0, f = 0, maxRows = 0;
  std::vector<int32_t> counts;
  bool gather = true;
  int rowStep = 1, mStep = 1;  // reference sampling
  bool time = false;
  int v = 2;  // 1 (round 1, 128 x 128 tiles "nb1"), 2 (grouped_gemm_v2), 3 (v2 + wgmma fc1 / fc2)
};

struct TableRow {
  std::string name;
  double ms, tflops;
};
static std::vector<TableRow> gTable;

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

static void runProblem(const Problem& p) {
  const int64_t E = int64_t(p.counts.size()), D = p.d, F = p.f, maxRows = p.maxRows;
  std::vector<int32_t> offsets(E + 1, 0), rowExpert(maxRows, 0), gidx(maxRows, 0);
  for (int64_t e = 0; e < E; ++e) offsets[e + 1] = offsets[e] + p.counts[e];
  const int64_t R = offsets[E];
  if (R > maxRows) {
    std::printf("bad problem\n");
    std::exit(1);
  }
  for (int64_t e = 0; e < E; ++e)
    for (int64_t j = 0; j < p.counts[e]; ++j) {
      const int64_t r = offsets[e] + j;
      rowExpert[r] = int32_t(e);
      gidx[r] = int32_t(std::min<int64_t>(p.n - 1, (j * p.n) / p.counts[e] + (e * 7) % 3));
    }
  const int64_t xRows = p.gather ? p.n : maxRows;
  const std::string tag = p.name + " v" + std::to_string(p.v);
  const std::string shape = p.name + "_v" + std::to_string(p.v) + "_E" + std::to_string(E) + "_D" +
                            std::to_string(D) + "_F" + std::to_string(F) + "_R" + std::to_string(R);
  // Device buffers.
  bf16 *x, *wg, *wu, *wd, *g, *u, *h, *y, *dY, *dg, *du, *dx;
  float *gradG, *gradU, *gradD, *ref, *ref2;
  int32_t *dOffsets, *dRowExpert, *dIdx, *tileStart, *dOrder;
  const int64_t wSize = E * F * D, rf = maxRows * F, rd = maxRows * D;
  CK(cudaMalloc(&x, xRows * D * 2));
  CK(cudaMalloc(&wg, wSize * 2));
  CK(cudaMalloc(&wu, wSize * 2));
  CK(cudaMalloc(&wd, wSize * 2));
  for (bf16** q : {&g, &u, &h, &dg, &du}) CK(cudaMalloc(q, rf * 2));
  for (bf16** q : {&y, &dY, &dx}) CK(cudaMalloc(q, rd * 2));
  for (float** q : {&gradG, &gradU, &gradD}) CK(cudaMalloc(q, wSize * 4));
  const int64_t refSize = std::max(std::max(rf, rd), wSize);
  CK(cudaMalloc(&ref, refSize * 4));
  CK(cudaMalloc(&ref2, refSize * 4));
  CK(cudaMalloc(&dOffsets, (E + 1) * 4));
  CK(cudaMalloc(&tileStart, (E + 1) * 4));
  CK(cudaMalloc(&dOrder, E * 4));
  CK(cudaMalloc(&dRowExpert, maxRows * 4));
  CK(cudaMalloc(&dIdx, maxRows * 4));
  CK(cudaMemcpy(dOffsets, offsets.data(), (E + 1) * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dRowExpert, rowExpert.data(), maxRows * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dIdx, gidx.data(), maxRows * 4, cudaMemcpyHostToDevice));
  const float in = 1.0f / std::sqrt(float(D)), hid = 1.0f / std::sqrt(float(F));
  fill(x, xRows * D, 11, 1.0f);
  fill(wg, wSize, 12, 2.0f * in);
  fill(wu, wSize, 13, 2.0f * in);
  fill(wd, wSize, 14, 2.0f * hid);
  fill(dY, rd, 15, 1.0f);
  for (bf16* q : {g, u, h, dg, du}) CK(cudaMemset(q, 0xFF, rf * 2));  // NaN poison
  for (bf16* q : {y, dx}) CK(cudaMemset(q, 0xFF, rd * 2));
  fillF32<<<1024, 256>>>(gradG, wSize, 16, 0.5f);
  fillF32<<<1024, 256>>>(gradU, wSize, 17, 0.5f);
  fillF32<<<1024, 256>>>(gradD, wSize, 18, 0.5f);
  CK(cudaGetLastError());
  const int32_t* xIdx = p.gather ? dIdx : nullptr;
  GluDeviceParams glu;  // SwiGLU

  const unsigned slots = unsigned(maxRows / gg::kBM + E);
  auto tilesOf = [](int64_t v, int t) { return unsigned((v + t - 1) / t); };
  const cudaFuncAttribute kSmemAttr = cudaFuncAttributeMaxDynamicSharedMemorySize;
  CK(cudaFuncSetAttribute(gg::grouped_fwd_gate_up_kernel, kSmemAttr, gg::FwdSmem::kBytes));
  CK(cudaFuncSetAttribute(gg::grouped_fwd_down_kernel<1>, kSmemAttr, gg::DownSmem<1>::kBytes));
  CK(cudaFuncSetAttribute(gg::grouped_bwd_rowweight_kernel<1>, kSmemAttr, gg::DownSmem<1>::kBytes));
  CK(cudaFuncSetAttribute(gg::grouped_bwd_dh_kernel<1>, kSmemAttr, gg::DgradSmem<1>::kBytes));
  CK(cudaFuncSetAttribute(gg::grouped_bwd_dx_kernel<1>, kSmemAttr, gg::DgradSmem<1>::kBytes));
  CK(cudaFuncSetAttribute(gg::grouped_wgrad_kernel<1>, kSmemAttr, gg::WgradSmem<1>::kBytes));
  for (const void* k :
       {(const void*)g2::grouped_fwd_gate_up_kernel, (const void*)g2::grouped_fwd_down_kernel,
        (const void*)g2::grouped_bwd_rowweight_kernel, (const void*)g2::grouped_bwd_dh_kernel,
        (const void*)g2::grouped_bwd_dx_kernel, (const void*)g2::grouped_wgrad_kernel})
    CK(cudaFuncSetAttribute(k, kSmemAttr, g2::kSmemBytes));
#ifdef MOEWB_GROUPED_WGMMA
  CK(cudaFuncSetAttribute(gw::grouped_fwd_gate_up_kernel, kSmemAttr, gw::kSmemBytes));
  CK(cudaFuncSetAttribute(gw::grouped_fwd_down_kernel, kSmemAttr, gw::kSmemBytes));
#endif
  // Version of the kernels the lambdas launch (the cross-check below switches it to 1).
  int ver = p.v;
  const unsigned tileN = 128;  // output columns per CTA after gate+up (both versions)
  auto sched = [&] {
    gg::grouped_schedule_kernel<<<1, 32>>>(dOffsets, int(E), gg::kBM, tileStart);
    gg::grouped_expert_order_kernel<<<1, 1024>>>(dOffsets, int(E), dOrder);
  };
  auto fc1 = [&] {
    if (ver == 1) {
      gg::grouped_fwd_gate_up_kernel<<<dim3(tilesOf(F, gg::kBN), slots), gg::kThreads,
                                       gg::FwdSmem::kBytes>>>(x, xIdx, wg, wu, D, F, dOffsets,
                                                              tileStart, int(E), glu, g, u, h);
    } else if (ver == 3) {
#ifdef MOEWB_GROUPED_WGMMA
      gw::grouped_fwd_gate_up_kernel<<<dim3(tilesOf(F, g2::kGateUpCols), slots), gw::kThreads,
                                       gw::kSmemBytes>>>(x, xIdx, wg, wu, D, F, dOffsets, tileStart,
                                                         int(E), glu, g, u, h);
#endif
    } else {
      g2::grouped_fwd_gate_up_kernel<<<dim3(tilesOf(F, g2::kGateUpCols), slots), g2::kThreads,
                                       g2::kSmemBytes>>>(x, xIdx, wg, wu, D, F, dOffsets, tileStart,
                                                         int(E), glu, g, u, h);
    }
  };
  auto fc2w = [&](const float* rw, bf16* out) {
    const dim3 grid(tilesOf(D, tileN), slots);
    if (ver == 1) {
      gg::grouped_fwd_down_kernel<1><<<grid, gg::kThreads, gg::DownSmem<1>::kBytes>>>(
          h, wd, D, F, dOffsets, tileStart, int(E), rw, out);
    } else if (ver == 3) {
#ifdef MOEWB_GROUPED_WGMMA
      gw::grouped_fwd_down_kernel<<<grid, gw::kThreads, gw::kSmemBytes>>>(
          h, wd, D, F, dOffsets, tileStart, int(E), rw, out);
#endif
    } else {
      g2::grouped_fwd_down_kernel<<<grid, g2::kThreads, g2::kSmemBytes>>>(
          h, wd, D, F, dOffsets, tileStart, int(E), rw, out);
    }
  };
  auto fc2 = [&] { fc2w(nullptr, y); };
  auto dh = [&] {
    const dim3 grid(tilesOf(F, tileN), slots);
    if (ver == 1) {
      gg::grouped_bwd_dh_kernel<1><<<grid, gg::kThreads, gg::DgradSmem<1>::kBytes>>>(
          dY, wd, D, F, dOffsets, tileStart, int(E), glu, g, u, dg, du);
    } else {
      g2::grouped_bwd_dh_kernel<<<grid, g2::kThreads, g2::kSmemBytes>>>(
          dY, wd, D, F, dOffsets, tileStart, int(E), glu, g, u, dg, du);
    }
  };
  auto dxs = [&] {
    const dim3 grid(tilesOf(D, tileN), slots);
    if (ver == 1) {
      gg::grouped_bwd_dx_kernel<1><<<grid, gg::kThreads, gg::DgradSmem<1>::kBytes>>>(
          dg, du, wg, wu, D, F, dOffsets, tileStart, int(E), dx);
    } else {
      g2::grouped_bwd_dx_kernel<<<grid, g2::kThreads, g2::kSmemBytes>>>(
          dg, du, wg, wu, D, F, dOffsets, tileStart, int(E), dx);
    }
  };
  const int32_t* order = dOrder;  // hot experts first (the engine's); null: blockIdx.z order
  auto wgrad = [&](const bf16* a, const bf16* b, const int32_t* idx, int64_t mSize, int64_t nSize,
                   float* grad) {
    const dim3 grid(tilesOf(nSize, tileN), tilesOf(mSize, gg::kBM), unsigned(E));
    if (ver == 1) {
      gg::grouped_wgrad_kernel<1><<<grid, gg::kThreads, gg::WgradSmem<1>::kBytes>>>(
          a, b, idx, mSize, nSize, dOffsets, order, grad);
    } else {
      g2::grouped_wgrad_kernel<<<grid, g2::kThreads, g2::kSmemBytes>>>(a, b, idx, mSize, nSize,
                                                                       dOffsets, order, grad);
    }
  };
  auto wgD = [&] { wgrad(dY, h, nullptr, D, F, gradD); };
  auto wgG = [&] { wgrad(dg, x, xIdx, F, D, gradG); };
  auto wgU = [&] { wgrad(du, x, xIdx, F, D, gradU); };
  // ---- correctness: one pass of every stage ----
  std::vector<float> baseG = toHost(gradG, wSize), baseU = toHost(gradU, wSize),
                     baseD = toHost(gradD, wSize);
  sched();
  fc1();
  fc2();
  dh();
  dxs();
  wgD();
  wgG();
  wgU();
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  const dim3 refBlock(128);
  auto rowGrid = [&](int64_t n) {
    return dim3(tilesOf(n, 128), unsigned((R + p.rowStep - 1) / p.rowStep));
  };
  auto sampledRows = [&](auto fn) {
    for (int64_t r = 0; r < R; r += p.rowStep) fn(r);
  };
  // Poison: rows >= R untouched, rows < R all finite (every element written).
  auto checkRows = [&](const char* what, const bf16* dptr, int64_t width) {
    std::vector<bf16> hv = toHost(dptr, maxRows * width);
    int64_t bad = 0;
    for (int64_t i = 0; i < maxRows * width; ++i) {
      uint16_t bits;
      std::memcpy(&bits, &hv[i], 2);
      const bool finite = (bits & 0x7F80) != 0x7F80;
      if (i < R * width ? !finite : bits != 0xFFFF) ++bad;
    }
    report(std::string("written_") + what, shape, 0, 0, double(bad), 0.5);
    return hv;
  };
  std::vector<bf16> hg = checkRows("gatePre", g, F), hu = checkRows("upPre", u, F),
                    hh = checkRows("hidden", h, F), hy = checkRows("y", y, D),
                    hdg = checkRows("dGate", dg, F), hdu = checkRows("dUp", du, F),
                    hdx = checkRows("dx", dx, D);
  if (R > 0) {
    // fc1.
    refRowGemm<<<rowGrid(F), refBlock>>>(x, nullptr, xIdx, wg, nullptr, true, dRowExpert, R,
                                         p.rowStep, D, F, ref);
    refRowGemm<<<rowGrid(F), refBlock>>>(x, nullptr, xIdx, wu, nullptr, true, dRowExpert, R,
                                         p.rowStep, D, F, ref2);
    CK(cudaGetLastError());
    std::vector<float> rg = toHost(ref, rf), ru = toHost(ref2, rf);
    ErrAcc eg, eu, eh;
    sampledRows([&](int64_t r) {
      for (int64_t c = 0; c < F; ++c) {
        const int64_t i = r * F + c;
        eg.add(bf(hg[i]), rg[i]);
        eu.add(bf(hu[i]), ru[i]);
        eh.add(bf(hh[i]), rg[i] * sigm(rg[i]) * ru[i]);
      }
    });
    report("check_fc1_gate", shape, 0, 0, eg.err(), 1e-2);
    report("check_fc1_up", shape, 0, 0, eu.err(), 1e-2);
    report("check_fc1_glu", shape, 0, 0, eh.err(), 1e-2);
    // fc2 from the kernel's h.
    refRowGemm<<<rowGrid(D), refBlock>>>(h, nullptr, nullptr, wd, nullptr, true, dRowExpert, R,
                                         p.rowStep, F, D, ref);
    CK(cudaGetLastError());
    std::vector<float> ry = toHost(ref, rd);
    ErrAcc ey;
    sampledRows([&](int64_t r) {
      for (int64_t c = 0; c < D; ++c) ey.add(bf(hy[r * D + c]), ry[r * D + c]);
    });
    report("check_fc2", shape, 0, 0, ey.err(), 1e-2);
    // dh = dY Wd (Wd [E, D, F] = [K][N]), then the GLU backward at the saved bf16 g, u.
    refRowGemm<<<rowGrid(F), refBlock>>>(dY, nullptr, nullptr, wd, nullptr, false, dRowExpert, R,
                                         p.rowStep, D, F, ref);
    CK(cudaGetLastError());
    std::vector<float> rdh = toHost(ref, rf);
    ErrAcc edg, edu;
    sampledRows([&](int64_t r) {
      for (int64_t c = 0; c < F; ++c) {
        const int64_t i = r * F + c;
        const float gv = bf(hg[i]), uv = bf(hu[i]), s = sigm(gv);
        edu.add(bf(hdu[i]), rdh[i] * gv * s);
        edg.add(bf(hdg[i]), rdh[i] * uv * (s + gv * s * (1.0f - s)));
      }
    });
    report("check_dh_dgate", shape, 0, 0, edg.err(), 1e-2);
    report("check_dh_dup", shape, 0, 0, edu.err(), 1e-2);
    // dx = dg Wg + du Wu (Wg [E, F, D] = [K][N]).
    refRowGemm<<<rowGrid(D), refBlock>>>(dg, du, nullptr, wg, wu, false, dRowExpert, R, p.rowStep,
                                         F, D, ref);
    CK(cudaGetLastError());
    std::vector<float> rdx = toHost(ref, rd);
    ErrAcc edx;
    sampledRows([&](int64_t r) {
      for (int64_t c = 0; c < D; ++c) edx.add(bf(hdx[r * D + c]), rdx[r * D + c]);
    });
    report("check_dx", shape, 0, 0, edx.err(), 1e-2);
  }
  // Weight gradients: got - base against the reference sum (sampled m), empty experts bitwise.
  auto checkWgrad = [&](const char* what, const bf16* a, const bf16* b, const int32_t* idx,
                        int64_t mSize, int64_t nSize, const float* grad,
                        const std::vector<float>& base) {
    CK(cudaMemset(ref, 0, wSize * 4));
    refWgrad<<<dim3(tilesOf(nSize, 128), unsigned((mSize + p.mStep - 1) / p.mStep), unsigned(E)),
               refBlock>>>(a, b, idx, dOffsets, mSize, nSize, p.mStep, ref);
    CK(cudaGetLastError());
    std::vector<float> rw = toHost(ref, wSize), got = toHost(grad, wSize);
    ErrAcc err;
    int64_t emptyBad = 0;
    for (int64_t e = 0; e < E; ++e) {
      for (int64_t m = 0; m < mSize; ++m) {
        for (int64_t n = 0; n < nSize; ++n) {
          const int64_t i = (e * mSize + m) * nSize + n;
          if (p.counts[e] == 0) {
            if (got[i] != base[i]) ++emptyBad;
          } else if (m % p.mStep == 0) {
            err.add(double(got[i]) - double(base[i]), rw[i]);
          }
        }
      }
    }
    report(std::string("check_") + what, shape, 0, 0, err.err(), 2e-3);
    report(std::string("empty_untouched_") + what, shape, 0, 0, double(emptyBad), 0.5);
  };
  // Folded combine (gathered problems): y * rowWeight in fc2's epilogue, the weighted dYPerm
  // pre-pass (bitwise) and dRowWeight = <dy[token(r)], bf16(h_r Wd^T)> (two kernels).
  float *rowW = nullptr, *partial = nullptr, *dRW = nullptr;
  bf16 *dyTok = nullptr, *dYW = nullptr, *yW = nullptr;
  const unsigned dTiles = tilesOf(D, tileN);
  auto rowWeightStage = [&] {
    if (ver == 1) {
      gg::grouped_bwd_rowweight_kernel<1>
          <<<dim3(dTiles, slots), gg::kThreads, gg::DownSmem<1>::kBytes>>>(
              h, wd, D, F, dOffsets, tileStart, int(E), dyTok, dIdx, maxRows, partial);
    } else {
      g2::grouped_bwd_rowweight_kernel<<<dim3(dTiles, slots), g2::kThreads, g2::kSmemBytes>>>(
          h, wd, D, F, dOffsets, tileStart, int(E), dyTok, dIdx, maxRows, partial);
    }
    gg::grouped_rowweight_sum_kernel<<<256, 256>>>(partial, int(dTiles), maxRows, dOffsets, int(E),
                                                   dRW);
  };
  if (p.gather && R > 0) {
    CK(cudaMalloc(&rowW, maxRows * 4));
    CK(cudaMalloc(&dRW, maxRows * 4));
    CK(cudaMalloc(&partial, int64_t(dTiles) * maxRows * 4));
    CK(cudaMalloc(&dyTok, p.n * D * 2));
    CK(cudaMalloc(&dYW, rd * 2));
    CK(cudaMalloc(&yW, rd * 2));
    fillF32<<<256, 256>>>(rowW, maxRows, 31, 1.0f);
    fill(dyTok, p.n * D, 32, 1.0f);
    CK(cudaMemset(dYW, 0xFF, rd * 2));
    CK(cudaMemset(dRW, 0xFF, maxRows * 4));
    fc2w(rowW, yW);
    gg::grouped_weighted_rows_kernel<<<256, 256>>>(dyTok, rowW, dIdx, dOffsets, int(E), D, dYW);
    rowWeightStage();
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    std::vector<float> hw = toHost(rowW, maxRows), hrw = toHost(dRW, maxRows);
    std::vector<bf16> hyw = toHost(yW, rd), hdyw = toHost(dYW, rd), hdt = toHost(dyTok, p.n * D);
    ErrAcc eyw, erw;
    int64_t weightedBad = 0;
    const int64_t wStep = R > 100000 ? 7 : 1;  // every 7th row at the benchmark shape
    for (int64_t r = 0; r < R; r += wStep) {
      const int64_t t = gidx[r];
      double dot = 0;
      for (int64_t c = 0; c < D; ++c) {
        const float want = bf(__float2bfloat16(hw[r] * bf(hdt[t * D + c])));
        if (bf(hdyw[r * D + c]) != want) ++weightedBad;
        dot += double(bf(hdt[t * D + c])) * double(bf(hy[r * D + c]));
        if (r % p.rowStep == 0) eyw.add(bf(hyw[r * D + c]), double(hw[r]) * bf(hy[r * D + c]));
      }
      erw.add(hrw[r], dot);
    }
    report("check_fc2_rowweight", shape, 0, 0, eyw.err(), 1e-2);
    report("bitwise_weighted_dy", shape, 0, 0, double(weightedBad), 0.5);
    report("check_drowweight", shape, 0, 0, erw.err(), 1e-4);
  }
  checkWgrad("wgrad_down", dY, h, nullptr, D, F, gradD, baseD);
  checkWgrad("wgrad_gate", dg, x, xIdx, F, D, gradG, baseG);
  checkWgrad("wgrad_up", du, x, xIdx, F, D, gradU, baseU);

  if (p.v >= 2 && R > 0) {
    // v2 against v1 on the same inputs: every output row bitwise (same k16 accumulation order and
    // epilogue arithmetic), the weight gradients bitwise (both added to the same base),
    // dRowWeight to 1e-5 (a different fixed reduction order). v3 (wgmma fc1 / fc2): relative
    // difference from v1 below 5e-3 (wgmma's rounding inside a k16 slice may differ).
    const std::vector<float> v2G = toHost(gradG, wSize), v2U = toHost(gradU, wSize),
                             v2D = toHost(gradD, wSize);
    std::vector<float> v2RW;
    std::vector<bf16> v2YW;
    if (rowW != nullptr) {
      v2RW = toHost(dRW, maxRows);
      v2YW = toHost(yW, rd);
    }
    fillF32<<<1024, 256>>>(gradG, wSize, 16, 0.5f);
    fillF32<<<1024, 256>>>(gradU, wSize, 17, 0.5f);
    fillF32<<<1024, 256>>>(gradD, wSize, 18, 0.5f);
    CK(cudaGetLastError());
    ver = 1;
    fc1();
    fc2();
    dh();
    dxs();
    wgD();
    wgG();
    wgU();
    if (rowW != nullptr) {
      fc2w(rowW, yW);
      rowWeightStage();
    }
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    ver = p.v;
    auto sameRows = [&](const char* what, const std::vector<bf16>& mine, const bf16* dptr,
                        int64_t width) {
      const std::vector<bf16> other = toHost(dptr, maxRows * width);
      int64_t bad = 0;
      ErrAcc e;
      if (std::memcmp(mine.data(), other.data(), size_t(R * width) * 2) != 0) {
        for (int64_t i = 0; i < R * width; ++i) {
          bad += std::memcmp(&mine[i], &other[i], 2) != 0;
          e.add(bf(mine[i]), bf(other[i]));
        }
      }
      if (p.v == 2) {
        report(std::string("bitwise_v1_") + what, shape, 0, 0, double(bad), 0.5);
      } else {
        report(std::string("vs_v1_") + what, shape, 0, 0, e.err(), 5e-3);
      }
    };
    auto sameGrad = [&](const char* what, const std::vector<float>& mine, const float* dptr) {
      const std::vector<float> other = toHost(dptr, wSize);
      int64_t bad = 0;
      ErrAcc e;
      if (std::memcmp(mine.data(), other.data(), size_t(wSize) * 4) != 0) {
        for (int64_t i = 0; i < wSize; ++i) {
          bad += std::memcmp(&mine[i], &other[i], 4) != 0;
          e.add(mine[i], other[i]);
        }
      }
      if (p.v == 2) {
        report(std::string("bitwise_v1_") + what, shape, 0, 0, double(bad), 0.5);
      } else {
        report(std::string("vs_v1_") + what, shape, 0, 0, e.err(), 5e-3);
      }
    };
    sameRows("gatePre", hg, g, F);
    sameRows("upPre", hu, u, F);
    sameRows("hidden", hh, h, F);
    sameRows("y", hy, y, D);
    sameRows("dGate", hdg, dg, F);
    sameRows("dUp", hdu, du, F);
    sameRows("dx", hdx, dx, D);
    sameGrad("wgrad_down", v2D, gradD);
    sameGrad("wgrad_gate", v2G, gradG);
    sameGrad("wgrad_up", v2U, gradU);
    if (rowW != nullptr) {
      sameRows("y_rowweight", v2YW, yW, D);
      const std::vector<float> v1RW = toHost(dRW, maxRows);
      ErrAcc e;
      for (int64_t r = 0; r < R; ++r) e.add(v2RW[r], v1RW[r]);
      report("v1_drowweight", shape, 0, 0, e.err(), p.v == 2 ? 1e-5 : 5e-3);
    }
  }
  if (p.time) {
    const double rdf = double(R) * D * F;
    const std::vector<std::pair<const char*, double>> names = {
        {"fc1_gate_up", 4 * rdf}, {"fc2_down", 2 * rdf},   {"dgrad_dh", 2 * rdf},
        {"dgrad_dx", 4 * rdf},    {"wgrad_down", 2 * rdf}, {"wgrad_gate", 2 * rdf},
        {"wgrad_up", 2 * rdf}};
    double total = 0;
    for (size_t s = 0; s < names.size(); ++s) {
      auto launch = [&] {
        switch (s) {
          case 0:
            fc1();
            break;
          case 1:
            fc2();
            break;
          case 2:
            dh();
            break;
          case 3:
            dxs();
            break;
          case 4:
            wgD();
            break;
          case 5:
            wgG();
            break;
          default:
            wgU();
            break;
        }
      };
      const double ms = timeMs(launch);
      total += ms;
      report(std::string("time_") + names[s].first, shape, ms, names[s].second, 0, 1);
      gTable.push_back({tag + " " + names[s].first, ms, names[s].second / ms / 1e9});
    }
    report("time_all_gemms", shape, total, 18 * rdf, 0, 1);
    gTable.push_back({tag + " all 7 stages", total, 18 * rdf / total / 1e9});
    order = nullptr;
    const double msU = timeMs(wgD);
    order = dOrder;
    report("time_wgrad_down_unordered", shape, msU, 2 * rdf, 0, 1);
    gTable.push_back({tag + " wgrad_down unordered", msU, 2 * rdf / msU / 1e9});
    if (rowW != nullptr) {
      const double ms = timeMs(rowWeightStage);
      report("time_drowweight_recompute", shape, ms, 2 * rdf, 0, 1);
      gTable.push_back({tag + " dRowWeight (+2RDF)", ms, 2 * rdf / ms / 1e9});
      const double msW = timeMs([&] {
        gg::grouped_weighted_rows_kernel<<<132 * 16, 256>>>(dyTok, rowW, dIdx, dOffsets, int(E), D,
                                                            dYW);
      });
      report("time_weighted_dy_prepass", shape, msW, 0, 0, 1);
      gTable.push_back({tag + " weighted dY pre-pass", msW, 0});
    }
  }
  for (void* q : {(void*)x,    (void*)wg,   (void*)wu,       (void*)wd,        (void*)g,
                  (void*)u,    (void*)h,    (void*)y,        (void*)dY,        (void*)dg,
                  (void*)du,   (void*)dx,   (void*)gradG,    (void*)gradU,     (void*)gradD,
                  (void*)ref,  (void*)ref2, (void*)dOffsets, (void*)tileStart, (void*)dRowExpert,
                  (void*)dIdx, (void*)rowW, (void*)dRW,      (void*)partial,   (void*)dyTok,
                  (void*)dYW,  (void*)yW,   (void*)dOrder})
    CK(cudaFree(q));
}

// Dense cuBLAS bf16 GEMM of fc1's size (M = R, N = 2 F, K = D): the ceiling on the day.
static void denseCeiling(int64_t m, int64_t n, int64_t k) {
  bf16 *a, *b, *c;
  CK(cudaMalloc(&a, m * k * 2));
  CK(cudaMalloc(&b, n * k * 2));
  CK(cudaMalloc(&c, m * n * 2));
  fill(a, m * k, 21, 1.0f);
  fill(b, n * k, 22, 0.02f);
  cublasHandle_t handle;
  CKB(cublasCreate(&handle));
  const float alpha = 1.0f, beta = 0.0f;
  // Row-major C[m, n] = A[m, k] B[n, k]^T  ==  column-major C^T = B A^T.
  auto launch = [&] {
    CKB(cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, int(n), int(m), int(k), &alpha, b,
                     CUDA_R_16BF, int(k), a, CUDA_R_16BF, int(k), &beta, c, CUDA_R_16BF, int(n),
                     CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  };
  const double ms = timeMs(launch);
  const std::string shape =
      "M" + std::to_string(m) + "_N" + std::to_string(n) + "_K" + std::to_string(k);
  report("time_dense_cublas", shape, ms, 2.0 * m * n * k, 0, 1);
  gTable.push_back({"dense cuBLAS (fc1 size)", ms, 2.0 * m * n * k / ms / 1e9});
  CKB(cublasDestroy(handle));
  CK(cudaFree(a));
  CK(cudaFree(b));
  CK(cudaFree(c));
}

int main() {
  // Awkward small shapes: empty experts, a 1-row expert, rows not multiples of 128, D and F not
  // multiples of 128 (nor of 32), padding rows past R.
  {
    Problem p;
    p.name = "small_gather";
    p.n = 200;
    p.d = 136;
    p.f = 88;
    p.counts = {0, 1, 130, 257, 0, 40};
    p.maxRows = 428 + 37;
    for (int v : kVariants) {
      p.v = v;
      runProblem(p);
    }
  }
  {
    Problem p;
    p.name = "small_plain";
    p.n = 0;
    p.d = 256;
    p.f = 128;
    p.counts = {128, 0, 300};
    p.maxRows = 428;
    p.gather = false;
    for (int v : kVariants) {
      p.v = v;
      runProblem(p);
    }
  }
  {
    Problem p;
    p.name = "tiny";
    p.n = 3;
    p.d = 8;
    p.f = 8;
    p.counts = {1, 0, 2};
    p.maxRows = 5;
    for (int v : kVariants) {
      p.v = v;
      runProblem(p);
    }
  }
  // Benchmark shape: T=16384, k=8, E=64, D=2048, F=1024.
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
    for (int v : kVariants) {
      p.v = v;
      runProblem(p);
    }
  }
  {
    Problem p;
    p.name = "skewed";
    p.n = T;
    p.d = 2048;
    p.f = 1024;
    // One expert at 8x the mean load, the rest share the remainder.
    p.counts.assign(E, 0);
    // The hot expert is the last one: blockIdx.z order would dispatch it last (the tail the
    // engine's expert order removes; time_wgrad_down_unordered shows the difference).
    p.counts[E - 1] = int32_t(8 * R / E);
    const int64_t rest = R - p.counts[E - 1];
    for (int64_t e = 0; e < E - 1; ++e)
      p.counts[e] = int32_t(rest / (E - 1) + (e < rest % (E - 1)));
    p.maxRows = R;
    p.rowStep = 97;
    p.mStep = 61;
    p.time = true;
    for (int v : kVariants) {
      p.v = v;
      runProblem(p);
    }
  }
  denseCeiling(R, 2 * 1024, 2048);
  std::printf("\n%-34s %10s %10s %8s %8s\n", "measurement", "ms", "TFLOP/s", "%600", "%775");
  for (const TableRow& t : gTable)
    std::printf("%-34s %10.4f %10.1f %7.0f%% %7.0f%%\n", t.name.c_str(), t.ms, t.tflops,
                100 * t.tflops / 600, 100 * t.tflops / 775);
  std::printf("\nOVERALL %s\n", gAllPass ? "PASS" : "FAIL");
  return gAllPass ? 0 : 1;
}
