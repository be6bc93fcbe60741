// Lightning indexer on tensor cores (round 2): engine/ops/sparse_attention/indexer_mma.cuh (what
// the engine runs for HI = 8, dI 64 / 128) against copies of the engine's previous scalar kernels
// (indexer_cuda.cu: scores, logits, query-side backward, key-side backward), the round-1 score
// kernel (indexer_scores_mma.cuh) and a plain fp64 CPU reference.
// Build:
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90,code=sm_90 -lineinfo -Xptxas -v -lcublas \
//        -I/work/main/engine -o /work/main/.scratch/bin/sparse_attention_02 \
//        bench/scratch/sparse_attention_02.cu
// Run: .scratch/bin/sparse_attention_02   (no arguments; exits 1 on any FAIL or CUDA error)
// 1. Small awkward shapes (T not a multiple of 64, W < 16, W not a multiple of 16, shortened
//    rows, the dense causal selection W = T), every output poisoned with NaN first:
//    scores vs fp64; logits bitwise equal to the scores at the selected keys (0 on padding);
//    query backward (coef, dwPre, dq) vs fp64 and vs the old scalar kernel.
// 2. Benchmark shapes B=4 T=4096 and B=1 T=32768, dI = 64: new vs old on the device, timed
//    (median of up to 20, fewer for slow old kernels to stay under 60 s).
// FLOP (nominal, 2 HI dI per (query, key) pair): scores T(T+1)/2 pairs per sequence, logits and
// backward sum_t min(t + 1, W) pairs (the backward does 2x: a and dq).
// 3. Core backward phase 2 (dk, dv): sparse_attention_key_bwd_split_kernel + combine
//    (sparse_attention_key_bwd_split.cuh, the engine's path) vs round 1's
//    sparse_attention_key_bwd_mma_kernel and fp64 on the CPU at small shapes (span >= T must be
//    bitwise round 1; small spans force several parts), then timed at B=4 T=4096 W=512 / W=T and
//    B=1 T=32768 W=2048 (H=16, Hkv=1, dh=128) on random dz / p / q / dO (the kernel is linear in
//    them; the selection is the same bucketed random one as round 1's benchmark).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "ops/sparse_attention/indexer_mma.cuh"
#include "ops/sparse_attention/sparse_attention_core_bwd.cuh"

using namespace moewb::engine::cuda::sparse_detail;

#define CK(call)                                                                          \
  do {                                                                                    \
    cudaError_t e_ = (call);                                                              \
    if (e_ != cudaSuccess) {                                                              \
      std::fprintf(stderr, "CUDA error %s at %s:%d: %s\n", cudaGetErrorString(e_), __FILE__, \
                   __LINE__, #call);                                                      \
      std::exit(1);                                                                       \
    }                                                                                     \
  } while (0)

static int gFails = 0;
constexpr int kHI = 8;

__host__ __device__ inline uint32_t hash32(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return uint32_t(x);
}

__global__ void fillF32(float* p, int64_t n, uint64_t seed, float scale) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const float u = float(hash32(seed * 0x9E3779B97F4A7C15ULL + uint64_t(i))) * 2.3283064e-10f;
    p[i] = scale * (2.0f * u - 1.0f);
  }
}

__global__ void fillNan(float* p, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    p[i] = __int_as_float(0x7fc00000);
  }
}

__global__ void fillNanBf16(bf16* p, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    p[i] = __float2bfloat16(__int_as_float(0x7fc00000));
  }
}

// Row r = b T + t: count = min(t + 1, W) ascending keys (shortened on a third of the rows when
// `shorten`), then -1. t + 1 <= W: keys 0.. (causal); else one random key per bucket.
__global__ void makeSelection(int64_t n, int64_t seqLen, int64_t width, uint64_t seed, int shorten,
                              int32_t* sel) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n * width;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / width, slot = i % width, t = r % seqLen;
    const int64_t full = t + 1 < width ? t + 1 : width;
    int64_t count = full;
    const uint32_t h = hash32(seed + 7919 * uint64_t(r));
    if (shorten && h % 3 == 0) count = 1 + (h / 3) % full;
    int32_t key = -1;
    if (slot < count) {
      if (t + 1 <= width) {
        key = int32_t(slot);
      } else {
        const int64_t lo = slot * (t + 1) / width, hi = (slot + 1) * (t + 1) / width;
        key = int32_t(lo + hash32(seed ^ uint64_t(i)) % uint32_t(hi - lo));
      }
    }
    sel[i] = key;
  }
}

// ---- Copies of the engine's previous scalar kernels (indexer_cuda.cu, round 1) ----
__device__ __forceinline__ float oldDot(const float* q, const float* k, int di) {
  float acc = 0.0f;
  for (int d = 0; d < di; ++d) acc = fmaf(q[d], k[d], acc);
  return acc;
}

__device__ __forceinline__ float oldScore(const float* qRow, const float* wRow, const float* kRow,
                                          int hi, int di, float c) {
  float out = 0.0f;
  for (int j = 0; j < hi; ++j) {
    const float a = oldDot(qRow + j * di, kRow, di);
    out = fmaf(wRow[j], a > 0.0f ? a : 0.0f, out);
  }
  return __fadd_rn(__fmul_rn(out, c), 0.0f);
}

__device__ __forceinline__ void oldLoadRow(const float* q, const float* w, int64_t n, int hi,
                                           int di, float* shared) {
  const int qw = hi * di;
  for (int i = int(threadIdx.x); i < qw; i += int(blockDim.x)) shared[i] = q[n * qw + i];
  for (int j = int(threadIdx.x); j < hi; j += int(blockDim.x)) shared[qw + j] = w[n * hi + j];
  __syncthreads();
}

__global__ void old_scores_kernel(const float* q, const float* k, const float* w, int64_t seqLen,
                                  int hi, int di, float c, float* scores) {
  extern __shared__ float row[];
  const int64_t n = blockIdx.x, t = n % seqLen, base = n - t;
  oldLoadRow(q, w, n, hi, di, row);
  for (int64_t s = threadIdx.x; s < seqLen; s += blockDim.x) {
    scores[n * seqLen + s] =
        s <= t ? oldScore(row, row + hi * di, k + (base + s) * di, hi, di, c) : 0.0f;
  }
}

__global__ void old_logits_kernel(const float* q, const float* k, const float* w,
                                  const int32_t* selected, int64_t seqLen, int64_t width, int hi,
                                  int di, float c, float* logits) {
  extern __shared__ float row[];
  const int64_t n = blockIdx.x, base = n - n % seqLen;
  oldLoadRow(q, w, n, hi, di, row);
  for (int64_t slot = threadIdx.x; slot < width; slot += blockDim.x) {
    const int32_t key = selected[n * width + slot];
    logits[n * width + slot] =
        key >= 0 ? oldScore(row, row + hi * di, k + (base + key) * di, hi, di, c) : 0.0f;
  }
}

__device__ __forceinline__ float oldWarpSum(float v) {
  for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffffu, v, off);
  return __shfl_sync(0xffffffffu, v, 0);
}

__global__ void old_query_bwd_kernel(const float* q, const float* k, const float* w,
                                     const int32_t* selected, const float* dLogits, int64_t n,
                                     int64_t seqLen, int64_t width, int hi, int di, float c,
                                     float headScale, float* coef, bf16* dwPre, bf16* dq) {
  const int64_t pair = int64_t(blockIdx.x) * 4 + threadIdx.x / 32;
  const int lane = int(threadIdx.x) % 32;
  if (pair >= n * hi) return;
  const int64_t r = pair / hi, base = r - r % seqLen;
  const int j = int(pair % hi);
  const float* qh = q + r * int64_t(hi) * di + int64_t(j) * di;
  const float wj = w[r * hi + j];
  const int32_t* sel = selected + r * width;
  float* coefRow = coef + pair * width;
  float dw = 0.0f;
  for (int64_t slot = lane; slot < width; slot += 32) {
    const int32_t key = sel[slot];
    if (key < 0) continue;
    const float a = oldDot(qh, k + (base + key) * di, di);
    const float g = dLogits[r * width + slot];
    float cf = 0.0f;
    if (a > 0.0f) {
      dw += g * a;
      cf = g * wj * c;
    }
    coefRow[slot] = cf;
  }
  dw = oldWarpSum(dw);
  if (lane == 0) dwPre[pair] = __float2bfloat16(dw * c * headScale);
  __syncwarp();
  for (int d = lane; d < di; d += 32) {
    float acc = 0.0f;
    for (int64_t slot = 0; slot < width; ++slot) {
      const int32_t key = sel[slot];
      if (key < 0) break;
      acc += coefRow[slot] * k[(base + key) * di + d];
    }
    dq[r * int64_t(hi) * di + int64_t(j) * di + d] = __float2bfloat16(acc);
  }
}

__global__ void old_key_bwd_kernel(const float* q, const float* coef, const int32_t* keyStart,
                                   const int32_t* entries, int64_t n, int64_t width, int hi,
                                   int di, float* dk) {
  const int64_t m = int64_t(blockIdx.x) * 4 + threadIdx.x / 32;
  const int lane = int(threadIdx.x) % 32;
  if (m >= n) return;
  const int32_t begin = keyStart[m], end = keyStart[m + 1];
  for (int d = lane; d < di; d += 32) {
    float acc = 0.0f;
    for (int32_t e = begin; e < end; ++e) {
      const int64_t entry = entries[e], r = entry / width, slot = entry % width;
      for (int j = 0; j < hi; ++j) {
        acc += coef[(r * hi + j) * width + slot] * q[r * int64_t(hi) * di + int64_t(j) * di + d];
      }
    }
    dk[m * di + d] = acc;
  }
}

// ---- Harness ----
static unsigned gridFor(int64_t n) { return unsigned(std::min<int64_t>((n + 255) / 256, 65536)); }

template <class T>
static std::vector<T> toHost(const T* p, int64_t n) {
  std::vector<T> h(size_t(std::max<int64_t>(n, 0)));
  if (n > 0) CK(cudaMemcpy(h.data(), p, size_t(n) * sizeof(T), cudaMemcpyDeviceToHost));
  return h;
}

static std::vector<float> toHostBf16(const bf16* p, int64_t n) {
  std::vector<bf16> raw = toHost(p, n);
  std::vector<float> out(raw.size());
  for (size_t i = 0; i < raw.size(); ++i) out[i] = __bfloat162float(raw[i]);
  return out;
}

static void report(const std::string& name, const std::string& shape, double ms, double tflops,
                   double err, double tol, int64_t bad) {
  const bool pass = err <= tol && bad == 0;
  if (!pass) ++gFails;
  std::printf("RESULT name=%s shape=%s ms=%.4f tflops=%.2f err=%.3e status=%s", name.c_str(),
              shape.c_str(), ms, tflops, err, pass ? "PASS" : "FAIL");
  if (bad) std::printf(" bad=%lld", (long long)bad);
  std::printf("\n");
}

// ||got - want|| / ||want||; `bad` counts non-finite got (where mask, if given, is true).
template <class W>
static double relErr(const std::vector<float>& got, const std::vector<W>& want, int64_t& bad,
                     const std::vector<char>* mask = nullptr) {
  double d = 0, n = 0;
  bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (mask && !(*mask)[i]) continue;
    if (!std::isfinite(got[i])) {
      ++bad;
      continue;
    }
    const double x = got[i], y = double(want[i]);
    d += (x - y) * (x - y);
    n += y * y;
  }
  return n > 0 ? std::sqrt(d / n) : std::sqrt(d);
}

static double timeMs(int reps, const std::function<void()>& fn) {
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  std::vector<float> ms;
  for (int i = 0; i < reps; ++i) {
    CK(cudaEventRecord(a));
    fn();
    CK(cudaEventRecord(b));
    CK(cudaEventSynchronize(b));
    float t = 0;
    CK(cudaEventElapsedTime(&t, a, b));
    ms.push_back(t);
  }
  CK(cudaEventDestroy(a));
  CK(cudaEventDestroy(b));
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// Median of up to maxReps runs, fewer when one run is slow (`budgetMs` per measurement).
static double timeAdaptive(int maxReps, double budgetMs, const std::function<void()>& fn) {
  const double first = timeMs(1, fn);
  const int reps = std::max(1, std::min(maxReps, int(budgetMs / std::max(first, 1e-3))));
  return timeMs(reps, fn);
}

struct Shape {
  int batch, seqLen, di, width;  // width == seqLen: the dense (causal) selection
  int shorten;
  int64_t tokens() const { return int64_t(batch) * seqLen; }
  std::string name() const {
    return "B=" + std::to_string(batch) + ",T=" + std::to_string(seqLen) + ",HI=8,dI=" +
           std::to_string(di) + ",W=" + std::to_string(width) + (shorten ? ",short" : "");
  }
  double pairs() const {  // sum over tokens of min(t + 1, W)
    double p = 0;
    for (int t = 0; t < seqLen; ++t) p += std::min(t + 1, width);
    return p * batch;
  }
};

struct Bufs {
  float *q = nullptr, *k = nullptr, *w = nullptr, *dLogits = nullptr;
  int32_t* sel = nullptr;
  float *scores = nullptr, *scoresOld = nullptr, *scoresR1 = nullptr;
  float *logits = nullptr, *logitsOld = nullptr;
  float *coef = nullptr, *coefOld = nullptr;
  bf16 *dw = nullptr, *dwOld = nullptr, *dq = nullptr, *dqOld = nullptr;
};

static void alloc(const Shape& s, Bufs& b, uint64_t seed) {
  const int64_t n = s.tokens(), di = s.di, W = s.width, T = s.seqLen;
  CK(cudaMalloc(&b.q, n * kHI * di * 4));
  CK(cudaMalloc(&b.k, n * di * 4));
  CK(cudaMalloc(&b.w, n * kHI * 4));
  CK(cudaMalloc(&b.dLogits, n * W * 4));
  CK(cudaMalloc(&b.sel, n * W * 4));
  CK(cudaMalloc(&b.scores, n * T * 4));
  CK(cudaMalloc(&b.scoresOld, n * T * 4));
  CK(cudaMalloc(&b.logits, n * W * 4));
  CK(cudaMalloc(&b.logitsOld, n * W * 4));
  CK(cudaMalloc(&b.coef, n * kHI * W * 4));
  CK(cudaMalloc(&b.coefOld, n * kHI * W * 4));
  CK(cudaMalloc(&b.dw, n * kHI * 2));
  CK(cudaMalloc(&b.dwOld, n * kHI * 2));
  CK(cudaMalloc(&b.dq, n * kHI * di * 2));
  CK(cudaMalloc(&b.dqOld, n * kHI * di * 2));
  fillF32<<<gridFor(n * kHI * di), 256>>>(b.q, n * kHI * di, seed + 1, 1.0f);
  fillF32<<<gridFor(n * di), 256>>>(b.k, n * di, seed + 2, 1.0f);
  fillF32<<<gridFor(n * kHI), 256>>>(b.w, n * kHI, seed + 3, 0.35f);
  fillF32<<<gridFor(n * W), 256>>>(b.dLogits, n * W, seed + 4, 1e-3f);
  makeSelection<<<gridFor(n * W), 256>>>(n, T, W, seed + 5, s.shorten, b.sel);
  CK(cudaGetLastError());
}

static void freeAll(Bufs& b) {
  for (void* p : {(void*)b.q, (void*)b.k, (void*)b.w, (void*)b.dLogits, (void*)b.sel,
                  (void*)b.scores, (void*)b.scoresOld, (void*)b.logits, (void*)b.logitsOld,
                  (void*)b.coef, (void*)b.coefOld, (void*)b.dw, (void*)b.dwOld, (void*)b.dq,
                  (void*)b.dqOld}) {
    CK(cudaFree(p));
  }
  b = Bufs{};
}

static void poisonAll(const Shape& s, Bufs& b) {
  const int64_t n = s.tokens(), di = s.di, W = s.width, T = s.seqLen;
  fillNan<<<gridFor(n * T), 256>>>(b.scores, n * T);
  fillNan<<<gridFor(n * T), 256>>>(b.scoresOld, n * T);
  fillNan<<<gridFor(n * W), 256>>>(b.logits, n * W);
  fillNan<<<gridFor(n * W), 256>>>(b.logitsOld, n * W);
  fillNan<<<gridFor(n * kHI * W), 256>>>(b.coef, n * kHI * W);
  fillNan<<<gridFor(n * kHI * W), 256>>>(b.coefOld, n * kHI * W);
  fillNanBf16<<<gridFor(n * kHI), 256>>>(b.dw, n * kHI);
  fillNanBf16<<<gridFor(n * kHI), 256>>>(b.dwOld, n * kHI);
  fillNanBf16<<<gridFor(n * kHI * di), 256>>>(b.dq, n * kHI * di);
  fillNanBf16<<<gridFor(n * kHI * di), 256>>>(b.dqOld, n * kHI * di);
  CK(cudaGetLastError());
}

static float cOf(int di) { return float(1.0 / std::sqrt(double(di))); }

static void runScoresNew(const Shape& s, const Bufs& b) {
  CK(launchIndexerScoresTc(0, b.q, b.k, b.w, s.batch, s.seqLen, s.di, b.scores));
}
static void runScoresOld(const Shape& s, const Bufs& b) {
  const size_t rowBytes = size_t(kHI * s.di + kHI) * 4;
  old_scores_kernel<<<unsigned(s.tokens()), 128, rowBytes>>>(b.q, b.k, b.w, s.seqLen, kHI, s.di,
                                                             cOf(s.di), b.scoresOld);
  CK(cudaGetLastError());
}
static void runScoresR1(const Shape& s, const Bufs& b) {  // round 1 (into scoresOld)
  CK(launchIndexerScoresMma(0, b.q, b.k, b.w, s.batch, s.seqLen, s.di, b.scoresOld));
}
static void runLogitsNew(const Shape& s, const Bufs& b) {
  CK(launchIndexerLogitsTc(0, b.q, b.k, b.w, b.sel, s.tokens(), s.seqLen, s.width, s.di,
                           b.logits));
}
static void runLogitsOld(const Shape& s, const Bufs& b) {
  const size_t rowBytes = size_t(kHI * s.di + kHI) * 4;
  old_logits_kernel<<<unsigned(s.tokens()), 128, rowBytes>>>(b.q, b.k, b.w, b.sel, s.seqLen,
                                                             s.width, kHI, s.di, cOf(s.di),
                                                             b.logitsOld);
  CK(cudaGetLastError());
}
static void runBwdNew(const Shape& s, const Bufs& b) {
  CK(launchIndexerQueryBwdTc(0, b.q, b.k, b.w, b.sel, b.dLogits, s.tokens(), s.seqLen, s.width,
                             s.di, b.coef, b.dw, b.dq));
}
static void runBwdOld(const Shape& s, const Bufs& b) {
  const int64_t items = s.tokens() * kHI;
  old_query_bwd_kernel<<<unsigned((items + 3) / 4), 128>>>(
      b.q, b.k, b.w, b.sel, b.dLogits, s.tokens(), s.seqLen, s.width, kHI, s.di, cOf(s.di),
      float(1.0 / std::sqrt(8.0)), b.coefOld, b.dwOld, b.dqOld);
  CK(cudaGetLastError());
}

// Count of valid slots whose logits differ bitwise from the scores, plus padding slots != 0.
static int64_t logitsVsScores(const Shape& s, const std::vector<float>& logits,
                              const std::vector<float>& scores, const std::vector<int32_t>& sel) {
  int64_t bad = 0;
  for (int64_t r = 0; r < s.tokens(); ++r) {
    for (int64_t x = 0; x < s.width; ++x) {
      const int32_t key = sel[r * s.width + x];
      const float l = logits[r * s.width + x];
      if (key < 0) {
        bad += (l == 0.0f) ? 0 : 1;
      } else {
        const float v = scores[r * s.seqLen + key];
        bad += std::memcmp(&l, &v, 4) == 0 ? 0 : 1;
      }
    }
  }
  return bad;
}

// Small shape: every kernel vs fp64 on the CPU and new vs old.
static void checkSmall(const Shape& s, uint64_t seed) {
  Bufs b;
  alloc(s, b, seed);
  poisonAll(s, b);
  runScoresNew(s, b);
  runLogitsNew(s, b);
  runBwdNew(s, b);
  runBwdOld(s, b);
  CK(cudaDeviceSynchronize());
  const int64_t n = s.tokens(), di = s.di, W = s.width, T = s.seqLen;
  const auto q = toHost(b.q, n * kHI * di), k = toHost(b.k, n * di), w = toHost(b.w, n * kHI);
  const auto g = toHost(b.dLogits, n * W);
  const auto sel = toHost(b.sel, n * W);
  const auto scores = toHost(b.scores, n * T), logits = toHost(b.logits, n * W);
  const auto coef = toHost(b.coef, n * kHI * W), coefOld = toHost(b.coefOld, n * kHI * W);
  const auto dw = toHostBf16(b.dw, n * kHI), dwOld = toHostBf16(b.dwOld, n * kHI);
  const auto dq = toHostBf16(b.dq, n * kHI * di), dqOld = toHostBf16(b.dqOld, n * kHI * di);
  const double c = 1.0 / std::sqrt(double(di)), hs = 1.0 / std::sqrt(8.0);
  auto preact = [&](int64_t r, int j, int64_t keyRow) {
    double a = 0;
    for (int d = 0; d < di; ++d) {
      a += double(q[(r * kHI + j) * di + d]) * double(k[keyRow * di + d]);
    }
    return a;
  };
  std::vector<double> sRef(n * T, 0.0), cRef(n * kHI * W, 0.0), dwRef(n * kHI, 0.0),
      dqRef(n * kHI * di, 0.0);
  std::vector<char> coefMask(n * kHI * W, 0);
  for (int64_t r = 0; r < n; ++r) {
    const int64_t t = r % T, base = r - t;
    for (int64_t x = 0; x <= t; ++x) {
      double v = 0;
      for (int j = 0; j < kHI; ++j) {
        v += double(w[r * kHI + j]) * std::max(0.0, preact(r, j, base + x));
      }
      sRef[r * T + x] = c * v;
    }
    for (int j = 0; j < kHI; ++j) {
      for (int64_t x = 0; x < W; ++x) {
        const int32_t key = sel[r * W + x];
        if (key < 0) break;
        const int64_t ci = (r * kHI + j) * W + x;
        const double a = preact(r, j, base + key), gl = g[r * W + x];
        // |a| below the kernels' rounding (~3e-5 here): the sign is a coin toss, so the
        // reference takes the tensor-core kernel's decision (coef != 0) and the old kernel's
        // coef is not compared there.
        const bool ambiguous = std::fabs(a) < 1e-3;
        const bool on = ambiguous ? coef[ci] != 0.0f : a > 0;
        const double cf = on ? gl * w[r * kHI + j] * c : 0.0;
        cRef[ci] = cf;
        coefMask[ci] = ambiguous ? 0 : 1;
        dwRef[r * kHI + j] += on ? gl * a * c * hs : 0.0;
        for (int d = 0; d < di; ++d) dqRef[(r * kHI + j) * di + d] += cf * k[(base + key) * di + d];
      }
    }
  }
  int64_t bad = 0;
  double e = relErr(scores, sRef, bad);
  report("scores_tc_vs_fp64", s.name(), 0, 0, e, 1e-4, bad);
  bad = logitsVsScores(s, logits, scores, sel);
  report("logits_tc_bitwise_scores_tc", s.name(), 0, 0, 0, 0, bad);
  std::vector<char> validMask(coefMask.size(), 0);
  for (int64_t r = 0; r < n; ++r) {
    for (int j = 0; j < kHI; ++j) {
      for (int64_t x = 0; x < W && sel[r * W + x] >= 0; ++x) validMask[(r * kHI + j) * W + x] = 1;
    }
  }
  e = relErr(coef, cRef, bad, &validMask);
  report("bwd_tc_vs_fp64.coef", s.name(), 0, 0, e, 1e-4, bad);
  e = relErr(dw, dwRef, bad);
  report("bwd_tc_vs_fp64.dwPre", s.name(), 0, 0, e, 1e-2, bad);
  e = relErr(dq, dqRef, bad);
  report("bwd_tc_vs_fp64.dq", s.name(), 0, 0, e, 1e-2, bad);
  e = relErr(coefOld, cRef, bad, &coefMask);
  report("bwd_old_vs_fp64.coef", s.name(), 0, 0, e, 1e-4, bad);
  e = relErr(dqOld, dqRef, bad);
  report("bwd_old_vs_fp64.dq", s.name(), 0, 0, e, 1e-2, bad);
  e = relErr(dq, dqOld, bad);
  report("bwd_tc_vs_old.dq", s.name(), 0, 0, e, 1e-2, bad);
  freeAll(b);
}

__global__ void diffNorms(const float* a, const float* b, int64_t n, double* sums) {
  double d = 0, w = 0, bad = 0;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const double x = a[i], y = b[i];
    if (!isfinite(a[i])) bad += 1;
    d += (x - y) * (x - y);
    w += y * y;
  }
  atomicAdd(&sums[0], d);  // checking only, not a training result
  atomicAdd(&sums[1], w);
  atomicAdd(&sums[2], bad);
}

__global__ void diffNormsBf16(const bf16* a, const bf16* b, int64_t n, double* sums) {
  double d = 0, w = 0, bad = 0;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const float af = __bfloat162float(a[i]);
    const double x = af, y = __bfloat162float(b[i]);
    if (!isfinite(af)) bad += 1;
    d += (x - y) * (x - y);
    w += y * y;
  }
  atomicAdd(&sums[0], d);
  atomicAdd(&sums[1], w);
  atomicAdd(&sums[2], bad);
}

static double devErr(const float* a, const float* b, int64_t n, int64_t& bad) {
  double* sums;
  CK(cudaMalloc(&sums, 3 * sizeof(double)));
  CK(cudaMemset(sums, 0, 3 * sizeof(double)));
  diffNorms<<<1024, 256>>>(a, b, n, sums);
  CK(cudaGetLastError());
  double h[3];
  CK(cudaMemcpy(h, sums, sizeof(h), cudaMemcpyDeviceToHost));
  CK(cudaFree(sums));
  bad = int64_t(h[2]);
  return h[1] > 0 ? std::sqrt(h[0] / h[1]) : std::sqrt(h[0]);
}

static double devErrBf16(const bf16* a, const bf16* b, int64_t n, int64_t& bad) {
  double* sums;
  CK(cudaMalloc(&sums, 3 * sizeof(double)));
  CK(cudaMemset(sums, 0, 3 * sizeof(double)));
  diffNormsBf16<<<1024, 256>>>(a, b, n, sums);
  CK(cudaGetLastError());
  double h[3];
  CK(cudaMemcpy(h, sums, sizeof(h), cudaMemcpyDeviceToHost));
  CK(cudaFree(sums));
  bad = int64_t(h[2]);
  return h[1] > 0 ? std::sqrt(h[0] / h[1]) : std::sqrt(h[0]);
}

struct Row {
  std::string shape, pass;
  double oldMs, newMs, tflops, err;
  std::string note;
};

// Benchmark shape: new vs old on the device, then timed.
static void benchShape(const Shape& s, uint64_t seed, bool timeOldScores, std::vector<Row>& rows) {
  Bufs b;
  alloc(s, b, seed);
  poisonAll(s, b);
  const int64_t n = s.tokens(), W = s.width, T = s.seqLen, di = s.di;
  const double scoreFlop = 2.0 * kHI * di * (double(T) * (T + 1) / 2) * s.batch;
  const double selFlop = 2.0 * kHI * di * s.pairs();
  int64_t bad = 0;
  // Scores: new vs round 1 (and vs the scalar kernel when it is timed).
  runScoresNew(s, b);
  runScoresR1(s, b);
  CK(cudaDeviceSynchronize());
  double e = devErr(b.scores, b.scoresOld, n * T, bad);
  report("scores_tc_vs_round1", s.name(), 0, 0, e, 1e-5, bad);
  const double newMs = timeAdaptive(20, 2000, [&] { runScoresNew(s, b); });
  const double r1Ms = timeAdaptive(20, 2000, [&] { runScoresR1(s, b); });
  double oldMs = 0;
  if (timeOldScores) {
    runScoresOld(s, b);
    CK(cudaDeviceSynchronize());
    e = devErr(b.scores, b.scoresOld, n * T, bad);
    report("scores_tc_vs_old", s.name(), 0, 0, e, 1e-4, bad);
    oldMs = timeAdaptive(3, 1500, [&] { runScoresOld(s, b); });
  }
  report("scores_tc_time", s.name(), newMs, scoreFlop / newMs * 1e-9, 0, 1, 0);
  report("scores_round1_time", s.name(), r1Ms, scoreFlop / r1Ms * 1e-9, 0, 1, 0);
  if (timeOldScores) report("scores_old_time", s.name(), oldMs, scoreFlop / oldMs * 1e-9, 0, 1, 0);
  rows.push_back({s.name(), "scores", oldMs, newMs, scoreFlop / newMs * 1e-9, e,
                  "round1 " + std::to_string(r1Ms) + " ms"});
  // Logits: new bitwise vs new scores (checked on the host), new vs old.
  runScoresNew(s, b);
  runLogitsNew(s, b);
  runLogitsOld(s, b);
  CK(cudaDeviceSynchronize());
  {
    const auto scores = toHost(b.scores, n * T), logits = toHost(b.logits, n * W);
    const auto sel = toHost(b.sel, n * W);
    report("logits_tc_bitwise_scores_tc", s.name(), 0, 0, 0, 0,
           logitsVsScores(s, logits, scores, sel));
  }
  e = devErr(b.logits, b.logitsOld, n * W, bad);
  report("logits_tc_vs_old", s.name(), 0, 0, e, 1e-4, bad);
  const double lNew = timeAdaptive(20, 2000, [&] { runLogitsNew(s, b); });
  const double lOld = timeAdaptive(5, 1500, [&] { runLogitsOld(s, b); });
  report("logits_tc_time", s.name(), lNew, selFlop / lNew * 1e-9, e, 1e-4, 0);
  report("logits_old_time", s.name(), lOld, selFlop / lOld * 1e-9, 0, 1, 0);
  rows.push_back({s.name(), "logits", lOld, lNew, selFlop / lNew * 1e-9, e, ""});
  // Query backward: new vs old (coef on valid slots only: both leave padding untouched, so
  // both buffers start as zeros here).
  CK(cudaMemset(b.coef, 0, n * kHI * W * 4));
  CK(cudaMemset(b.coefOld, 0, n * kHI * W * 4));
  runBwdNew(s, b);
  runBwdOld(s, b);
  CK(cudaDeviceSynchronize());
  e = devErr(b.coef, b.coefOld, n * kHI * W, bad);
  report("bwd_tc_vs_old.coef", s.name(), 0, 0, e, 1e-4, bad);
  const double eDw = devErrBf16(b.dw, b.dwOld, n * kHI, bad);
  report("bwd_tc_vs_old.dwPre", s.name(), 0, 0, eDw, 1e-2, bad);
  const double eDq = devErrBf16(b.dq, b.dqOld, n * kHI * di, bad);
  report("bwd_tc_vs_old.dq", s.name(), 0, 0, eDq, 1e-2, bad);
  const double bNew = timeAdaptive(20, 2000, [&] { runBwdNew(s, b); });
  const double bOld = timeAdaptive(5, 2500, [&] { runBwdOld(s, b); });
  report("bwd_q_tc_time", s.name(), bNew, 2 * selFlop / bNew * 1e-9, eDq, 1e-2, 0);
  report("bwd_q_old_time", s.name(), bOld, 2 * selFlop / bOld * 1e-9, 0, 1, 0);
  rows.push_back({s.name(), "bwdQ", bOld, bNew, 2 * selFlop / bNew * 1e-9, eDq, ""});
  // Key-side backward (unchanged scalar kernel), timed for the record on the new coef.
  {
    const auto sel = toHost(b.sel, n * W);
    std::vector<int32_t> keyStart(n + 1, 0), entries;
    for (int64_t r = 0; r < n; ++r) {
      const int64_t base = r - r % T;
      for (int64_t x = 0; x < W && sel[r * W + x] >= 0; ++x) ++keyStart[base + sel[r * W + x] + 1];
    }
    for (int64_t m = 0; m < n; ++m) keyStart[m + 1] += keyStart[m];
    entries.assign(std::max<int64_t>(keyStart[n], 1), 0);
    std::vector<int32_t> fill(keyStart.begin(), keyStart.end() - 1);
    for (int64_t r = 0; r < n; ++r) {
      const int64_t base = r - r % T;
      for (int64_t x = 0; x < W && sel[r * W + x] >= 0; ++x) {
        entries[fill[base + sel[r * W + x]]++] = int32_t(r * W + x);
      }
    }
    int32_t *dStart, *dEntries;
    float* dk;
    CK(cudaMalloc(&dStart, (n + 1) * 4));
    CK(cudaMalloc(&dEntries, entries.size() * 4));
    CK(cudaMalloc(&dk, n * di * 4));
    CK(cudaMemcpy(dStart, keyStart.data(), (n + 1) * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dEntries, entries.data(), entries.size() * 4, cudaMemcpyHostToDevice));
    const double kMs = timeAdaptive(10, 2000, [&] {
      old_key_bwd_kernel<<<unsigned((n + 3) / 4), 128>>>(b.q, b.coef, dStart, dEntries, n, W,
                                                         kHI, int(di), dk);
      CK(cudaGetLastError());
    });
    report("bwd_k_scalar_time", s.name(), kMs, selFlop / kMs * 1e-9, 0, 1, 0);
    rows.push_back({s.name(), "bwdK", kMs, kMs, selFlop / kMs * 1e-9, 0, "scalar, unchanged"});
    CK(cudaFree(dStart));
    CK(cudaFree(dEntries));
    CK(cudaFree(dk));
  }
  freeAll(b);
}

// ---- Core backward phase 2 (dk, dv) ----
__global__ void fillBf16(bf16* p, int64_t n, uint64_t seed, float scale) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const float u = float(hash32(seed * 0x9E3779B97F4A7C15ULL + uint64_t(i))) * 2.3283064e-10f;
    p[i] = __float2bfloat16(scale * (2.0f * u - 1.0f));
  }
}

struct KeyShape {
  int batch, seqLen, heads, kvHeads, hd, width, shorten;
  int64_t tokens() const { return int64_t(batch) * seqLen; }
  std::string name() const {
    return "B=" + std::to_string(batch) + ",T=" + std::to_string(seqLen) + ",H=" +
           std::to_string(heads) + ",Hkv=" + std::to_string(kvHeads) + ",dh=" +
           std::to_string(hd) + ",W=" + std::to_string(width) + (shorten ? ",short" : "");
  }
};

struct KeyBufs {
  bf16 *q = nullptr, *dO = nullptr, *dk = nullptr, *dv = nullptr, *dkR1 = nullptr,
       *dvR1 = nullptr;
  float *dz = nullptr, *p = nullptr, *partials = nullptr;
  int32_t* sel = nullptr;
  int64_t partialFloats = 0;
};

static void allocKey(const KeyShape& s, KeyBufs& b, uint64_t seed, int minSpan) {
  const int64_t n = s.tokens(), qw = int64_t(s.heads) * s.hd, kvw = int64_t(s.kvHeads) * s.hd;
  const int64_t hw = n * s.heads * s.width;
  CK(cudaMalloc(&b.q, n * qw * 2));
  CK(cudaMalloc(&b.dO, n * qw * 2));
  CK(cudaMalloc(&b.dk, n * kvw * 2));
  CK(cudaMalloc(&b.dv, n * kvw * 2));
  CK(cudaMalloc(&b.dkR1, n * kvw * 2));
  CK(cudaMalloc(&b.dvR1, n * kvw * 2));
  CK(cudaMalloc(&b.dz, hw * 4));
  CK(cudaMalloc(&b.p, hw * 4));
  CK(cudaMalloc(&b.sel, n * s.width * 4));
  const int span = std::max(1, minSpan);
  b.partialFloats = 2 * int64_t(keyBwdParts(s.seqLen, span)) * n * kvw;
  CK(cudaMalloc(&b.partials, b.partialFloats * 4));
  fillBf16<<<gridFor(n * qw), 256>>>(b.q, n * qw, seed + 1, 2.0f);
  fillBf16<<<gridFor(n * qw), 256>>>(b.dO, n * qw, seed + 2, 1.0f);
  fillF32<<<gridFor(hw), 256>>>(b.dz, hw, seed + 3, 1e-2f);
  fillF32<<<gridFor(hw), 256>>>(b.p, hw, seed + 4, 1e-2f);
  makeSelection<<<gridFor(n * s.width), 256>>>(n, s.seqLen, s.width, seed + 5, s.shorten, b.sel);
  CK(cudaGetLastError());
}

static void freeKey(KeyBufs& b) {
  for (void* x : {(void*)b.q, (void*)b.dO, (void*)b.dk, (void*)b.dv, (void*)b.dkR1,
                  (void*)b.dvR1, (void*)b.dz, (void*)b.p, (void*)b.partials, (void*)b.sel}) {
    CK(cudaFree(x));
  }
  b = KeyBufs{};
}

static CoreShape keyCoreShape(const KeyShape& s) {
  return makeCoreShape(s.seqLen, s.width, s.heads, s.kvHeads, s.hd);
}

static void runKeySplit(const KeyShape& s, const KeyBufs& b, int span) {
  const CoreShape cs = keyCoreShape(s);
  CK(s.hd == 64 ? launchKeyBwdSplitT<64>(0, b.dO, b.q, b.p, b.dz, b.sel, s.batch, cs, span,
                                         b.partials, b.dk, b.dv)
                : launchKeyBwdSplitT<128>(0, b.dO, b.q, b.p, b.dz, b.sel, s.batch, cs, span,
                                          b.partials, b.dk, b.dv));
}

static void runKeyR1(const KeyShape& s, const KeyBufs& b) {
  const CoreShape cs = keyCoreShape(s);
  CK(s.hd == 64 ? launchKeyBwdMmaT<64>(0, b.dO, b.q, b.p, b.dz, b.sel, s.batch, cs, b.dkR1,
                                       b.dvR1)
                : launchKeyBwdMmaT<128>(0, b.dO, b.q, b.p, b.dz, b.sel, s.batch, cs, b.dkR1,
                                        b.dvR1));
}

static void poisonKey(const KeyShape& s, KeyBufs& b) {
  const int64_t m = s.tokens() * s.kvHeads * s.hd;
  for (bf16* x : {b.dk, b.dv, b.dkR1, b.dvR1}) fillNanBf16<<<gridFor(m), 256>>>(x, m);
  fillNan<<<gridFor(b.partialFloats), 256>>>(b.partials, b.partialFloats);
  CK(cudaGetLastError());
}

static int64_t bitwiseDiff(const std::vector<bf16>& a, const std::vector<bf16>& b) {
  int64_t bad = 0;
  for (size_t i = 0; i < a.size(); ++i) bad += std::memcmp(&a[i], &b[i], 2) == 0 ? 0 : 1;
  return bad;
}

static void checkKeySmall(const KeyShape& s, uint64_t seed) {
  const int spans[3] = {s.seqLen, 64, 50};
  KeyBufs b;
  allocKey(s, b, seed, 50);
  const int64_t n = s.tokens(), qw = int64_t(s.heads) * s.hd, kvw = int64_t(s.kvHeads) * s.hd;
  const int group = s.heads / s.kvHeads;
  const double scale = 1.0 / std::sqrt(double(s.hd));
  std::vector<double> dkRef, dvRef;
  {
    const auto q = toHostBf16(b.q, n * qw), dO = toHostBf16(b.dO, n * qw);
    const auto dz = toHost(b.dz, n * s.heads * s.width), p = toHost(b.p, n * s.heads * s.width);
    const auto sel = toHost(b.sel, n * s.width);
    dkRef.assign(n * kvw, 0.0);
    dvRef.assign(n * kvw, 0.0);
    for (int64_t r = 0; r < n; ++r) {
      const int64_t base = r - r % s.seqLen;
      for (int x = 0; x < s.width && sel[r * s.width + x] >= 0; ++x) {
        const int64_t m = base + sel[r * s.width + x];
        for (int h = 0; h < s.heads; ++h) {
          // bf16-rounded dz and p, as the kernel's A operands
          const double z = __bfloat162float(__float2bfloat16(dz[(r * s.heads + h) * s.width + x]));
          const double pv = __bfloat162float(__float2bfloat16(p[(r * s.heads + h) * s.width + x]));
          const int64_t out = m * kvw + int64_t(h / group) * s.hd;
          for (int d = 0; d < s.hd; ++d) {
            dkRef[out + d] += scale * z * q[r * qw + int64_t(h) * s.hd + d];
            dvRef[out + d] += pv * dO[r * qw + int64_t(h) * s.hd + d];
          }
        }
      }
    }
  }
  poisonKey(s, b);
  runKeyR1(s, b);
  CK(cudaDeviceSynchronize());
  const auto dkR1 = toHost(b.dkR1, n * kvw), dvR1 = toHost(b.dvR1, n * kvw);
  int64_t bad = 0;
  double e = relErr(toHostBf16(b.dkR1, n * kvw), dkRef, bad);
  report("key_bwd_round1_vs_fp64.dk", s.name(), 0, 0, e, 1e-2, bad);
  for (int span : spans) {
    poisonKey(s, b);
    runKeySplit(s, b, span);
    CK(cudaDeviceSynchronize());
    const std::string tag = "span=" + std::to_string(span);
    e = relErr(toHostBf16(b.dk, n * kvw), dkRef, bad);
    report("key_bwd_split_vs_fp64.dk." + tag, s.name(), 0, 0, e, 1e-2, bad);
    e = relErr(toHostBf16(b.dv, n * kvw), dvRef, bad);
    report("key_bwd_split_vs_fp64.dv." + tag, s.name(), 0, 0, e, 1e-2, bad);
    if (span >= s.seqLen) {
      const int64_t diff = bitwiseDiff(toHost(b.dk, n * kvw), dkR1) +
                           bitwiseDiff(toHost(b.dv, n * kvw), dvR1);
      report("key_bwd_split_bitwise_round1." + tag, s.name(), 0, 0, 0, 0, diff);
    }
  }
  freeKey(b);
}

static void benchKey(const KeyShape& s, uint64_t seed, std::vector<Row>& rows) {
  const int span = keyBwdSpan(s.seqLen);
  KeyBufs b;
  allocKey(s, b, seed, span);
  poisonKey(s, b);
  runKeyR1(s, b);
  runKeySplit(s, b, span);
  CK(cudaDeviceSynchronize());
  const int64_t m = s.tokens() * s.kvHeads * s.hd;
  int64_t bad = 0;
  const double ek = devErrBf16(b.dk, b.dkR1, m, bad);
  report("key_bwd_split_vs_round1.dk", s.name(), 0, 0, ek, 1e-2, bad);
  const double ev = devErrBf16(b.dv, b.dvR1, m, bad);
  report("key_bwd_split_vs_round1.dv", s.name(), 0, 0, ev, 1e-2, bad);
  const double newMs = timeAdaptive(20, 3000, [&] { runKeySplit(s, b, span); });
  const double r1Ms = timeAdaptive(5, 2000, [&] { runKeyR1(s, b); });
  report("key_bwd_split_time", s.name(), newMs, 0, std::max(ek, ev), 1e-2, 0);
  report("key_bwd_round1_time", s.name(), r1Ms, 0, 0, 1, 0);
  rows.push_back({s.name(), "bwdK", r1Ms, newMs, 0, std::max(ek, ev),
                  "core dk/dv, span " + std::to_string(span) + ", parts " +
                      std::to_string(keyBwdParts(s.seqLen, span))});
  freeKey(b);
}

int main() {
  uint64_t seed = 1;
  // 1. Small awkward shapes vs fp64.
  for (const Shape& s : {Shape{2, 70, 64, 40, 1}, Shape{2, 70, 64, 70, 0},
                         Shape{1, 130, 128, 100, 1}, Shape{3, 33, 64, 8, 1},
                         Shape{1, 17, 128, 17, 1}, Shape{2, 129, 64, 21, 0}}) {
    checkSmall(s, seed += 100);
  }
  for (const KeyShape& s :
       {KeyShape{2, 70, 16, 1, 128, 40, 1}, KeyShape{2, 130, 20, 2, 64, 100, 0},
        KeyShape{1, 200, 40, 2, 128, 200, 1}, KeyShape{3, 33, 16, 1, 64, 8, 0}}) {
    checkKeySmall(s, seed += 100);
  }
  // 2. Benchmark shapes: the sparse stage (top-512 / top-2048) and the dense warm-up (W = T).
  std::vector<Row> rows;
  benchShape(Shape{4, 4096, 64, 512, 0}, seed += 100, true, rows);
  benchShape(Shape{4, 4096, 64, 4096, 0}, seed += 100, false, rows);
  benchShape(Shape{1, 32768, 64, 2048, 0}, seed += 100, false, rows);
  benchKey(KeyShape{4, 4096, 16, 1, 128, 512, 0}, seed += 100, rows);
  benchKey(KeyShape{4, 4096, 16, 1, 128, 4096, 0}, seed += 100, rows);
  benchKey(KeyShape{1, 32768, 16, 1, 128, 2048, 0}, seed += 100, rows);
  CK(cudaDeviceSynchronize());
  std::printf("\n%-36s %6s %10s %10s %8s %8s %10s  %s\n", "shape", "pass", "old ms", "new ms",
              "speedup", "TFLOP/s", "err", "note");
  for (const Row& r : rows) {
    std::printf("%-36s %6s %10.3f %10.3f %8.1f %8.1f %10.2e  %s\n", r.shape.c_str(),
                r.pass.c_str(), r.oldMs, r.newMs, r.oldMs > 0 ? r.oldMs / r.newMs : 0.0, r.tflops,
                r.err, r.note.c_str());
  }
  std::printf("%s: %d failure(s)\n", gFails ? "FAIL" : "PASS", gFails);
  return gFails ? 1 : 0;
}
