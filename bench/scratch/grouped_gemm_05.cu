// Grouped expert GEMMs, round 5 (issue 14; design and predictions: grouped_gemm_05.md): the
// warp-specialized persistent wgmma kernels (engine/ops/experts/grouped_gemm_ws_cuda.cuh, "ws")
// against round 2 (grouped_gemm_wgmma_cuda.cuh, what the engine runs on compute capability 9.0),
// both the engine's headers, in one binary. Stages: forward gate+up with the gather prologue
// and GLU epilogue (fc1), forward down plain and row-weighted (fc2), dh with the GLU backward and
// dx (dgrad, weights read [K, N]). Each stage reads round 2's outputs of the stage before, so
// each comparison isolates one stage. Per problem: both variants against an fp32 reference
// (relative L2, max |error|; sampled rows at the benchmark shape), ws against round 2 on every
// row (max |difference| and the count of differing elements; bitwise_equal=yes|no is printed:
// equal bits are expected if wgmma's order within a k16 slice does not depend on N), ws bitwise
// run to run, rows >= R untouched (NaN poison kept). Problems: awkward shapes (ragged groups,
// empty and 1-row experts, D / F not multiples of 64, no gather), then T=16384 D=2048 E=64 k=8
// F=1024 (R = 131072) balanced and skewed (expert 0 at 8x the mean), timed per stage (median of
// 20) with TFLOP/s and the ratio round 2 / ws.
// Build (here or on the H200; about a minute):
//   nvcc -O3 -std=c++20 -gencode=arch=compute_90a,code=sm_90a -lineinfo -Xptxas -v \
//        -Iengine -Iengine/include -Ibase/include -o .scratch/bin/grouped_gemm_05 \
//        bench/scratch/grouped_gemm_05.cu
// Run: .scratch/bin/grouped_gemm_05 [small|sweep]   (exit 1 on any FAIL or CUDA error; `small`:
// the awkward shapes only, for compute-sanitizer; `sweep`: no skewed problem). Kernel variants:
// -D macros of grouped_gemm_ws_cuda.cuh (printed on the VARIANT line; grouped_gemm_05_sweep.sh).
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
#include "ops/experts/grouped_gemm_ws_cuda.cuh"

namespace gg = moewb::engine::cuda::grouped;
namespace g2 = moewb::engine::cuda::grouped::v2;
namespace gw = moewb::engine::cuda::grouped::wg;
namespace ws = moewb::engine::cuda::grouped::ws;
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

static void check(const std::string& name, const std::string& shape, const ErrAcc& e, double tol) {
  const bool pass = e.rel() < tol && std::isfinite(e.rel()) && std::isfinite(e.maxAbs);
  if (!pass) gAllPass = false;
  std::printf("RESULT name=%s shape=%s rel=%.3e maxabs=%.3e differ=%lld status=%s\n", name.c_str(),
              shape.c_str(), e.rel(), e.maxAbs, (long long)e.differ, pass ? "PASS" : "FAIL");
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
  int rowStep = 1;  // reference sampling (rows)
  bool time = false;
};

// Per-variant outputs (0: round 2, 1: ws).
struct Outputs {
  bf16 *g, *u, *h, *y, *yW, *dg, *du, *dx;
};
struct Snap {
  std::vector<bf16> g, u, h, y, yW, dg, du, dx;
};

struct TableRow {
  std::string name;
  double r2Ms, wsMs, flops;
};
static std::vector<TableRow> gTable;
static int gSms = 132;

static bool sameBits(const std::vector<bf16>& a, const std::vector<bf16>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(bf16)) == 0;
}

template <ws::Stage kS>
static void launchWs(ws::Params prm) {
#if MOEWB_WS_TMA_B
  CK(ws::encodeWeightMaps<kS>(prm));  // B's TMA maps (a few microseconds of host time)
#endif
  ws::grouped_ws_kernel<kS><<<gSms, ws::kThreads, ws::kSmemBytes>>>(prm);
}

static void runProblem(const Problem& p) {
  const int64_t E = int64_t(p.counts.size()), D = p.d, F = p.f, maxRows = p.maxRows;
  std::vector<int32_t> offsets(E + 1, 0), rowExpert(maxRows, 0), gidx(maxRows, 0);
  for (int64_t e = 0; e < E; ++e) offsets[e + 1] = offsets[e] + p.counts[e];
  const int64_t R = offsets[E];
  const int64_t nTok = p.gather ? p.n : maxRows;
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
  bf16 *x, *wg, *wu, *wd, *dY;
  float *rowW, *ref, *ref2;
  int32_t *dOffsets, *dRowExpert, *dIdx, *tileStart;
  CK(cudaMalloc(&x, nTok * D * 2));
  CK(cudaMalloc(&dY, rd * 2));
  CK(cudaMalloc(&wg, wSize * 2));
  CK(cudaMalloc(&wu, wSize * 2));
  CK(cudaMalloc(&wd, wSize * 2));
  CK(cudaMalloc(&rowW, maxRows * 4));
  CK(cudaMalloc(&ref, std::max(rf, rd) * 4));
  CK(cudaMalloc(&ref2, std::max(rf, rd) * 4));
  CK(cudaMalloc(&dOffsets, (E + 1) * 4));
  CK(cudaMalloc(&tileStart, (E + 1) * 4));
  CK(cudaMalloc(&dRowExpert, maxRows * 4));
  CK(cudaMalloc(&dIdx, maxRows * 4));
  Outputs out[2];
  auto poison = [&](Outputs& o) {
    for (bf16* q : {o.g, o.u, o.h, o.dg, o.du}) CK(cudaMemset(q, 0xFF, rf * 2));  // NaN
    for (bf16* q : {o.y, o.yW, o.dx}) CK(cudaMemset(q, 0xFF, rd * 2));
  };
  for (Outputs& o : out) {
    for (bf16** q : {&o.g, &o.u, &o.h, &o.dg, &o.du}) CK(cudaMalloc(q, rf * 2));
    for (bf16** q : {&o.y, &o.yW, &o.dx}) CK(cudaMalloc(q, rd * 2));
    poison(o);
  }
  CK(cudaMemcpy(dOffsets, offsets.data(), (E + 1) * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dRowExpert, rowExpert.data(), maxRows * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dIdx, gidx.data(), maxRows * 4, cudaMemcpyHostToDevice));
  const float in = 1.0f / std::sqrt(float(D)), hid = 1.0f / std::sqrt(float(F));
  fill(x, nTok * D, 11, 1.0f);
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
  gg::grouped_schedule_kernel<<<1, 32>>>(dOffsets, int(E), gg::kBM, tileStart);
  CK(cudaGetLastError());
  ws::Params base;
  base.d = D;
  base.f = F;
  base.offsets = dOffsets;
  base.tileStart = tileStart;
  base.numExperts = int(E);
  base.glu = glu;
  // Launchers: variant v (0 round 2, 1 ws) into out[v]; inputs after fc1 are round 2's outputs.
  const Outputs& in2 = out[0];
  auto fc1 = [&](int v) {
    Outputs& o = out[v];
    if (v == 0) {
      const dim3 grid(tilesOf(F, g2::kGateUpCols), slots);
      gw::grouped_fwd_gate_up_kernel<<<grid, gw::kThreads, gw::kSmemBytes>>>(
          x, xIdx, wg, wu, D, F, dOffsets, tileStart, int(E), glu, o.g, o.u, o.h);
      return;
    }
    ws::Params prm = base;
    prm.a1 = x;
    prm.gather = xIdx;
    prm.b1 = wg;
    prm.b2 = wu;
    prm.out1 = o.g;
    prm.out2 = o.u;
    prm.out3 = o.h;
    launchWs<ws::Stage::kGateUp>(prm);
  };
  auto fc2 = [&](int v, const float* rw) {
    Outputs& o = out[v];
    bf16* y = rw != nullptr ? o.yW : o.y;
    if (v == 0) {
      const dim3 grid(tilesOf(D, g2::kBN), slots);
      gw::grouped_fwd_down_kernel<<<grid, gw::kThreads, gw::kSmemBytes>>>(in2.h, wd, D, F, dOffsets,
                                                                          tileStart, int(E), rw, y);
      return;
    }
    ws::Params prm = base;
    prm.a1 = in2.h;
    prm.b1 = wd;
    prm.rowWeight = rw;
    prm.out1 = y;
    launchWs<ws::Stage::kDown>(prm);
  };
  auto dh = [&](int v) {
    Outputs& o = out[v];
    if (v == 0) {
      const dim3 grid(tilesOf(F, g2::kBN), slots);
      gw::grouped_bwd_dh_kernel<<<grid, gw::kThreads, gw::kSmemBytes>>>(
          dY, wd, D, F, dOffsets, tileStart, int(E), glu, in2.g, in2.u, o.dg, o.du);
      return;
    }
    ws::Params prm = base;
    prm.a1 = dY;
    prm.b1 = wd;
    prm.gatePre = in2.g;
    prm.upPre = in2.u;
    prm.out1 = o.dg;
    prm.out2 = o.du;
    launchWs<ws::Stage::kDh>(prm);
  };
  auto dxs = [&](int v) {
    Outputs& o = out[v];
    if (v == 0) {
      const dim3 grid(tilesOf(D, g2::kBN), slots);
      gw::grouped_bwd_dx_kernel<<<grid, gw::kThreads, gw::kSmemBytes>>>(
          in2.dg, in2.du, wg, wu, D, F, dOffsets, tileStart, int(E), o.dx);
      return;
    }
    ws::Params prm = base;
    prm.a1 = in2.dg;
    prm.a2 = in2.du;
    prm.b1 = wg;
    prm.b2 = wu;
    prm.out1 = o.dx;
    launchWs<ws::Stage::kDx>(prm);
  };
  auto runAll = [&](int v) {
    fc1(v);
    if (v == 0) CK(cudaDeviceSynchronize());  // round 2's h: fc2's input
    fc2(v, nullptr);
    fc2(v, rowW);
    dh(v);
    if (v == 0) CK(cudaDeviceSynchronize());  // round 2's dg, du: dx's input
    dxs(v);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
  };
  runAll(0);
  runAll(1);

  // ---- checks ----
  auto snap = [&](const Outputs& o) {
    return Snap{toHost(o.g, rf),  toHost(o.u, rf),  toHost(o.h, rf),  toHost(o.y, rd),
                toHost(o.yW, rd), toHost(o.dg, rf), toHost(o.du, rf), toHost(o.dx, rd)};
  };
  const Snap s2 = snap(out[0]), s5 = snap(out[1]);
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
    refRowGemmNK<<<grid(D), blk>>>(in2.h, nullptr, wd, dRowExpert, R, p.rowStep, F, D, ref);
    CK(cudaGetLastError());
    ry = toHost(ref, rd);
    refRowGemmKN<<<grid(F), blk>>>(dY, nullptr, wd, nullptr, dRowExpert, R, p.rowStep, D, F, ref);
    CK(cudaGetLastError());
    rdh = toHost(ref, rf);
    refRowGemmKN<<<grid(D), blk>>>(in2.dg, in2.du, wg, wu, dRowExpert, R, p.rowStep, F, D, ref);
    CK(cudaGetLastError());
    rdx = toHost(ref, rd);
  }
  const std::vector<float> hRowW = toHost(rowW, maxRows);
  for (int v : {0, 1}) {
    const Snap& s = v == 0 ? s2 : s5;
    const std::string tag = v == 0 ? "r2_" : "ws_";
    ErrAcc eg, eu, eh, ey, eyw, edg, edu, edx;
    for (int64_t r = 0; r < R; r += p.rowStep) {
      for (int64_t c = 0; c < F; ++c) {
        const int64_t i = r * F + c;
        eg.add(bf(s.g[i]), rg[i]);
        eu.add(bf(s.u[i]), ru[i]);
        eh.add(bf(s.h[i]), silu(rg[i]) * ru[i]);
        const float gv = bf(s2.g[i]), uv = bf(s2.u[i]), sg = sigm(gv);  // dh's inputs
        edu.add(bf(s.du[i]), rdh[i] * gv * sg);
        edg.add(bf(s.dg[i]), rdh[i] * uv * (sg + gv * sg * (1.0f - sg)));
      }
      for (int64_t c = 0; c < D; ++c) {
        const int64_t i = r * D + c;
        ey.add(bf(s.y[i]), ry[i]);
        eyw.add(bf(s.yW[i]), double(hRowW[r]) * ry[i]);
        edx.add(bf(s.dx[i]), rdx[i]);
      }
    }
    if (R > 0) {
      check(tag + "fc1_gate", shape, eg, 1e-2);
      check(tag + "fc1_up", shape, eu, 1e-2);
      check(tag + "fc1_glu", shape, eh, 1e-2);
      check(tag + "fc2", shape, ey, 1e-2);
      check(tag + "fc2_rowweight", shape, eyw, 1e-2);
      check(tag + "dh_dgate", shape, edg, 1e-2);
      check(tag + "dh_dup", shape, edu, 1e-2);
      check(tag + "dx", shape, edx, 1e-2);
    }
    int64_t bad = 0;  // rows < R finite, rows >= R still the 0xFFFF poison
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
  // ws against round 2 on every row: rel, max |difference|, differing elements, bitwise equal.
  auto vsR2 = [&](const char* what, const std::vector<bf16>& a, const std::vector<bf16>& b,
                  int64_t width) {
    ErrAcc e;
    for (int64_t i = 0; i < R * width; ++i) e.add(bf(a[i]), bf(b[i]));
    check(std::string("ws_vs_r2_") + what, shape, e, 5e-3);
    std::printf("RESULT name=ws_vs_r2_bitwise_%s shape=%s bitwise_equal=%s differ=%lld\n", what,
                shape.c_str(), e.differ == 0 ? "yes" : "no", (long long)e.differ);
  };
  vsR2("gatePre", s5.g, s2.g, F);
  vsR2("upPre", s5.u, s2.u, F);
  vsR2("hidden", s5.h, s2.h, F);
  vsR2("y", s5.y, s2.y, D);
  vsR2("y_rowweight", s5.yW, s2.yW, D);
  vsR2("dGate", s5.dg, s2.dg, F);
  vsR2("dUp", s5.du, s2.du, F);
  vsR2("dx", s5.dx, s2.dx, D);
  {  // ws run to run (fresh poison first)
    poison(out[1]);
    runAll(1);
    const Snap again = snap(out[1]);
    const bool same = sameBits(again.g, s5.g) && sameBits(again.u, s5.u) &&
                      sameBits(again.h, s5.h) && sameBits(again.y, s5.y) &&
                      sameBits(again.yW, s5.yW) && sameBits(again.dg, s5.dg) &&
                      sameBits(again.du, s5.du) && sameBits(again.dx, s5.dx);
    checkCount("ws_bitwise_rerun", shape, same ? 0 : 1);
  }

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
                            {"dgrad_dh", 2 * rdf, 3},
                            {"dgrad_dx", 4 * rdf, 4}};
    for (const Stage& st : stages) {
      double ms[2];
      for (int v : {0, 1}) {
        ms[v] = timeMs([&] {
          if (st.which == 0) fc1(v);
          if (st.which == 1) fc2(v, nullptr);
          if (st.which == 2) fc2(v, rowW);
          if (st.which == 3) dh(v);
          if (st.which == 4) dxs(v);
        });
        std::printf("RESULT name=time_%s_%s shape=%s ms=%.4f tflops=%.1f\n", v == 0 ? "r2" : "ws",
                    st.name, shape.c_str(), ms[v], st.flops / ms[v] / 1e9);
      }
      gTable.push_back({p.name + " " + st.name, ms[0], ms[1], st.flops});
    }
  }
  for (void* q : {(void*)x, (void*)dY, (void*)wg, (void*)wu, (void*)wd, (void*)rowW, (void*)ref,
                  (void*)ref2, (void*)dOffsets, (void*)tileStart, (void*)dRowExpert, (void*)dIdx})
    CK(cudaFree(q));
  for (Outputs& o : out)
    for (void* q : {(void*)o.g, (void*)o.u, (void*)o.h, (void*)o.y, (void*)o.yW, (void*)o.dg,
                    (void*)o.du, (void*)o.dx})
      CK(cudaFree(q));
}

int main(int argc, char** argv) {
  const bool smallOnly = argc > 1 && std::strcmp(argv[1], "small") == 0;  // sanitizer runs
  // `sweep`: the awkward shapes and the balanced benchmark shape only (grouped_gemm_05_sweep.sh)
  const bool sweep = argc > 1 && std::strcmp(argv[1], "sweep") == 0;
  std::printf(
      "VARIANT stages=%d producer=%d release=%d dh_chunk=%d epi_prefetch=%d tma_b=%d "
      "regs=%d/%d\n",
      ws::kStages, MOEWB_WS_PRODUCER, MOEWB_WS_RELEASE, ws::kDhChunk, MOEWB_WS_EPI_PREFETCH,
      MOEWB_WS_TMA_B, ws::kProducerRegs, ws::kConsumerRegs);
  int device = 0;
  cudaDeviceProp prop{};
  CK(cudaGetDevice(&device));
  CK(cudaGetDeviceProperties(&prop, device));
  std::printf("device %s, compute capability %d.%d, %d SMs\n", prop.name, prop.major, prop.minor,
              prop.multiProcessorCount);
  if (prop.major != 9 || prop.minor != 0) {
    std::printf("FAIL: the wgmma kernels need compute capability 9.0 (sm_90a)\n");
    return 1;
  }
  gSms = prop.multiProcessorCount;
  const cudaFuncAttribute kSmemAttr = cudaFuncAttributeMaxDynamicSharedMemorySize;
  for (const void* k :
       {(const void*)gw::grouped_fwd_gate_up_kernel, (const void*)gw::grouped_fwd_down_kernel,
        (const void*)gw::grouped_bwd_dh_kernel, (const void*)gw::grouped_bwd_dx_kernel})
    CK(cudaFuncSetAttribute(k, kSmemAttr, gw::kSmemBytes));
  for (const void* k : {(const void*)ws::grouped_ws_kernel<ws::Stage::kGateUp>,
                        (const void*)ws::grouped_ws_kernel<ws::Stage::kDown>,
                        (const void*)ws::grouped_ws_kernel<ws::Stage::kDh>,
                        (const void*)ws::grouped_ws_kernel<ws::Stage::kDx>})
    CK(cudaFuncSetAttribute(k, kSmemAttr, ws::kSmemBytes));
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
    Problem p;  // no gather, 1.03 ws column tiles, whole + partial K tiles, an empty expert
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
  {
    Problem p;  // more tiles than CTAs on small shapes: the persistent loop's wrap-around
    p.name = "many_tiles";
    p.n = 3000;
    p.d = 520;
    p.f = 264;
    for (int e = 0; e < 40; ++e) p.counts.push_back(e % 7 == 3 ? 0 : 97 + 61 * (e % 5));
    p.maxRows = 12000;
    p.rowStep = 7;
    runProblem(p);
  }
  const int64_t T = 16384, E = 64, K = 8, R = T * K;
  if (smallOnly) {
    std::printf("\n%s\n", gAllPass ? "ALL PASS" : "SOME FAIL");
    return gAllPass ? 0 : 1;
  }
  {
    Problem p;
    p.name = "balanced";
    p.n = T;
    p.d = 2048;
    p.f = 1024;
    p.counts.assign(E, int32_t(R / E));
    p.maxRows = R;
    p.rowStep = 97;
    p.time = true;
    runProblem(p);
  }
  if (!sweep) {
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
    p.time = true;
    runProblem(p);
  }
  std::printf(
      "\n| stage | round 2 ms (TFLOP/s) | ws ms (TFLOP/s) | r2 / ws |\n"
      "|---|---|---|---|\n");
  for (const TableRow& t : gTable)
    std::printf("| %s | %.3f (%.0f) | %.3f (%.0f) | %.2fx |\n", t.name.c_str(), t.r2Ms,
                t.flops / t.r2Ms / 1e9, t.wsMs, t.flops / t.wsMs / 1e9, t.r2Ms / t.wsMs);
  std::printf("\n%s\n", gAllPass ? "ALL PASS" : "SOME FAIL");
  return gAllPass ? 0 : 1;
}
