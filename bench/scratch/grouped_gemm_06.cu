// Grouped expert weight gradients, round 6 (issue 14; design and predictions: grouped_gemm_06.md):
// the warp-specialized persistent kernel (engine/ops/experts/grouped_gemm_ws_wgrad_cuda.cuh, "ws")
// against round 2's grouped_wgrad_prefetch_kernel (grouped_gemm_wgmma_cuda.cuh, what the engine
// runs today), both the engine's headers, in one binary. The three weight gradients of the
// experts backward: dDown [E, D, F] += dY^T h, dGate / dUp [E, F, D] += dG^T x[gather] /
// dU^T x[gather], each into a gradient that already holds random values (the kernels add).
// Checks per gradient and problem: ws against round 2 on every element (count of differing bits,
// max |difference|: bitwise_equal=yes|no), both against an fp32-input double reference (old +
// sum over the expert's rows; relative L2 < 1e-2, every m row or sampled ones at the benchmark
// shape), ws bitwise run to run, empty experts' gradients bitwise untouched, no NaN / Inf, and
// ws's other paths (A by cp.async on every step; the dynamic tile walk; the engine's by-skew
// choice of walk, which must also pick the walk the host rule gives) bitwise equal to ws.
// Problems: awkward (experts of 0, 1, 37, 129 rows and more, D = 136, F = 88: M, N not multiples
// of the 128 x 256 tile nor K of the 64-deep step), awkward_plain (no gather), many_tiles (more
// tiles than CTAs), then T=16384 D=2048 E=64 k=8 F=1024 (R = 131072) balanced and skewed (expert
// 0 at 8x the mean, expert order most rows first as the engine's grouped_expert_order_kernel),
// timed per gradient (median of 20, cudaEvent) with TFLOP/s and the ratio round 2 / ws.
// Build (here or on the H200; about a minute):
//   nvcc -O3 -std=c++20 -gencode=arch=compute_90a,code=sm_90a -lineinfo -Xptxas -v \
//        -Iengine -Iengine/include -Ibase/include -o .scratch/bin/grouped_gemm_06 \
//        bench/scratch/grouped_gemm_06.cu
// Run: .scratch/bin/grouped_gemm_06 [small]   (exit 1 on any FAIL or CUDA error; `small`: the
// awkward shapes only, for compute-sanitizer). Variants: -D macros of
// grouped_gemm_ws_wgrad_cuda.cuh (printed on the VARIANT line).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "ops/experts/grouped_gemm_cuda.cuh"
#include "ops/experts/grouped_gemm_v2_cuda.cuh"
#include "ops/experts/grouped_gemm_wgmma_cuda.cuh"
#include "ops/experts/grouped_gemm_ws_cuda.cuh"
#include "ops/experts/grouped_gemm_ws_wgrad_cuda.cuh"

namespace gw = moewb::engine::cuda::grouped::wg;
namespace wsw = moewb::engine::cuda::grouped::wsw;
using bf16 = __nv_bfloat16;

#define CK(x)                                                                              \
  do {                                                                                     \
    cudaError_t e_ = (x);                                                                  \
    if (e_ != cudaSuccess) {                                                               \
      std::printf("CUDA error %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__); \
      std::exit(1);                                                                        \
    }                                                                                      \
  } while (0)

static bool gAllPass = true;
static int gSms = 132;

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

// Counts elements whose bits differ, the max |x - y| over them, and non-finite x.
struct DiffStats {
  unsigned long long differ, nonFinite;
  unsigned int maxAbsBits;  // a non-negative float's bits order as the float
};
__global__ void diffKernel(const float* x, const float* y, int64_t n, DiffStats* out) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const float a = x[i], b = y[i];
    if (!isfinite(a)) atomicAdd(&out->nonFinite, 1ull);
    if (__float_as_uint(a) != __float_as_uint(b)) {
      atomicAdd(&out->differ, 1ull);
      const float d = fabsf(a - b);
      atomicMax(&out->maxAbsBits, __float_as_uint(isfinite(d) ? d : INFINITY));
    }
  }
}

// For m rows m % mStep == 0 of every expert: want = old + sum over the expert's rows r of
// a[r][m] b[src(r)][n] in double, got = the kernel's value. Outputs indexed
// ((e * mSampled) + m / mStep) * nSize + n.
__global__ void refWgrad(const bf16* a, const bf16* b, const int32_t* bIndex,
                         const int32_t* offsets, int64_t mSize, int64_t nSize, int experts,
                         int mStep, const float* old, const float* got, double* want,
                         float* gotOut) {
  const int64_t mSampled = (mSize + mStep - 1) / mStep;
  const int64_t total = int64_t(experts) * mSampled * nSize;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t n = i % nSize, mi = (i / nSize) % mSampled, e = i / (nSize * mSampled);
    const int64_t m = mi * mStep;
    double s = 0;
    for (int64_t r = offsets[e]; r < offsets[e + 1]; ++r) {
      const int64_t src = bIndex != nullptr ? bIndex[r] : r;
      const double av = __bfloat162float(a[r * mSize + m]);
      s += av * double(__bfloat162float(b[src * nSize + n]));
    }
    const int64_t at = (e * mSize + m) * nSize + n;
    want[i] = double(old[at]) + s;
    gotOut[i] = got[at];
  }
}

// ---- host helpers ---------------------------------------------------------------------------
template <class T>
static std::vector<T> toHost(const T* d, int64_t n) {
  std::vector<T> h(size_t(std::max<int64_t>(n, 0)));
  if (n > 0) CK(cudaMemcpy(h.data(), d, size_t(n) * sizeof(T), cudaMemcpyDeviceToHost));
  return h;
}
template <class T>
static T* devAlloc(int64_t n) {
  T* p = nullptr;
  CK(cudaMalloc(&p, size_t(std::max<int64_t>(n, 1)) * sizeof(T)));
  return p;
}

static DiffStats diff(const float* x, const float* y, int64_t n) {
  DiffStats* d = devAlloc<DiffStats>(1);
  CK(cudaMemset(d, 0, sizeof(DiffStats)));
  if (n > 0) diffKernel<<<1024, 256>>>(x, y, n, d);
  CK(cudaGetLastError());
  DiffStats h = toHost(d, 1)[0];
  CK(cudaFree(d));
  return h;
}
static float bitsToFloat(unsigned int u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

static void report(const std::string& name, const std::string& shape, bool pass,
                   const char* detail) {
  if (!pass) gAllPass = false;
  std::printf("RESULT name=%s shape=%s %s status=%s\n", name.c_str(), shape.c_str(), detail,
              pass ? "PASS" : "FAIL");
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
  int64_t n = 0, d = 0, f = 0;  // n: x rows (tokens) with gather
  std::vector<int32_t> counts;
  bool gather = true;
  bool order = false;  // expert order most rows first (the engine's grouped_expert_order_kernel)
  int mStep = 1;       // reference sampling (m rows)
  bool time = false;
};

// One weight gradient: grad [E, mSize, nSize] += a^T b[bIndex].
struct Wgrad {
  const char* name;
  const bf16* a;
  const bf16* b;
  const int32_t* bIndex;
  int64_t mSize, nSize;
};

struct TableRow {
  std::string name;
  double r2Ms, wsMs, flops;
};
static std::vector<TableRow> gTable;

static void launchRound2(const Wgrad& w, int experts, const int32_t* offsets,
                         const int32_t* order, float* grad) {
  const dim3 grid(unsigned((w.nSize + gw::kBN - 1) / gw::kBN),
                  unsigned((w.mSize + gw::kBM - 1) / gw::kBM), unsigned(experts));
  gw::grouped_wgrad_prefetch_kernel<<<grid, gw::kThreads, gw::kSmemBytes>>>(
      w.a, w.b, w.bIndex, w.mSize, w.nSize, offsets, order, grad);
}
// Round 6's arguments for one gradient (A's TMA map encoded once, outside the timed region).
static wsw::WgradParams wsParams(const Wgrad& w, int experts, const int32_t* offsets,
                                 const int32_t* order, float* grad) {
  wsw::WgradParams p;
  p.a = w.a;
  p.b = w.b;
  p.bIndex = w.bIndex;
  p.mSize = w.mSize;
  p.nSize = w.nSize;
  p.offsets = offsets;
  p.expertOrder = order;
  p.numExperts = experts;
  p.grad = grad;
  wsw::encodeWgradMapA(p);
  if (!p.tmaA) std::printf("NOTE %s: no TMA map for A, A by cp.async on every step\n", w.name);
  return p;
}
// With p.tileCounter (the dynamic walk) the counter is zeroed first, in the same stream.
static void launchWs(const wsw::WgradParams& p) {
  const unsigned grid = wsw::wgradGrid(p, gSms);
  if (p.tileCounter != nullptr) CK(cudaMemsetAsync(p.tileCounter, 0, sizeof(int)));
  if (grid > 0) wsw::grouped_ws_wgrad_kernel<<<grid, wsw::kThreads, wsw::kSmemBytes>>>(p);
}

static void checkWgrad(const Problem& p, const Wgrad& w, const int32_t* offsets,
                       const int32_t* order, const std::vector<int32_t>& hostOffsets) {
  const int experts = int(p.counts.size());
  const int64_t size = int64_t(experts) * w.mSize * w.nSize;
  const std::string shape = p.name + "_" + w.name;
  float* old = devAlloc<float>(size);
  float* r2 = devAlloc<float>(size);
  float* ws = devAlloc<float>(size);
  float* ws2 = devAlloc<float>(size);
  fillF32<<<1024, 256>>>(old, size, 777 + w.mSize, 4.0f);
  CK(cudaGetLastError());
  const size_t bytes = size_t(size) * sizeof(float);
  for (float* g : {r2, ws, ws2}) CK(cudaMemcpy(g, old, bytes, cudaMemcpyDeviceToDevice));
  launchRound2(w, experts, offsets, order, r2);
  CK(cudaGetLastError());
  wsw::WgradParams prm = wsParams(w, experts, offsets, order, ws);
  launchWs(prm);
  CK(cudaGetLastError());
  prm.grad = ws2;
  launchWs(prm);
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  char line[256];
  {
    const DiffStats s = diff(ws, r2, size);
    std::snprintf(line, sizeof line, "differ=%llu of %lld maxabs=%.3e bitwise_equal=%s",
                  s.differ, (long long)size, bitsToFloat(s.maxAbsBits),
                  s.differ == 0 ? "yes" : "no");
    // Same instruction (m64n128k16), K order and operand bytes as round 2: equal bits expected
    // (the tolerance checks below still say how far off a difference would be).
    report("ws_vs_round2", shape, s.differ == 0 && s.nonFinite == 0, line);
  }
  {
    const DiffStats s = diff(ws2, ws, size);
    std::snprintf(line, sizeof line, "differ=%llu nonfinite=%llu", s.differ, s.nonFinite);
    report("ws_rerun_bitwise", shape, s.differ == 0 && s.nonFinite == 0, line);
  }
  {  // the dynamic walk (atomic tile tickets): the same bits, other tile -> CTA assignment
    wsw::WgradParams dyn = prm;
    dyn.tileCounter = devAlloc<int>(1);
    CK(cudaMemcpy(ws2, old, bytes, cudaMemcpyDeviceToDevice));
    launchWs(dyn);
    CK(cudaGetLastError());
    const DiffStats s = diff(ws2, ws, size);
    std::snprintf(line, sizeof line, "differ=%llu", s.differ);
    report("ws_dynamic_equals_static", shape, s.differ == 0, line);
    if (p.time) {
      const double flops = 2.0 * double(hostOffsets[experts]) * double(w.mSize) * double(w.nSize);
      const double t = timeMs([&] { launchWs(dyn); });
      std::printf("TIME %s ws_dynamic=%.3f ms (%.0f TFLOP/s)\n", shape.c_str(), t,
                  flops / t / 1e9);
    }
    // By skew (the engine's default): the walk the device picks from the offsets must be the one
    // expertsWgradSkewed gives on the host counts (the dynamic walk leaves tickets taken, the
    // static one the counter at 0), and the bits stay the same.
    wsw::WgradParams bySkew = dyn;
    bySkew.bySkew = true;
    CK(cudaMemcpy(ws2, old, bytes, cudaMemcpyDeviceToDevice));
    launchWs(bySkew);
    CK(cudaGetLastError());
    int tickets = -1;
    CK(cudaMemcpy(&tickets, bySkew.tileCounter, sizeof(int), cudaMemcpyDeviceToHost));
    int32_t most = 0;
    for (int e = 0; e < experts; ++e) most = std::max(most, hostOffsets[e + 1] - hostOffsets[e]);
    const bool want = moewb::engine::cuda::expertsWgradSkewed(most, hostOffsets[experts], experts);
    const DiffStats b = diff(ws2, ws, size);
    std::snprintf(line, sizeof line, "differ=%llu max_over_mean=%.3f walk=%s want=%s", b.differ,
                  double(most) * experts / std::max(1, hostOffsets[experts]),
                  tickets > 0 ? "dynamic" : "static", want ? "dynamic" : "static");
    report("ws_byskew_walk", shape, b.differ == 0 && (tickets > 0) == want, line);
    if (p.time) {
      const double flops = 2.0 * double(hostOffsets[experts]) * double(w.mSize) * double(w.nSize);
      const double t = timeMs([&] { launchWs(bySkew); });
      std::printf("TIME %s ws_byskew=%.3f ms (%.0f TFLOP/s)\n", shape.c_str(), t,
                  flops / t / 1e9);
    }
    CK(cudaFree(dyn.tileCounter));
  }
  if (prm.tmaA) {  // A by cp.async on every step (the fallback without a map): the same bytes
    wsw::WgradParams noTma = prm;
    noTma.tmaA = false;
    CK(cudaMemcpy(ws2, old, bytes, cudaMemcpyDeviceToDevice));
    launchWs(noTma);
    CK(cudaGetLastError());
    const DiffStats s = diff(ws2, ws, size);
    std::snprintf(line, sizeof line, "differ=%llu", s.differ);
    report("ws_cpasync_equals_tma", shape, s.differ == 0, line);
    if (p.time) {
      const double flops = 2.0 * double(hostOffsets[experts]) * double(w.mSize) * double(w.nSize);
      const double t = timeMs([&] { launchWs(noTma); });
      std::printf("TIME %s ws_cpasync_A=%.3f ms (%.0f TFLOP/s)\n", shape.c_str(), t,
                  flops / t / 1e9);
    }
  }
  {
    int64_t touched = 0;
    for (int e = 0; e < experts; ++e) {
      if (hostOffsets[e + 1] > hostOffsets[e]) continue;
      const int64_t at = int64_t(e) * w.mSize * w.nSize;
      touched += int64_t(diff(ws + at, old + at, w.mSize * w.nSize).differ);
    }
    std::snprintf(line, sizeof line, "bad=%lld", (long long)touched);
    report("ws_empty_experts_untouched", shape, touched == 0, line);
  }
  const int64_t mSampled = (w.mSize + p.mStep - 1) / p.mStep;
  const int64_t nRef = int64_t(experts) * mSampled * w.nSize;
  double* want = devAlloc<double>(nRef);
  float* gotOut = devAlloc<float>(nRef);
  for (int v = 0; v < 2; ++v) {
    refWgrad<<<2048, 256>>>(w.a, w.b, w.bIndex, offsets, w.mSize, w.nSize, experts, p.mStep, old,
                            v == 0 ? r2 : ws, want, gotOut);
    CK(cudaGetLastError());
    const std::vector<double> hw = toHost(want, nRef);
    const std::vector<float> hg = toHost(gotOut, nRef);
    double num = 0, den = 0, maxAbs = 0;
    for (int64_t i = 0; i < nRef; ++i) {
      const double e = double(hg[size_t(i)]) - hw[size_t(i)];
      num += e * e;
      den += hw[size_t(i)] * hw[size_t(i)];
      maxAbs = std::max(maxAbs, std::isfinite(e) ? std::fabs(e) : INFINITY);
    }
    const double rel = den > 0 ? std::sqrt(num / den) : (num > 0 ? 1e30 : 0.0);
    std::snprintf(line, sizeof line, "rel=%.3e maxabs=%.3e", rel, maxAbs);
    report(v == 0 ? "round2_vs_fp32" : "ws_vs_fp32", shape,
           rel < 1e-2 && std::isfinite(rel) && std::isfinite(maxAbs), line);
  }
  if (p.time) {
    const double flops = 2.0 * double(hostOffsets[experts]) * double(w.mSize) * double(w.nSize);
    const double tR2 = timeMs([&] { launchRound2(w, experts, offsets, order, r2); });
    prm.grad = ws;
    const double tWs = timeMs([&] { launchWs(prm); });
    gTable.push_back({shape, tR2, tWs, flops});
    std::printf("TIME %s round2=%.3f ms (%.0f TFLOP/s) ws=%.3f ms (%.0f TFLOP/s)\n",
                shape.c_str(), tR2, flops / tR2 / 1e9, tWs, flops / tWs / 1e9);
  }
  for (void* q : {(void*)old, (void*)r2, (void*)ws, (void*)ws2, (void*)want, (void*)gotOut})
    CK(cudaFree(q));
}

static void runProblem(const Problem& p) {
  const int experts = int(p.counts.size());
  std::vector<int32_t> off(size_t(experts) + 1, 0);
  for (int e = 0; e < experts; ++e) off[size_t(e) + 1] = off[size_t(e)] + p.counts[size_t(e)];
  const int64_t rows = off[size_t(experts)];
  const int64_t xRows = p.gather ? p.n : rows;
  bf16* dY = devAlloc<bf16>(rows * p.d);
  bf16* h = devAlloc<bf16>(rows * p.f);
  bf16* dG = devAlloc<bf16>(rows * p.f);
  bf16* dU = devAlloc<bf16>(rows * p.f);
  bf16* x = devAlloc<bf16>(xRows * p.d);
  int32_t* offsets = devAlloc<int32_t>(experts + 1);
  int32_t* gather = nullptr;
  int32_t* order = nullptr;
  const bf16* bufs[] = {dY, h, dG, dU, x};
  const int64_t sizes[] = {rows * p.d, rows * p.f, rows * p.f, rows * p.f, xRows * p.d};
  for (int i = 0; i < 5; ++i) {
    if (sizes[i] > 0) fillBf16<<<1024, 256>>>(const_cast<bf16*>(bufs[i]), sizes[i], 101 + i, 1.0f);
    CK(cudaGetLastError());
  }
  CK(cudaMemcpy(offsets, off.data(), off.size() * sizeof(int32_t), cudaMemcpyHostToDevice));
  if (p.gather) {
    std::vector<int32_t> idx(size_t(std::max<int64_t>(rows, 1)));
    uint64_t s = 12345;
    for (auto& v : idx) {
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      v = int32_t((s >> 33) % uint64_t(p.n));
    }
    gather = devAlloc<int32_t>(rows);
    CK(cudaMemcpy(gather, idx.data(), size_t(rows) * sizeof(int32_t), cudaMemcpyHostToDevice));
  }
  if (p.order) {
    std::vector<int32_t> ord(static_cast<size_t>(experts));
    std::iota(ord.begin(), ord.end(), 0);
    std::stable_sort(ord.begin(), ord.end(), [&](int32_t a, int32_t b) {
      return p.counts[size_t(a)] > p.counts[size_t(b)];
    });
    order = devAlloc<int32_t>(experts);
    CK(cudaMemcpy(order, ord.data(), ord.size() * sizeof(int32_t), cudaMemcpyHostToDevice));
  }
  const Wgrad grads[] = {{"down", dY, h, nullptr, p.d, p.f},
                         {"gate", dG, x, gather, p.f, p.d},
                         {"up", dU, x, gather, p.f, p.d}};
  std::printf("PROBLEM %s E=%d R=%lld D=%lld F=%lld gather=%d order=%d\n", p.name.c_str(), experts,
              (long long)rows, (long long)p.d, (long long)p.f, int(p.gather), int(p.order));
  for (const Wgrad& w : grads) checkWgrad(p, w, offsets, order, off);
  for (void* q : {(void*)dY, (void*)h, (void*)dG, (void*)dU, (void*)x, (void*)offsets,
                  (void*)gather, (void*)order})
    if (q != nullptr) CK(cudaFree(q));
}

int main(int argc, char** argv) {
  const bool smallOnly = argc > 1 && std::strcmp(argv[1], "small") == 0;  // sanitizer runs
  std::printf("VARIANT stages=%d epi_prefetch=%d epi_chunk=%d regs=%d/%d\n", wsw::kStages,
              wsw::kEpiPrefetch, wsw::kEpiChunk, wsw::kProducerRegs, wsw::kConsumerRegs);
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
  CK(cudaFuncSetAttribute(gw::grouped_wgrad_prefetch_kernel, kSmemAttr, gw::kSmemBytes));
  CK(cudaFuncSetAttribute(wsw::grouped_ws_wgrad_kernel, kSmemAttr, wsw::kSmemBytes));
  {
    Problem p;  // experts of 0, 1, 37, 129 rows (and 0 again, 300, 64): partial K steps,
    p.name = "awkward";  // M = D 136 / F 88 below one tile, N below one 256-wide tile
    p.n = 200;
    p.d = 136;
    p.f = 88;
    p.counts = {0, 1, 37, 129, 0, 300, 64};
    runProblem(p);
  }
  {
    Problem p;  // no gather (b rows are the expert's own), 1.03 column tiles, expert order
    p.name = "awkward_plain";
    p.d = 264;
    p.f = 136;
    p.counts = {300, 0, 5, 129, 1};
    p.gather = false;
    p.order = true;
    runProblem(p);
  }
  {
    Problem p;  // more tiles than CTAs: every CTA walks several tiles (ring wrap-around)
    p.name = "many_tiles";
    p.n = 3000;
    p.d = 520;
    p.f = 264;
    for (int e = 0; e < 40; ++e) p.counts.push_back(e % 7 == 3 ? 0 : 97 + 61 * (e % 5));
    p.order = true;
    p.mStep = 7;
    runProblem(p);
  }
  const int64_t T = 16384, E = 64, K = 8, R = T * K;
  if (!smallOnly) {
    Problem p;
    p.name = "balanced";
    p.n = T;
    p.d = 2048;
    p.f = 1024;
    p.counts.assign(E, int32_t(R / E));
    p.order = true;
    p.mStep = 61;
    p.time = true;
    runProblem(p);
  }
  if (!smallOnly) {
    Problem p;  // expert 0 at 8x the mean, the rest share the remainder (ragged counts)
    p.name = "skewed";
    p.n = T;
    p.d = 2048;
    p.f = 1024;
    const int64_t hot = 8 * R / E, rest = R - hot;
    p.counts.push_back(int32_t(hot));
    for (int64_t e = 1; e < E; ++e)
      p.counts.push_back(int32_t(rest / (E - 1) + (e <= rest % (E - 1) ? 1 : 0)));
    p.order = true;
    p.mStep = 61;
    p.time = true;
    runProblem(p);
  }
  if (!gTable.empty()) {
    std::printf(
        "\n| wgrad | round 2 ms (TFLOP/s) | ws ms (TFLOP/s) | r2 / ws |\n"
        "|---|---|---|---|\n");
    for (const TableRow& t : gTable)
      std::printf("| %s | %.3f (%.0f) | %.3f (%.0f) | %.2fx |\n", t.name.c_str(), t.r2Ms,
                  t.flops / t.r2Ms / 1e9, t.wsMs, t.flops / t.wsMs / 1e9, t.r2Ms / t.wsMs);
  }
  std::printf("\n%s\n", gAllPass ? "ALL PASS" : "SOME FAIL");
  return gAllPass ? 0 : 1;
}
