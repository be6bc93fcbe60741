// Sparse attention core forward and backward: the tensor-core kernels
// (sparse_attention_fwd_mma_kernel, sparse_attention_query_bwd_mma_kernel) against the engine's
// previous warp-per-(query, head) kernels and a plain fp64 CPU reference. All kernels come from
// engine/ops/sparse_attention/sparse_attention_core_{fwd,bwd}.cuh (what the engine runs).
// Build:
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90,code=sm_90 -lineinfo -Xptxas -v -lcublas \
//        -I/work/main/engine -o /work/main/.scratch/bin/sparse_attention_01 \
//        bench/scratch/sparse_attention_01.cu
// Run: .scratch/bin/sparse_attention_01   (no arguments; exits 1 on any FAIL or CUDA error)
// 1. Awkward small shapes vs the fp64 CPU reference, every kernel variant: T not a multiple of 64,
//    W < 64, H = 1, 16, 20 (Hkv = 2, groups of 10), 40 (Hkv = 2: two m16 tiles per group),
//    dh 64 / 128 (and 40: scalar only), rows with fewer valid keys than min(t + 1, W), -1
//    padding, the dense (causal) selection.
// 2. Benchmark shapes, new vs old kernel on device (relative norms), then timed (cudaEvents,
//    median of 20 for the new kernel, of 3 for the old one, which is slow):
//    B=4 T=4096 H=16 Hkv=1 dh=128 W=512 (sparse stage), W=T (dense stage), B=1 T=32768 W=2048.
//    (Slow old kernels: after one warm run, as many runs as fit in ~1.5 s, at most 2-3.)
//    K/V are not rotated: the layer gathers them right after writing them (8-16 MB, L2-resident),
//    and the probs output (0.5-4.3 GB) dwarfs the cache anyway.
// Backward: phase 1 (dz, dq) old vs tensor cores; phase 2 (dk, dv) scalar (old) vs vector loads
// (bitwise) vs tensor cores (sparse_attention_key_bwd_mma_kernel); the whole backward (phases
// 1-3) old vs new (the engine's path). The scalar/vector phase 2 read a host-built transposed
// selection.
// FLOP: forward 4 H dh sum_t min(t + 1, W) per sequence (QK^T and PV), backward 2.5x that;
// phase 1 alone does half the backward's FLOP (dO V^T and dz K).
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

#include "ops/sparse_attention/sparse_attention_core_bwd.cuh"
#include "ops/sparse_attention/sparse_attention_core_fwd.cuh"
#include "ops/sparse_attention/indexer_scores_mma.cuh"

using namespace moewb::engine::cuda::sparse_detail;
using bf16 = __nv_bfloat16;

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

__host__ __device__ inline uint32_t hash32(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return uint32_t(x);
}

__global__ void fillBf16(bf16* p, int64_t n, uint64_t seed, float scale) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const float u = float(hash32(seed * 0x9E3779B97F4A7C15ULL + uint64_t(i))) * 2.3283064e-10f;
    p[i] = __float2bfloat16(scale * (2.0f * u - 1.0f));
  }
}

// Row r = b T + t: count = min(t + 1, W) valid ascending keys (shortened on a third of the rows
// when `shorten`), then -1. t + 1 <= W: keys 0.. (causal); else one random key per bucket
// [i (t+1) / W, (i+1) (t+1) / W).
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

// sums[0] += (a - b)^2, sums[1] += b^2, sums[2] += #non-finite a (checking only).
__global__ void diffNorms(const float* a, const float* b, int64_t n, double* sums) {
  double d = 0, w = 0, bad = 0;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const double x = a[i], y = b[i];
    if (!isfinite(a[i])) bad += 1;
    d += (x - y) * (x - y);
    w += y * y;
  }
  atomicAdd(&sums[0], d);
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

struct Shape {
  int batch;
  int64_t seqLen;
  int heads, kvHeads, hd;
  int64_t width;
  int shorten;
  std::string name() const {
    return "B=" + std::to_string(batch) + ",T=" + std::to_string(seqLen) +
           ",H=" + std::to_string(heads) + ",Hkv=" + std::to_string(kvHeads) +
           ",dh=" + std::to_string(hd) + ",W=" + std::to_string(width) +
           (shorten ? ",short" : "");
  }
  int64_t tokens() const { return int64_t(batch) * seqLen; }
  double flops() const {
    double pairs = 0;
    for (int64_t t = 0; t < seqLen; ++t) pairs += double(std::min<int64_t>(t + 1, width));
    return 4.0 * heads * hd * pairs * batch;
  }
};

struct Buffers {
  bf16 *q = nullptr, *k = nullptr, *v = nullptr, *sink = nullptr, *ctx = nullptr;
  int32_t* sel = nullptr;
  float *probs = nullptr, *sinkProbs = nullptr;
};

static void allocInputs(const Shape& s, Buffers& b, uint64_t seed) {
  const int64_t n = s.tokens();
  CK(cudaMalloc(&b.q, n * s.heads * s.hd * sizeof(bf16)));
  CK(cudaMalloc(&b.k, n * s.kvHeads * s.hd * sizeof(bf16)));
  CK(cudaMalloc(&b.v, n * s.kvHeads * s.hd * sizeof(bf16)));
  CK(cudaMalloc(&b.sink, s.heads * sizeof(bf16)));
  CK(cudaMalloc(&b.sel, n * s.width * sizeof(int32_t)));
  fillBf16<<<1024, 256>>>(b.q, n * s.heads * s.hd, seed + 1, 2.0f);
  fillBf16<<<1024, 256>>>(b.k, n * s.kvHeads * s.hd, seed + 2, 1.0f);
  fillBf16<<<1024, 256>>>(b.v, n * s.kvHeads * s.hd, seed + 3, 1.0f);
  fillBf16<<<1, 256>>>(b.sink, s.heads, seed + 4, 2.0f);
  makeSelection<<<4096, 256>>>(n, s.seqLen, s.width, seed + 5, s.shorten, b.sel);
  CK(cudaGetLastError());
}

static void allocOutputs(const Shape& s, Buffers& b) {
  const int64_t n = s.tokens();
  CK(cudaMalloc(&b.probs, n * s.heads * s.width * sizeof(float)));
  CK(cudaMalloc(&b.sinkProbs, n * s.heads * sizeof(float)));
  CK(cudaMalloc(&b.ctx, n * s.heads * s.hd * sizeof(bf16)));
}

static void poison(const Shape& s, Buffers& b) {
  const int64_t n = s.tokens();
  CK(cudaMemset(b.probs, 0xff, n * s.heads * s.width * sizeof(float)));  // NaN
  CK(cudaMemset(b.sinkProbs, 0xff, n * s.heads * sizeof(float)));
  CK(cudaMemset(b.ctx, 0xff, n * s.heads * s.hd * sizeof(bf16)));
}

static void freeAll(Buffers& b) {
  for (void* p : {(void*)b.q, (void*)b.k, (void*)b.v, (void*)b.sink, (void*)b.ctx, (void*)b.sel,
                  (void*)b.probs, (void*)b.sinkProbs}) {
    if (p) CK(cudaFree(p));
  }
  b = Buffers{};
}

static void runKernel(bool mma, const Shape& s, const Buffers& in, Buffers& out) {
  const CoreShape cs = makeCoreShape(s.seqLen, s.width, s.heads, s.kvHeads, s.hd);
  if (mma) {
    CK(launchSparseFwdMma(0, in.q, in.k, in.v, in.sink, in.sel, s.batch, cs, out.probs,
                          out.sinkProbs, out.ctx));
  } else {
    CK(launchSparseFwdWarp(0, in.q, in.k, in.v, in.sink, in.sel, s.tokens(), cs, out.probs,
                           out.sinkProbs, out.ctx));
  }
}

static std::vector<float> toHostBf16(const bf16* p, int64_t n) {
  std::vector<bf16> raw(n);
  CK(cudaMemcpy(raw.data(), p, n * sizeof(bf16), cudaMemcpyDeviceToHost));
  std::vector<float> out(n);
  for (int64_t i = 0; i < n; ++i) out[i] = __bfloat162float(raw[i]);
  return out;
}

template <class T>
static std::vector<T> toHost(const T* p, int64_t n) {
  std::vector<T> out(n);
  CK(cudaMemcpy(out.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost));
  return out;
}

static double relErr(const std::vector<float>& got, const std::vector<double>& want, int64_t& bad) {
  double d = 0, w = 0;
  bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i])) ++bad;
    d += (got[i] - want[i]) * (got[i] - want[i]);
    w += want[i] * want[i];
  }
  return std::sqrt(d / std::max(w, 1e-300));
}

static void report(const std::string& name, const std::string& shape, double ms, double tflops,
                   double err, double tol, int64_t bad) {
  const bool pass = err <= tol && bad == 0;
  if (!pass) ++gFails;
  std::printf("RESULT name=%s shape=%s ms=%.4f tflops=%.2f err=%.3e status=%s%s\n", name.c_str(),
              shape.c_str(), ms, tflops, err, pass ? "PASS" : "FAIL",
              bad ? (" nonfinite=" + std::to_string(bad)).c_str() : "");
}


// Transposed selection on the host: entries of key token m in query order (as the engine's).
static void transposeOnHost(const Shape& s, const std::vector<int32_t>& sel,
                            std::vector<int32_t>& keyStart, std::vector<int32_t>& entries) {
  const int64_t n = s.tokens();
  keyStart.assign(n + 1, 0);
  for (int64_t r = 0; r < n; ++r) {
    const int64_t base = r - r % s.seqLen;
    for (int64_t i = 0; i < s.width && sel[r * s.width + i] >= 0; ++i) {
      ++keyStart[base + sel[r * s.width + i] + 1];
    }
  }
  for (int64_t m = 0; m < n; ++m) keyStart[m + 1] += keyStart[m];
  entries.assign(std::max<int64_t>(keyStart[n], 1), 0);
  std::vector<int32_t> fill(keyStart.begin(), keyStart.end() - 1);
  for (int64_t r = 0; r < n; ++r) {
    const int64_t base = r - r % s.seqLen;
    for (int64_t i = 0; i < s.width && sel[r * s.width + i] >= 0; ++i) {
      entries[fill[base + sel[r * s.width + i]]++] = int32_t(r * s.width + i);
    }
  }
}

struct BwdBuffers {
  bf16 *dOut = nullptr, *dq = nullptr, *dk = nullptr, *dv = nullptr;
  float *dz = nullptr, *sinkTerms = nullptr, *dSink = nullptr;
  int32_t *keyStart = nullptr, *entries = nullptr;
};

static void allocBwd(const Shape& s, const Buffers& in, BwdBuffers& b, uint64_t seed,
                     bool withTranspose) {
  const int64_t n = s.tokens(), qn = n * s.heads * s.hd, kvn = n * s.kvHeads * s.hd;
  CK(cudaMalloc(&b.dOut, qn * sizeof(bf16)));
  CK(cudaMalloc(&b.dq, qn * sizeof(bf16)));
  CK(cudaMalloc(&b.dk, kvn * sizeof(bf16)));
  CK(cudaMalloc(&b.dv, kvn * sizeof(bf16)));
  CK(cudaMalloc(&b.dz, n * s.heads * s.width * sizeof(float)));
  CK(cudaMalloc(&b.sinkTerms, n * s.heads * sizeof(float)));
  CK(cudaMalloc(&b.dSink, s.heads * sizeof(float)));
  fillBf16<<<1024, 256>>>(b.dOut, qn, seed, 1.0f);
  CK(cudaGetLastError());
  if (withTranspose) {
    const std::vector<int32_t> sel = toHost(in.sel, n * s.width);
    std::vector<int32_t> keyStart, entries;
    transposeOnHost(s, sel, keyStart, entries);
    CK(cudaMalloc(&b.keyStart, keyStart.size() * sizeof(int32_t)));
    CK(cudaMalloc(&b.entries, entries.size() * sizeof(int32_t)));
    CK(cudaMemcpy(b.keyStart, keyStart.data(), keyStart.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(b.entries, entries.data(), entries.size() * 4, cudaMemcpyHostToDevice));
  }
}

static void poisonBwd(const Shape& s, BwdBuffers& b) {
  const int64_t n = s.tokens();
  CK(cudaMemset(b.dq, 0xff, n * s.heads * s.hd * sizeof(bf16)));
  CK(cudaMemset(b.dk, 0xff, n * s.kvHeads * s.hd * sizeof(bf16)));
  CK(cudaMemset(b.dv, 0xff, n * s.kvHeads * s.hd * sizeof(bf16)));
  CK(cudaMemset(b.sinkTerms, 0xff, n * s.heads * sizeof(float)));
  CK(cudaMemset(b.dSink, 0, s.heads * sizeof(float)));  // the backward adds into it
}

static void freeBwd(BwdBuffers& b) {
  for (void* p : {(void*)b.dOut, (void*)b.dq, (void*)b.dk, (void*)b.dv, (void*)b.dz,
                  (void*)b.sinkTerms, (void*)b.dSink, (void*)b.keyStart, (void*)b.entries}) {
    if (p) CK(cudaFree(p));
  }
  b = BwdBuffers{};
}

static CoreBwdArgs bwdArgs(const Buffers& in, const Buffers& fwd, const BwdBuffers& b) {
  return {b.dOut, in.q,  in.k,      in.v,         fwd.ctx, in.sel, fwd.probs, fwd.sinkProbs,
          b.keyStart, b.entries, b.dz, b.sinkTerms, b.dq, b.dk, b.dv, b.dSink};
}

// Whole backward: old = scalar phases 1 and 2; new = tensor cores for both (the engine's path).
static void runBwd(bool mma, const Shape& s, const Buffers& in, const Buffers& fwd,
                   const BwdBuffers& b, KeyBwdPath keyPath = KeyBwdPath::kMma) {
  const CoreShape cs = makeCoreShape(s.seqLen, s.width, s.heads, s.kvHeads, s.hd);
  CK(launchSparseBwd(0, s.batch, cs, bwdArgs(in, fwd, b), mma,
                     mma ? keyPath : KeyBwdPath::kScalar));
}

// Phase 2 only, on b.dz, into (dk, dv).
static void runKeyBwd(KeyBwdPath path, const Shape& s, const Buffers& in, const Buffers& fwd,
                      const BwdBuffers& b, bf16* dk, bf16* dv) {
  const CoreShape cs = makeCoreShape(s.seqLen, s.width, s.heads, s.kvHeads, s.hd);
  const int64_t n = s.tokens();
  const unsigned blocks = unsigned((n * s.kvHeads + 3) / 4);
  if (path == KeyBwdPath::kMma) {
    CK(launchKeyBwdMmaT<128>(0, b.dOut, in.q, fwd.probs, b.dz, in.sel, s.batch, cs, dk, dv));
  } else if (path == KeyBwdPath::kVector) {
    sparse_attention_key_bwd_vec_kernel<4><<<blocks, kCoreWarpThreads>>>(
        b.dOut, in.q, fwd.probs, b.dz, b.keyStart, b.entries, n, s.kvHeads, cs, dk, dv);
    CK(cudaGetLastError());
  } else {
    sparse_attention_key_bwd_kernel<<<blocks, kCoreWarpThreads>>>(
        b.dOut, in.q, fwd.probs, b.dz, b.keyStart, b.entries, n, s.kvHeads, cs, dk, dv);
    CK(cudaGetLastError());
  }
}

// Phase 1 only (dz, dq, sink terms).
static void runQueryBwd(bool mma, const Shape& s, const Buffers& in, const Buffers& fwd,
                        const BwdBuffers& b) {
  const CoreShape cs = makeCoreShape(s.seqLen, s.width, s.heads, s.kvHeads, s.hd);
  if (mma) {
    CK(launchQueryBwdMmaT<128>(0, b.dOut, in.k, in.v, fwd.ctx, in.sel, fwd.probs, fwd.sinkProbs,
                               s.batch, cs, b.dz, b.dq, b.sinkTerms));
  } else {
    const int64_t pairs = s.tokens() * s.heads;
    sparse_attention_query_bwd_kernel<<<unsigned((pairs + 3) / 4), kCoreWarpThreads>>>(
        b.dOut, in.q, in.k, in.v, fwd.ctx, in.sel, fwd.probs, fwd.sinkProbs, s.tokens(), cs,
        b.dz, b.dq, b.sinkTerms);
    CK(cudaGetLastError());
  }
}

static double relErrF(const std::vector<float>& got, const std::vector<float>& want,
                      int64_t& bad) {
  std::vector<double> w(want.begin(), want.end());
  return relErr(got, w, bad);
}

// fp64 CPU reference of the forward on the device inputs (bf16 values).
static void checkSmall(const Shape& s, uint64_t seed) {
  Buffers in, out;
  allocInputs(s, in, seed);
  allocOutputs(s, out);
  const int64_t n = s.tokens(), qw = int64_t(s.heads) * s.hd, kvw = int64_t(s.kvHeads) * s.hd;
  const std::vector<float> q = toHostBf16(in.q, n * qw), k = toHostBf16(in.k, n * kvw),
                           v = toHostBf16(in.v, n * kvw), sink = toHostBf16(in.sink, s.heads);
  const std::vector<int32_t> sel = toHost(in.sel, n * s.width);
  std::vector<double> probs(n * s.heads * s.width, 0.0), sinkProbs(n * s.heads),
      ctx(n * qw, 0.0);
  const double scale = 1.0 / std::sqrt(double(s.hd));
  const int group = s.heads / s.kvHeads;
  for (int64_t r = 0; r < n; ++r) {
    const int64_t base = r - r % s.seqLen;
    for (int h = 0; h < s.heads; ++h) {
      const int64_t kvOff = int64_t(h / group) * s.hd;
      double* p = &probs[(r * s.heads + h) * s.width];
      double m = sink[h];
      int64_t count = 0;
      for (; count < s.width && sel[r * s.width + count] >= 0; ++count) {
        const int64_t key = base + sel[r * s.width + count];
        double z = 0;
        for (int d = 0; d < s.hd; ++d) {
          z += double(q[r * qw + h * s.hd + d]) * k[key * kvw + kvOff + d];
        }
        p[count] = z * scale;
        m = std::max(m, p[count]);
      }
      double sum = std::exp(sink[h] - m);
      for (int64_t i = 0; i < count; ++i) sum += (p[i] = std::exp(p[i] - m));
      for (int64_t i = 0; i < count; ++i) p[i] /= sum;
      sinkProbs[r * s.heads + h] = std::exp(sink[h] - m) / sum;
      for (int64_t i = 0; i < count; ++i) {
        const int64_t key = base + sel[r * s.width + i];
        for (int d = 0; d < s.hd; ++d) {
          ctx[r * qw + h * s.hd + d] += p[i] * v[key * kvw + kvOff + d];
        }
      }
    }
  }
  for (int mma = 0; mma < 2; ++mma) {
    if (mma && !sparseFwdMmaSupported(s.hd)) continue;
    poison(s, out);
    runKernel(mma, s, in, out);
    CK(cudaDeviceSynchronize());
    int64_t bad = 0;
    const std::string kname = mma ? "fwd_mma" : "fwd_warp";
    const double ep = relErr(toHost(out.probs, n * s.heads * s.width), probs, bad);
    report(kname + "_vs_fp64.probs", s.name(), 0, 0, ep, 1e-4, bad);
    const double es = relErr(toHost(out.sinkProbs, n * s.heads), sinkProbs, bad);
    report(kname + "_vs_fp64.sinkProbs", s.name(), 0, 0, es, 1e-4, bad);
    const double ec = relErr(toHostBf16(out.ctx, n * qw), ctx, bad);
    report(kname + "_vs_fp64.context", s.name(), 0, 0, ec, 1e-2, bad);
  }

  // Backward on the GPU's forward outputs (tensor-core forward), against fp64 on those.
  poison(s, out);
  if (sparseFwdMmaSupported(s.hd)) runKernel(true, s, in, out); else runKernel(false, s, in, out);
  BwdBuffers bb;
  allocBwd(s, in, bb, seed + 50, true);
  const std::vector<float> dOut = toHostBf16(bb.dOut, n * qw), ctxGpu = toHostBf16(out.ctx, n * qw);
  const std::vector<float> probsGpu = toHost(out.probs, n * s.heads * s.width);
  const std::vector<float> sinkGpu = toHost(out.sinkProbs, n * s.heads);
  std::vector<double> dq(n * qw, 0.0), dk(n * kvw, 0.0), dv(n * kvw, 0.0), dSink(s.heads, 0.0);
  for (int64_t r = 0; r < n; ++r) {
    const int64_t base = r - r % s.seqLen;
    for (int h = 0; h < s.heads; ++h) {
      const int64_t kvOff = int64_t(h / group) * s.hd, qo = r * qw + h * s.hd;
      double delta = 0;
      for (int d = 0; d < s.hd; ++d) delta += double(dOut[qo + d]) * ctxGpu[qo + d];
      dSink[h] += -double(sinkGpu[r * s.heads + h]) * delta;
      for (int64_t i = 0; i < s.width && sel[r * s.width + i] >= 0; ++i) {
        const int64_t key = base + sel[r * s.width + i];
        const double p = probsGpu[(r * s.heads + h) * s.width + i];
        double dp = 0;
        for (int d = 0; d < s.hd; ++d) dp += double(dOut[qo + d]) * v[key * kvw + kvOff + d];
        const double dzv = p * (dp - delta);
        for (int d = 0; d < s.hd; ++d) {
          dq[qo + d] += scale * dzv * k[key * kvw + kvOff + d];
          dk[key * kvw + kvOff + d] += scale * dzv * q[qo + d];
          dv[key * kvw + kvOff + d] += p * dOut[qo + d];
        }
      }
    }
  }
  for (int variant = 0; variant < 3; ++variant) {  // scalar, tensor cores, phase 2 vectorised
    const bool mma = variant > 0;
    if (mma && !sparseFwdMmaSupported(s.hd)) continue;
    poisonBwd(s, bb);
    runBwd(mma, s, in, out, bb, variant == 2 ? KeyBwdPath::kVector : KeyBwdPath::kMma);
    CK(cudaDeviceSynchronize());
    const std::string kname = variant == 0 ? "bwd_warp" : variant == 1 ? "bwd_mma" : "bwd_vec";
    int64_t bad = 0;
    double e = relErr(toHostBf16(bb.dq, n * qw), dq, bad);
    report(kname + "_vs_fp64.dq", s.name(), 0, 0, e, 1e-2, bad);
    e = relErr(toHostBf16(bb.dk, n * kvw), dk, bad);
    report(kname + "_vs_fp64.dk", s.name(), 0, 0, e, 1e-2, bad);
    e = relErr(toHostBf16(bb.dv, n * kvw), dv, bad);
    report(kname + "_vs_fp64.dv", s.name(), 0, 0, e, 1e-2, bad);
    e = relErr(toHost(bb.dSink, s.heads), dSink, bad);
    report(kname + "_vs_fp64.dSink", s.name(), 0, 0, e, 1e-3, bad);
  }
  freeBwd(bb);
  freeAll(in);
  freeAll(out);
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

// Median of up to maxReps runs, fewer when one run is slow (keeps the whole run under 60 s).
static double timeAdaptive(int maxReps, const std::function<void()>& fn) {
  const double first = timeMs(1, fn);
  const int reps = std::max(1, std::min(maxReps, int(1500.0 / std::max(first, 1e-3))));
  return timeMs(reps, fn);
}

struct Row {
  std::string shape;
  double oldMs, newMs, tflops, probsErr, ctxErr;
  double q1OldMs, q1NewMs, bwdOldMs, bwdNewMs, bwdTflops, dqErr, dkErr;
  double k2OldMs, k2VecMs, k2MmaMs;
};

static double devRelErr(const float* a, const float* b, int64_t n, int64_t& bad) {
  double* sums;
  CK(cudaMalloc(&sums, 3 * sizeof(double)));
  CK(cudaMemset(sums, 0, 3 * sizeof(double)));
  diffNorms<<<1024, 256>>>(a, b, n, sums);
  CK(cudaGetLastError());
  double h[3];
  CK(cudaMemcpy(h, sums, sizeof(h), cudaMemcpyDeviceToHost));
  CK(cudaFree(sums));
  bad = int64_t(h[2]);
  return std::sqrt(h[0] / std::max(h[1], 1e-300));
}

static double devRelErrBf16(const bf16* a, const bf16* b, int64_t n, int64_t& bad) {
  double* sums;
  CK(cudaMalloc(&sums, 3 * sizeof(double)));
  CK(cudaMemset(sums, 0, 3 * sizeof(double)));
  diffNormsBf16<<<1024, 256>>>(a, b, n, sums);
  CK(cudaGetLastError());
  double h[3];
  CK(cudaMemcpy(h, sums, sizeof(h), cudaMemcpyDeviceToHost));
  CK(cudaFree(sums));
  bad = int64_t(h[2]);
  return std::sqrt(h[0] / std::max(h[1], 1e-300));
}

static void benchBwd(const Shape& s, const Buffers& in, const Buffers& fwd, uint64_t seed,
                     Row& row) {
  const int64_t n = s.tokens();
  BwdBuffers bo, bn;
  allocBwd(s, in, bo, seed, true);
  allocBwd(s, in, bn, seed, false);  // same dO (same seed), shares the transpose
  bn.keyStart = bo.keyStart;
  bn.entries = bo.entries;
  poisonBwd(s, bo);
  poisonBwd(s, bn);
  CK(cudaMemset(bo.dz, 0, n * s.heads * s.width * sizeof(float)));  // padding slots unwritten
  CK(cudaMemset(bn.dz, 0, n * s.heads * s.width * sizeof(float)));
  runBwd(false, s, in, fwd, bo);
  runBwd(true, s, in, fwd, bn);
  CK(cudaDeviceSynchronize());
  int64_t bad = 0;
  bf16 *dk2, *dv2, *dk3, *dv3;
  const int64_t kvn = n * s.kvHeads * s.hd;
  CK(cudaMalloc(&dk2, kvn * sizeof(bf16)));
  CK(cudaMalloc(&dv2, kvn * sizeof(bf16)));
  CK(cudaMalloc(&dk3, kvn * sizeof(bf16)));
  CK(cudaMalloc(&dv3, kvn * sizeof(bf16)));
  {  // phase 2 alone on the new dz: vector loads bitwise the scalar kernel; tensor cores close
    runKeyBwd(KeyBwdPath::kScalar, s, in, fwd, bn, dk2, dv2);
    runKeyBwd(KeyBwdPath::kVector, s, in, fwd, bn, dk3, dv3);
    CK(cudaDeviceSynchronize());
    const std::vector<bf16> a1 = toHost(dk3, kvn), a2 = toHost(dk2, kvn);
    const std::vector<bf16> b1 = toHost(dv3, kvn), b2 = toHost(dv2, kvn);
    int64_t diff = 0;
    for (int64_t i = 0; i < kvn; ++i) {
      diff += std::memcmp(&a1[i], &a2[i], 2) != 0 || std::memcmp(&b1[i], &b2[i], 2) != 0;
    }
    report("bwd_key_vec_vs_scalar_bitwise.dkdv", s.name(), 0, 0, double(diff), 0, 0);
    const double ek2 = devRelErrBf16(bn.dk, dk2, kvn, bad);
    report("bwd_key_mma_vs_scalar.dk", s.name(), 0, 0, ek2, 1e-2, bad);
    const double ev2 = devRelErrBf16(bn.dv, dv2, kvn, bad);
    report("bwd_key_mma_vs_scalar.dv", s.name(), 0, 0, ev2, 1e-2, bad);
  }
  {  // dSink accumulates over runs: compared after the first one
    const std::vector<float> sinkNew = toHost(bn.dSink, s.heads);
    const double es = relErrF(sinkNew, toHost(bo.dSink, s.heads), bad);
    report("bwd_mma_vs_old.dSink", s.name(), 0, 0, es, 1e-3, bad);
  }
  const double flops = 2.5 * s.flops();
  const double q1New = timeAdaptive(20, [&] { runQueryBwd(true, s, in, fwd, bn); });
  const double q1Old = timeAdaptive(3, [&] { runQueryBwd(false, s, in, fwd, bo); });
  const double bwdNew = timeAdaptive(20, [&] { runBwd(true, s, in, fwd, bn); });
  const double k2Mma =
      timeAdaptive(20, [&] { runKeyBwd(KeyBwdPath::kMma, s, in, fwd, bn, dk2, dv2); });
  const double k2Vec =
      timeAdaptive(5, [&] { runKeyBwd(KeyBwdPath::kVector, s, in, fwd, bn, dk2, dv2); });
  const double k2Old =
      timeAdaptive(3, [&] { runKeyBwd(KeyBwdPath::kScalar, s, in, fwd, bn, dk2, dv2); });
  report("bwd_key_mma_time", s.name(), k2Mma, 0, 0, 1, 0);
  report("bwd_key_vec_time", s.name(), k2Vec, 0, 0, 1, 0);
  report("bwd_key_old_time", s.name(), k2Old, 0, 0, 1, 0);
  CK(cudaFree(dk2));
  CK(cudaFree(dv2));
  CK(cudaFree(dk3));
  CK(cudaFree(dv3));
  const double bwdOld = timeAdaptive(2, [&] { runBwd(false, s, in, fwd, bo); });
  const double ez = devRelErr(bn.dz, bo.dz, n * s.heads * s.width, bad);
  report("bwd_q_mma_vs_old.dz", s.name(), q1New, 0.5 * flops / q1New * 1e-9, ez, 1e-4, bad);
  const double eq = devRelErrBf16(bn.dq, bo.dq, n * s.heads * s.hd, bad);
  report("bwd_q_mma_vs_old.dq", s.name(), q1New, 0.5 * flops / q1New * 1e-9, eq, 1e-2, bad);
  const double ek = devRelErrBf16(bn.dk, bo.dk, n * s.kvHeads * s.hd, bad);
  report("bwd_mma_vs_old.dk", s.name(), bwdNew, flops / bwdNew * 1e-9, ek, 1e-2, bad);
  const double ev = devRelErrBf16(bn.dv, bo.dv, n * s.kvHeads * s.hd, bad);
  report("bwd_mma_vs_old.dv", s.name(), bwdNew, flops / bwdNew * 1e-9, ev, 1e-2, bad);
  report("bwd_q_old_time", s.name(), q1Old, 0.5 * flops / q1Old * 1e-9, 0, 1, 0);
  report("bwd_old_time", s.name(), bwdOld, flops / bwdOld * 1e-9, 0, 1, 0);
  row.q1OldMs = q1Old;
  row.q1NewMs = q1New;
  row.bwdOldMs = bwdOld;
  row.bwdNewMs = bwdNew;
  row.bwdTflops = flops / bwdNew * 1e-9;
  row.dqErr = eq;
  row.dkErr = ek;
  row.k2OldMs = k2Old;
  row.k2VecMs = k2Vec;
  row.k2MmaMs = k2Mma;
  bn.keyStart = nullptr;
  bn.entries = nullptr;
  freeBwd(bo);
  freeBwd(bn);
}

static Row benchShape(const Shape& s, uint64_t seed) {
  Buffers in, ref, out;
  allocInputs(s, in, seed);
  allocOutputs(s, ref);
  allocOutputs(s, out);
  const int64_t n = s.tokens(), np = n * s.heads * s.width, nc = n * s.heads * s.hd;
  poison(s, ref);
  poison(s, out);
  runKernel(false, s, in, ref);
  runKernel(true, s, in, out);
  CK(cudaDeviceSynchronize());
  double* sums;
  CK(cudaMalloc(&sums, 9 * sizeof(double)));
  CK(cudaMemset(sums, 0, 9 * sizeof(double)));
  diffNorms<<<1024, 256>>>(out.probs, ref.probs, np, sums);
  diffNorms<<<256, 256>>>(out.sinkProbs, ref.sinkProbs, n * s.heads, sums + 3);
  diffNormsBf16<<<1024, 256>>>(out.ctx, ref.ctx, nc, sums + 6);
  CK(cudaGetLastError());
  double h[9];
  CK(cudaMemcpy(h, sums, sizeof(h), cudaMemcpyDeviceToHost));
  CK(cudaFree(sums));
  const double ep = std::sqrt(h[0] / h[1]), es = std::sqrt(h[3] / h[4]),
               ec = std::sqrt(h[6] / h[7]);
  const double flops = s.flops();
  const double newMs = timeAdaptive(22, [&] { runKernel(true, s, in, out); });
  const double oldMs = timeAdaptive(3, [&] { runKernel(false, s, in, ref); });
  report("fwd_mma_vs_old.probs", s.name(), newMs, flops / newMs * 1e-9, ep, 1e-4, int64_t(h[2]));
  report("fwd_mma_vs_old.sinkProbs", s.name(), newMs, 0, es, 1e-4, int64_t(h[5]));
  report("fwd_mma_vs_old.context", s.name(), newMs, 0, ec, 1e-2, int64_t(h[8]));
  report("fwd_old_time", s.name(), oldMs, flops / oldMs * 1e-9, 0, 1, 0);
  freeAll(ref);
  Row row{s.name(), oldMs, newMs, flops / newMs * 1e-9, ep, ec, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  benchBwd(s, in, out, seed + 60, row);
  freeAll(in);
  freeAll(out);
  return row;
}

// ---------------------------------------------------------------------------------------------
// Indexer scores: engine/ops/sparse_attention/indexer_scores_mma.cuh against a copy of the
// engine's scalar kernel (indexer_cuda.cu, indexer_scores_fwd_kernel: one CTA per query token,
// its indexer row in shared memory, one key per thread) and fp64 on the CPU.

__device__ __forceinline__ float oldIndexerDot(const float* q, const float* k, int di) {
  float acc = 0.0f;
  for (int d = 0; d < di; ++d) acc = fmaf(q[d], k[d], acc);
  return acc;
}

__global__ void old_indexer_scores_kernel(const float* q, const float* k, const float* w,
                                          int64_t seqLen, int hi, int di, float c,
                                          float* scores) {
  extern __shared__ float row[];
  const int64_t n = blockIdx.x, t = n % seqLen, base = n - t;
  const int qw = hi * di;
  for (int i = int(threadIdx.x); i < qw; i += int(blockDim.x)) row[i] = q[n * qw + i];
  for (int j = int(threadIdx.x); j < hi; j += int(blockDim.x)) row[qw + j] = w[n * hi + j];
  __syncthreads();
  for (int64_t s = threadIdx.x; s < seqLen; s += blockDim.x) {
    float out = 0.0f;
    if (s <= t) {
      for (int j = 0; j < hi; ++j) {
        const float a = oldIndexerDot(row + j * di, k + (base + s) * di, di);
        out = fmaf(row[qw + j], a > 0.0f ? a : 0.0f, out);
      }
      out = __fadd_rn(__fmul_rn(out, c), 0.0f);
    }
    scores[n * seqLen + s] = out;
  }
}

__global__ void fillF32(float* p, int64_t n, uint64_t seed, float scale) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const float u = float(hash32(seed * 0x9E3779B97F4A7C15ULL + uint64_t(i))) * 2.3283064e-10f;
    p[i] = scale * (2.0f * u - 1.0f);
  }
}

struct IndexerShape {
  int batch, seqLen, di;
  std::string name() const {
    return "B=" + std::to_string(batch) + ",T=" + std::to_string(seqLen) +
           ",HI=8,dI=" + std::to_string(di);
  }
  double flops() const { return 2.0 * 8 * di * double(seqLen) * seqLen / 2 * batch; }
};

struct IndexerRow {
  std::string shape;
  double oldMs, newMs, tflops, err;
};

static IndexerRow runIndexer(const IndexerShape& s, uint64_t seed, bool cpuCheck) {
  const int64_t n = int64_t(s.batch) * s.seqLen, hiw = 8 * int64_t(s.di);
  float *q, *k, *w, *outOld, *outNew;
  CK(cudaMalloc(&q, n * hiw * 4));
  CK(cudaMalloc(&k, n * s.di * 4));
  CK(cudaMalloc(&w, n * 8 * 4));
  CK(cudaMalloc(&outOld, n * s.seqLen * 4));
  CK(cudaMalloc(&outNew, n * s.seqLen * 4));
  fillF32<<<1024, 256>>>(q, n * hiw, seed + 1, 1.0f);
  fillF32<<<1024, 256>>>(k, n * s.di, seed + 2, 1.5f);
  fillF32<<<256, 256>>>(w, n * 8, seed + 3, 0.35f);
  CK(cudaMemset(outOld, 0xff, n * s.seqLen * 4));
  CK(cudaMemset(outNew, 0xff, n * s.seqLen * 4));
  const float c = float(1.0 / std::sqrt(double(s.di)));
  const size_t rowBytes = size_t(hiw + 8) * 4;
  auto runOld = [&] {
    old_indexer_scores_kernel<<<unsigned(n), 128, rowBytes>>>(q, k, w, s.seqLen, 8, s.di, c,
                                                               outOld);
    CK(cudaGetLastError());
  };
  auto runNew = [&] {
    CK(launchIndexerScoresMma(0, q, k, w, s.batch, s.seqLen, s.di, outNew));
  };
  runOld();
  runNew();
  CK(cudaDeviceSynchronize());
  int64_t bad = 0;
  const double err = devRelErr(outNew, outOld, n * s.seqLen, bad);
  report("indexer_mma_vs_old.scores", s.name(), 0, 0, err, 1e-4, bad);
  if (cpuCheck) {
    const std::vector<float> hq = toHost(q, n * hiw), hk = toHost(k, n * s.di),
                             hw = toHost(w, n * 8), got = toHost(outNew, n * s.seqLen);
    std::vector<double> want(n * s.seqLen, 0.0);
    for (int64_t r = 0; r < n; ++r) {
      const int64_t t = r % s.seqLen, base = r - t;
      for (int64_t sk = 0; sk <= t; ++sk) {
        double out = 0;
        for (int j = 0; j < 8; ++j) {
          double a = 0;
          for (int d = 0; d < s.di; ++d) {
            a += double(hq[r * hiw + j * s.di + d]) * hk[(base + sk) * s.di + d];
          }
          out += double(hw[r * 8 + j]) * std::max(a, 0.0);
        }
        want[r * s.seqLen + sk] = out * c;
      }
    }
    const double e = relErr(got, want, bad);
    report("indexer_mma_vs_fp64.scores", s.name(), 0, 0, e, 1e-4, bad);
    const double eo = relErr(toHost(outOld, n * s.seqLen), want, bad);
    report("indexer_old_vs_fp64.scores", s.name(), 0, 0, eo, 1e-4, bad);
  }
  const double newMs = timeAdaptive(20, runNew);
  const double oldMs = timeAdaptive(3, runOld);
  const double flops = s.flops();
  report("indexer_mma_time", s.name(), newMs, flops / newMs * 1e-9, err, 1e-4, 0);
  report("indexer_old_time", s.name(), oldMs, flops / oldMs * 1e-9, 0, 1, 0);
  for (float* p : {q, k, w, outOld, outNew}) CK(cudaFree(p));
  return {s.name(), oldMs, newMs, flops / newMs * 1e-9, err};
}

int main() {
  const std::vector<Shape> small = {
      {2, 70, 16, 1, 128, 40, 1},  {2, 130, 16, 1, 128, 100, 1}, {1, 77, 1, 1, 128, 77, 0},
      {2, 45, 20, 2, 64, 45, 0},   {1, 200, 40, 2, 128, 150, 1}, {3, 33, 16, 1, 64, 8, 1},
      {2, 129, 16, 1, 128, 129, 1}, {1, 5, 3, 1, 40, 5, 0},
  };
  uint64_t seed = 1000;
  for (const Shape& s : small) checkSmall(s, seed += 100);
  for (const IndexerShape& s : {IndexerShape{2, 70, 64}, IndexerShape{1, 130, 128}}) {
    runIndexer(s, seed += 100, true);
  }
  const std::vector<Shape> big = {
      {4, 4096, 16, 1, 128, 512, 0},
      {4, 4096, 16, 1, 128, 4096, 0},
      {1, 32768, 16, 1, 128, 2048, 0},
  };
  std::vector<Row> rows;
  for (const Shape& s : big) rows.push_back(benchShape(s, seed += 100));
  std::vector<IndexerRow> irows;
  for (const IndexerShape& s : {IndexerShape{4, 4096, 64}, IndexerShape{1, 32768, 64}}) {
    irows.push_back(runIndexer(s, seed += 100, false));
  }
  std::printf("\n%-38s %5s %9s %9s %7s %7s %9s %9s\n", "shape", "pass", "old ms", "new ms",
              "speedup", "TFLOP/s", "err", "err2");
  for (const Row& r : rows) {
    std::printf("%-38s %5s %9.3f %9.3f %7.1f %7.1f %9.2e %9.2e\n", r.shape.c_str(), "fwd",
                r.oldMs, r.newMs, r.oldMs / r.newMs, r.tflops, r.probsErr, r.ctxErr);
    std::printf("%-38s %5s %9.3f %9.3f %7.1f %7.1f %9.2e %9s\n", r.shape.c_str(), "bwdQ",
                r.q1OldMs, r.q1NewMs, r.q1OldMs / r.q1NewMs,
                0.5 * 2.5 * r.tflops * r.newMs / r.q1NewMs, r.dqErr, "");
    std::printf("%-38s %5s %9.3f %9.3f %7.1f %7s %9s %9s  (vec %.3f ms)\n", r.shape.c_str(),
                "bwdK", r.k2OldMs, r.k2MmaMs, r.k2OldMs / r.k2MmaMs, "", "", "", r.k2VecMs);
    std::printf("%-38s %5s %9.3f %9.3f %7.1f %7.1f %9.2e %9s\n", r.shape.c_str(), "bwd",
                r.bwdOldMs, r.bwdNewMs, r.bwdOldMs / r.bwdNewMs, r.bwdTflops, r.dkErr, "");
  }
  for (const IndexerRow& r : irows) {
    std::printf("%-38s %5s %9.3f %9.3f %7.1f %7.1f %9.2e %9s\n", r.shape.c_str(), "idx",
                r.oldMs, r.newMs, r.oldMs / r.newMs, r.tflops, r.err, "");
  }
  std::printf("%s: %d failure(s)\n", gFails ? "FAIL" : "PASS", gFails);
  return gFails ? 1 : 0;
}
