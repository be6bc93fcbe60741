// Grouped expert GEMMs, round 8 (issue 14; the count and prediction: grouped_gemm_08.md): fc1
// (gate+up, GLU epilogue) and dh (GLU-backward epilogue) on round 7's ping-pong kernel run as
// 2-CTA clusters sharing B by TMA multicast (bench/scratch/grouped_gemm_ws_cluster_08.cuh,
// "cl") against round 2 (grouped_gemm_wgmma_cuda.cuh, "r2") and round 7's ping-pong
// (grouped_gemm_ws_pingpong_cuda.cuh, "pp"), in one binary. dh reads round 2's gatePre / upPre
// for every variant, so each comparison isolates one stage. Per problem: every variant against
// an fp32 reference (relative L2; sampled rows at the benchmark shape), pp and cl against r2 on
// every row (must be bitwise equal: same m64n128k16 batches, same epilogue arithmetic), cl again
// on ONE cluster (grid 2: every unit through one ring pair) bitwise against r2, cl bitwise run
// to run (fresh poison), rows >= R untouched (NaN poison) and rows < R finite. Problems: awkward
// (experts of 0, 1, 37, 129, 257 rows: odd tile counts, D 136, F 88, gather), awkward_plain (no
// gather, D 264, F 136), tiny, many_tiles (more units than clusters, odd and even tile counts),
// then T=16384 D=2048 E=64 k=8 F=1024 (R = 131072) balanced and skewed (expert 0 at 8x the
// mean), timed (median of 20): ms, TFLOP/s, r2 / cl, pp / cl. cl's dh runs the quad-transposed
// 16-byte epilogue (MOEWB_CL_DH_EPI 1); "cle7" is the same cluster kernel with round 7's dh
// epilogue (checked bitwise and timed too: the A/B of the epilogue alone).
// Build (repository root; here or on the H200, about two minutes):
//   nvcc -O3 -std=c++20 -gencode=arch=compute_90a,code=sm_90a -lineinfo -Xptxas -v \
//        -Iengine -Iengine/include -Ibase/include -o .scratch/bin/grouped_gemm_08 \
//        bench/scratch/grouped_gemm_08.cu
// Run: .scratch/bin/grouped_gemm_08 [small]   (exit 1 on any FAIL or CUDA error, 3 on a hang:
// "CASE <name>" before each problem, "HANG in <case> <kernel>" past MOEWB_WATCH_S seconds;
// `small`: the awkward shapes only, for compute-sanitizer). Variants: -DMOEWB_PP_STAGES=N (2..7),
// -DMOEWB_PP_EPI_PREFETCH=N (0 off); both apply to pp and cl.
// The engine's round 5 configuration (experts_wgmma_cuda.cu); the ping-pong header needs TMA B.
#define MOEWB_WS_TMA_B 1
#define MOEWB_WS_RELEASE 0
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "ops/experts/grouped_gemm_cuda.cuh"
#include "ops/experts/grouped_gemm_v2_cuda.cuh"
#include "ops/experts/grouped_gemm_wgmma_cuda.cuh"
#include "grouped_gemm_ws_cluster_08.cuh"  // this round's kernel, kept beside its bench
#include "ops/experts/grouped_gemm_ws_cuda.cuh"
#include "ops/experts/grouped_gemm_ws_pingpong_cuda.cuh"

namespace gg = moewb::engine::cuda::grouped;
namespace g2 = moewb::engine::cuda::grouped::v2;
namespace gw = moewb::engine::cuda::grouped::wg;
namespace cl = moewb::engine::cuda::grouped::cl;
namespace pp = moewb::engine::cuda::grouped::pp;
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

// ---- hang watchdog (H200 call 1 hung with no trace: grouped_gemm_07.md) ---------------------
// gCase names the running case ("CASE <name>" lines); watch() waits for everything queued on the
// legacy stream so far with a deadline and, past it, prints "HANG in <case> <kernel>" and leaves
// at once with status 3 (_Exit: no atexit handler may block on the hung context).
// Deadline: MOEWB_WATCH_S seconds (default 10; every watched launch takes < 1 s on the H200, so
// give compute-sanitizer 120).
static std::string gCase = "setup";
static double watchSeconds() {
  const char* v = std::getenv("MOEWB_WATCH_S");
  const double s = v != nullptr ? std::atof(v) : 0.0;
  return s > 0 ? s : 10.0;
}
static void watch(const char* kernel) {
  static const double kWatchSeconds = watchSeconds();
  cudaEvent_t done;
  CK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
  CK(cudaEventRecord(done));
  const auto start = std::chrono::steady_clock::now();
  cudaError_t e = cudaEventQuery(done);
  while (e == cudaErrorNotReady) {
    const std::chrono::duration<double> waited = std::chrono::steady_clock::now() - start;
    if (waited.count() > kWatchSeconds) {
      std::printf("HANG in %s %s (not done after %.0f s)\n", gCase.c_str(), kernel, kWatchSeconds);
      std::fflush(stdout);
      std::_Exit(3);
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
    e = cudaEventQuery(done);
  }
  CK(e);
  CK(cudaEventDestroy(done));
  CK(cudaGetLastError());
}

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
  watch("fillBf16");
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
static double timeMs(const char* kernel, F launch, int reps = 20) {
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  for (int i = 0; i < 3; ++i) launch();
  watch(kernel);
  std::vector<float> t;
  for (int i = 0; i < reps; ++i) {
    CK(cudaEventRecord(a));
    launch();
    CK(cudaEventRecord(b));
    watch(kernel);
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

// Per-variant outputs (0: round 2, 1: round 7 pp, 2: round 8 cl, 3: cl on one cluster, 4: cl
// with round 7's dh epilogue, "cle7": its fc1 is cl's kernel).
constexpr int kVariants = 5;
const char* const kVariantName[kVariants] = {"r2", "pp", "cl", "cl1", "cle7"};
constexpr int kTimed[4] = {0, 1, 2, 4};
struct Outputs {
  bf16 *g, *u, *h, *dg, *du;
};
struct Snap {
  std::vector<bf16> g, u, h, dg, du;
};

struct TableRow {
  std::string name;
  double ms[kVariants], flops;
};
static std::vector<TableRow> gTable;
static int gSms = 132;
static unsigned gClusterGrid[2] = {2, 2};  // cl grid: fc1, dh (clusterGrid)

static bool sameBits(const std::vector<bf16>& a, const std::vector<bf16>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(bf16)) == 0;
}

// Device buffers of one problem.
struct Buffers {
  bf16 *x = nullptr, *wg = nullptr, *wu = nullptr, *wd = nullptr, *dY = nullptr;
  float *ref = nullptr, *ref2 = nullptr;
  int32_t *offsets = nullptr, *rowExpert = nullptr, *idx = nullptr, *tileStart = nullptr;
  Outputs out[kVariants];
};

static void poison(const Outputs& o, int64_t rf) {
  for (bf16* q : {o.g, o.u, o.h, o.dg, o.du}) CK(cudaMemset(q, 0xFF, rf * 2));  // NaN
}

static void runProblem(const Problem& p) {
  gCase = p.name;
  std::printf("CASE %s\n", p.name.c_str());
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
  Buffers b;
  CK(cudaMalloc(&b.x, nTok * D * 2));
  CK(cudaMalloc(&b.dY, rd * 2));
  CK(cudaMalloc(&b.wg, wSize * 2));
  CK(cudaMalloc(&b.wu, wSize * 2));
  CK(cudaMalloc(&b.wd, wSize * 2));
  CK(cudaMalloc(&b.ref, rf * 4));
  CK(cudaMalloc(&b.ref2, rf * 4));
  CK(cudaMalloc(&b.offsets, (E + 1) * 4));
  CK(cudaMalloc(&b.tileStart, (E + 1) * 4));
  CK(cudaMalloc(&b.rowExpert, maxRows * 4));
  CK(cudaMalloc(&b.idx, maxRows * 4));
  for (Outputs& o : b.out) {
    for (bf16** q : {&o.g, &o.u, &o.h, &o.dg, &o.du}) CK(cudaMalloc(q, rf * 2));
    poison(o, rf);
  }
  CK(cudaMemcpy(b.offsets, offsets.data(), (E + 1) * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(b.rowExpert, rowExpert.data(), maxRows * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(b.idx, gidx.data(), maxRows * 4, cudaMemcpyHostToDevice));
  const float in = 1.0f / std::sqrt(float(D)), hid = 1.0f / std::sqrt(float(F));
  fill(b.x, nTok * D, 11, 1.0f);
  fill(b.dY, rd, 17, 1.0f);
  fill(b.wg, wSize, 12, 2.0f * in);
  fill(b.wu, wSize, 13, 2.0f * in);
  fill(b.wd, wSize, 14, 2.0f * hid);
  const int32_t* xIdx = p.gather ? b.idx : nullptr;
  const GluDeviceParams glu;  // SwiGLU
  const unsigned slots = unsigned(maxRows / gg::kBM + E);
  auto tilesOf = [](int64_t v, int t) { return unsigned(std::max<int64_t>(1, (v + t - 1) / t)); };
  gg::grouped_schedule_kernel<<<1, 32>>>(b.offsets, int(E), gg::kBM, b.tileStart);
  CK(cudaGetLastError());
  watch("grouped_schedule_kernel");

  // TMA maps encoded once per problem (the engine encodes per launch: a few microseconds).
  pp::Params ppBase;
  ppBase.d = D;
  ppBase.f = F;
  ppBase.offsets = b.offsets;
  ppBase.tileStart = b.tileStart;
  ppBase.numExperts = int(E);
  ppBase.glu = glu;
  pp::Params ppFc1 = ppBase, ppDh = ppBase;
  ppFc1.a = b.x;
  ppFc1.gather = xIdx;
  CK(pp::encodeMaps<pp::Stage::kGateUp>(ppFc1, b.wg, b.wu));
  ppDh.a = b.dY;
  ppDh.gatePre = b.out[0].g;
  ppDh.upPre = b.out[0].u;
  CK(pp::encodeMaps<pp::Stage::kDh>(ppDh, b.wd, nullptr));
  const int clSmem = cl::smemBytes(int(E));

  auto fc1 = [&](int v) {
    const Outputs& o = b.out[v];
    if (v == 0) {
      const dim3 grid(tilesOf(F, g2::kGateUpCols), slots);
      gw::grouped_fwd_gate_up_kernel<<<grid, gw::kThreads, gw::kSmemBytes>>>(
          b.x, xIdx, b.wg, b.wu, D, F, b.offsets, b.tileStart, int(E), glu, o.g, o.u, o.h);
    } else {
      pp::Params prm = ppFc1;
      prm.out1 = o.g;
      prm.out2 = o.u;
      prm.out3 = o.h;
      if (v == 1) {
        pp::grouped_pp_kernel<pp::Stage::kGateUp><<<gSms, pp::kThreads, pp::kSmemBytes>>>(prm);
      } else {
        const unsigned grid = v == 3 ? 2 : gClusterGrid[0];
        cl::grouped_cluster_kernel<cl::Stage::kGateUp><<<grid, cl::kThreads, clSmem>>>(prm);
      }
    }
  };
  auto dh = [&](int v) {
    const Outputs& o = b.out[v];
    const Outputs& in2 = b.out[0];
    if (v == 0) {
      const dim3 grid(tilesOf(F, g2::kBN), slots);
      gw::grouped_bwd_dh_kernel<<<grid, gw::kThreads, gw::kSmemBytes>>>(
          b.dY, b.wd, D, F, b.offsets, b.tileStart, int(E), glu, in2.g, in2.u, o.dg, o.du);
    } else {
      pp::Params prm = ppDh;
      prm.out1 = o.dg;
      prm.out2 = o.du;
      if (v == 1) {
        pp::grouped_pp_kernel<pp::Stage::kDh><<<gSms, pp::kThreads, pp::kSmemBytes>>>(prm);
      } else {
        if (v == 4) {
          cl::grouped_cluster_kernel<cl::Stage::kDh, 0>
              <<<gClusterGrid[1], cl::kThreads, clSmem>>>(prm);
        } else {
          const unsigned grid = v == 2 ? gClusterGrid[1] : 2;
          cl::grouped_cluster_kernel<cl::Stage::kDh><<<grid, cl::kThreads, clSmem>>>(prm);
        }
      }
    }
  };
  auto runAll = [&](int v) {
    const std::string fc1Name = std::string(kVariantName[v]) + "_fc1";
    const std::string dhName = std::string(kVariantName[v]) + "_dh";
    fc1(v);
    CK(cudaGetLastError());
    watch(fc1Name.c_str());  // round 2's g / u: every variant's dh input
    dh(v);
    CK(cudaGetLastError());
    watch(dhName.c_str());
  };
  for (int v = 0; v < kVariants; ++v) runAll(v);

  // ---- checks ----
  auto snap = [&](const Outputs& o) {
    return Snap{toHost(o.g, rf), toHost(o.u, rf), toHost(o.h, rf), toHost(o.dg, rf),
                toHost(o.du, rf)};
  };
  Snap s[kVariants];
  for (int v = 0; v < kVariants; ++v) s[v] = snap(b.out[v]);
  std::vector<float> rg, ru, rdh;
  if (R > 0) {
    const dim3 blk(128), grid(tilesOf(F, 128), unsigned((R + p.rowStep - 1) / p.rowStep));
    refRowGemmNK<<<grid, blk>>>(b.x, xIdx, b.wg, b.rowExpert, R, p.rowStep, D, F, b.ref);
    refRowGemmNK<<<grid, blk>>>(b.x, xIdx, b.wu, b.rowExpert, R, p.rowStep, D, F, b.ref2);
    CK(cudaGetLastError());
    watch("refRowGemmNK");
    rg = toHost(b.ref, rf);
    ru = toHost(b.ref2, rf);
    refRowGemmKN<<<grid, blk>>>(b.dY, nullptr, b.wd, nullptr, b.rowExpert, R, p.rowStep, D, F,
                                b.ref);
    CK(cudaGetLastError());
    watch("refRowGemmKN");
    rdh = toHost(b.ref, rf);
  }
  for (int v = 0; v < kVariants; ++v) {
    const Snap& sv = s[v];
    const std::string tag = std::string(kVariantName[v]) + "_";
    ErrAcc eg, eu, eh, edg, edu;
    for (int64_t r = 0; r < R; r += p.rowStep)
      for (int64_t c = 0; c < F; ++c) {
        const int64_t i = r * F + c;
        eg.add(bf(sv.g[i]), rg[i]);
        eu.add(bf(sv.u[i]), ru[i]);
        eh.add(bf(sv.h[i]), silu(rg[i]) * ru[i]);
        const float gv = bf(s[0].g[i]), uv = bf(s[0].u[i]), sg = sigm(gv);  // dh's inputs
        edu.add(bf(sv.du[i]), rdh[i] * gv * sg);
        edg.add(bf(sv.dg[i]), rdh[i] * uv * (sg + gv * sg * (1.0f - sg)));
      }
    if (R > 0) {
      check(tag + "fc1_gate", shape, eg, 1e-2);
      check(tag + "fc1_up", shape, eu, 1e-2);
      check(tag + "fc1_glu", shape, eh, 1e-2);
      check(tag + "dh_dgate", shape, edg, 1e-2);
      check(tag + "dh_dup", shape, edu, 1e-2);
    }
    int64_t bad = 0;  // rows < R finite, rows >= R still the 0xFFFF poison
    for (const auto* t : {&sv.g, &sv.u, &sv.h, &sv.dg, &sv.du})
      for (int64_t i = 0; i < maxRows * F; ++i) {
        uint16_t bits;
        std::memcpy(&bits, &(*t)[i], 2);
        const bool finite = (bits & 0x7F80) != 0x7F80;
        bad += i < R * F ? !finite : bits != 0xFFFF;
      }
    checkCount(tag + "rows_written_only", shape, bad);
  }
  // pp, cl and cl on one cluster against round 2 on every row (all required).
  auto vsR2 = [&](int v, const char* what, const std::vector<bf16>& a,
                  const std::vector<bf16>& r2) {
    ErrAcc e;
    for (int64_t i = 0; i < R * F; ++i) e.add(bf(a[i]), bf(r2[i]));
    const std::string name = std::string(kVariantName[v]) + "_vs_r2_bitwise_" + what;
    checkCount(name, shape, e.differ);
  };
  for (int v : {1, 2, 3, 4}) {
    vsR2(v, "gatePre", s[v].g, s[0].g);
    vsR2(v, "upPre", s[v].u, s[0].u);
    vsR2(v, "hidden", s[v].h, s[0].h);
    vsR2(v, "dGate", s[v].dg, s[0].dg);
    vsR2(v, "dUp", s[v].du, s[0].du);
  }
  {  // cl run to run (fresh poison first)
    poison(b.out[2], rf);
    runAll(2);
    const Snap again = snap(b.out[2]);
    const bool same = sameBits(again.g, s[2].g) && sameBits(again.u, s[2].u) &&
                      sameBits(again.h, s[2].h) && sameBits(again.dg, s[2].dg) &&
                      sameBits(again.du, s[2].du);
    checkCount("cl_bitwise_rerun", shape, same ? 0 : 1);
  }

  if (p.time) {
    const double rdf = double(R) * D * F;
    for (int which : {0, 1}) {
      TableRow row{
          p.name + (which == 0 ? " fc1_gate_up" : " dgrad_dh"), {}, (which == 0 ? 4 : 2) * rdf};
      for (int v : kTimed) {
        const std::string kernel =
            std::string(kVariantName[v]) + (which == 0 ? "_fc1_timed" : "_dh_timed");
        row.ms[v] = timeMs(kernel.c_str(), [&] { which == 0 ? fc1(v) : dh(v); });
        std::printf("RESULT name=time_%s_%s shape=%s ms=%.4f tflops=%.1f\n", kVariantName[v],
                    which == 0 ? "fc1_gate_up" : "dgrad_dh", shape.c_str(), row.ms[v],
                    row.flops / row.ms[v] / 1e9);
      }
      gTable.push_back(row);
    }
  }
  for (void* q :
       {(void*)b.x, (void*)b.dY, (void*)b.wg, (void*)b.wu, (void*)b.wd, (void*)b.ref, (void*)b.ref2,
        (void*)b.offsets, (void*)b.tileStart, (void*)b.rowExpert, (void*)b.idx})
    CK(cudaFree(q));
  for (Outputs& o : b.out)
    for (void* q : {(void*)o.g, (void*)o.u, (void*)o.h, (void*)o.dg, (void*)o.du}) CK(cudaFree(q));
}

static Problem benchProblem(const char* name, bool skewed) {
  const int64_t T = 16384, E = 64, K = 8, R = T * K;
  Problem p;
  p.name = name;
  p.n = T;
  p.d = 2048;
  p.f = 1024;
  if (!skewed) {
    p.counts.assign(E, int32_t(R / E));
  } else {  // expert 0 at 8x the mean, the rest share the remainder (ragged counts)
    const int64_t hot = 8 * R / E, rest = R - hot;
    p.counts.push_back(int32_t(hot));
    for (int64_t e = 1; e < E; ++e)
      p.counts.push_back(int32_t(rest / (E - 1) + (e <= rest % (E - 1) ? 1 : 0)));
  }
  p.maxRows = R;
  p.rowStep = 97;
  p.time = true;
  return p;
}

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // line-buffered: a hang or kill keeps every line
  const bool smallOnly = argc > 1 && std::strcmp(argv[1], "small") == 0;  // sanitizer runs
  std::printf("VARIANT pp_stages=%d pp_epi_prefetch=%d cluster=%d\n", pp::kStages,
              MOEWB_PP_EPI_PREFETCH, cl::kClusterSize);
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
       {(const void*)gw::grouped_fwd_gate_up_kernel, (const void*)gw::grouped_bwd_dh_kernel})
    CK(cudaFuncSetAttribute(k, kSmemAttr, gw::kSmemBytes));
  {
    const int smem = cl::smemBytes(cl::kMaxExperts);
    const auto fc1 = cl::grouped_cluster_kernel<cl::Stage::kGateUp>;
    const auto dh = cl::grouped_cluster_kernel<cl::Stage::kDh>;
    CK(cudaFuncSetAttribute(fc1, kSmemAttr, smem));
    CK(cudaFuncSetAttribute(dh, kSmemAttr, smem));
    CK(cudaFuncSetAttribute(cl::grouped_cluster_kernel<cl::Stage::kDh, 0>, kSmemAttr, smem));
    // Benchmark problems have E = 64; the grid is the co-resident clusters at that smem size.
    CK(cl::clusterGrid(fc1, gSms, cl::smemBytes(64), 1 << 30, gClusterGrid[0]));
    CK(cl::clusterGrid(dh, gSms, cl::smemBytes(64), 1 << 30, gClusterGrid[1]));
    std::printf("cluster grid: fc1 %u CTAs, dh %u CTAs (%d SMs)\n", gClusterGrid[0],
                gClusterGrid[1], gSms);
  }
  for (const void* k : {(const void*)pp::grouped_pp_kernel<pp::Stage::kGateUp>,
                        (const void*)pp::grouped_pp_kernel<pp::Stage::kDh>})
    CK(cudaFuncSetAttribute(k, kSmemAttr, pp::kSmemBytes));
  {
    Problem p;  // experts of 0, 1, 37, 129 rows; D, F not multiples of 64; gather
    p.name = "awkward";
    p.n = 200;
    p.d = 136;
    p.f = 88;
    p.counts = {0, 1, 37, 129, 0, 257};
    p.maxRows = 424 + 37;
    runProblem(p);
  }
  {
    Problem p;  // no gather, 1.06 pp column tiles of dh, partial K tile, an empty expert
    p.name = "awkward_plain";
    p.d = 264;
    p.f = 136;
    p.counts = {129, 0, 37, 1, 300};
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
    Problem p;  // more tiles than CTAs: both consumers wrap around the ring many times
    p.name = "many_tiles";
    p.n = 3000;
    p.d = 520;
    p.f = 264;
    for (int e = 0; e < 40; ++e) p.counts.push_back(e % 7 == 3 ? 0 : 97 + 61 * (e % 5));
    p.maxRows = 12000;
    p.rowStep = 7;
    runProblem(p);
  }
  if (!smallOnly) {
    runProblem(benchProblem("balanced", false));
    runProblem(benchProblem("skewed", true));
  }
  std::printf(
      "\n| stage | round 2 ms (TFLOP/s) | round 7 pp ms (TFLOP/s) | round 8 cl ms (TFLOP/s) |"
      " cl, round 7 dh epilogue | r2 / cl | pp / cl |\n|---|---|---|---|---|---|---|\n");
  for (const TableRow& t : gTable)
    std::printf("| %s | %.3f (%.0f) | %.3f (%.0f) | %.3f (%.0f) | %.3f (%.0f) | %.2fx | %.2fx |\n",
                t.name.c_str(), t.ms[0], t.flops / t.ms[0] / 1e9, t.ms[1], t.flops / t.ms[1] / 1e9,
                t.ms[2], t.flops / t.ms[2] / 1e9, t.ms[4], t.flops / t.ms[4] / 1e9,
                t.ms[0] / t.ms[2], t.ms[1] / t.ms[2]);
  std::printf("\n%s\n", gAllPass ? "ALL PASS" : "SOME FAIL");
  return gAllPass ? 0 : 1;
}
