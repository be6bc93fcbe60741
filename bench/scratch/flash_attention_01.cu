// Scratch benchmark of the dense causal flash attention (engine/ops/attention/
// flash_attention_cuda.cuh, the same kernels and launchers the engine uses).
// Build (from /work/main):
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90,code=sm_90 -lineinfo -Xptxas -v -lcublas \
//        -I/work/main/engine -o /work/main/.scratch/bin/flash_attention_01 \
//        bench/scratch/flash_attention_01.cu
// Run: .scratch/bin/flash_attention_01   (no arguments; < 60 s on an H200; exit 1 on any FAIL)
// 1. Small awkward shapes, K = 64 and 128: forward out + lse and backward dq, dk, dv against a
//    double CPU reference on the same bf16 inputs (every element; outputs poisoned with NaN).
// 2. B=8 T=4096, B=2 T=16384, B=1 T=32768 (H=16 K=128): every output finite, sampled query rows
//    (out, lse, dq) and key rows (dk, dv) against simple fp32 device reference kernels, two
//    backward runs bitwise equal; then fwd, bwd and each backward kernel timed (cudaEvents,
//    3 warm-up, median of 25; inputs >= 134 MB each, beyond the 60 MB L2, so no rotation).
// TFLOP/s use the causal count: fwd 2 B H T^2 K, bwd 2.5x that (the kernels execute 3.5x).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "ops/attention/flash_attention_cuda.cuh"

using namespace moewb::engine::cuda::flash;

namespace {

int gFailures = 0;

void check(cudaError_t err, const char* what, int line) {
  if (err != cudaSuccess) {
    std::printf("CUDA error %s at line %d: %s\n", what, line, cudaGetErrorString(err));
    std::exit(1);
  }
}
#define CK(x) check((x), #x, __LINE__)

__device__ float hashNormal(uint64_t seed, int64_t i) {
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + uint64_t(i) * 0xBF58476D1CE4E5B9ull + 1;
  x ^= x >> 31;
  x *= 0x94D049BB133111EBull;
  x ^= x >> 29;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 32;
  const float u1 = (float((x >> 40) & 0xFFFFFF) + 1.0f) / 16777217.0f;
  const float u2 = float(x & 0xFFFFFF) / 16777216.0f;
  return sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2);
}
__global__ void fillNormal(fbf16* x, int64_t n, uint64_t seed) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    x[i] = __float2bfloat16(hashNormal(seed, i));
}
__global__ void fillNanBf16(fbf16* x, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    x[i] = __float2bfloat16(NAN);
}
__global__ void fillNanF32(float* x, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    x[i] = NAN;
}
__global__ void countNonFiniteBf16(const fbf16* x, int64_t n, unsigned long long* count) {
  unsigned long long c = 0;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    c += isfinite(__bfloat162float(x[i])) ? 0 : 1;
  if (c) atomicAdd(count, c);
}
__global__ void countNonFiniteF32(const float* x, int64_t n, unsigned long long* count) {
  unsigned long long c = 0;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    c += isfinite(x[i]) ? 0 : 1;
  if (c) atomicAdd(count, c);
}

// ---- Device reference (fp32, one block of 128 threads per sampled row) -----------------------

__device__ float blockReduce(float v, bool isMax, float* red) {
  red[threadIdx.x] = v;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s)
      red[threadIdx.x] = isMax ? fmaxf(red[threadIdx.x], red[threadIdx.x + s])
                               : red[threadIdx.x] + red[threadIdx.x + s];
    __syncthreads();
  }
  const float r = red[0];
  __syncthreads();
  return r;
}

// Query row (b, h, t): out[K], lse, dq[K]. scratch [S][2][T].
template <int K>
__global__ void refRowKernel(const fbf16* q, const fbf16* k, const fbf16* v, const fbf16* dO,
                             int T, int H, const int* samples, float* scratch, float* outO,
                             float* outLse, float* outDq) {
  __shared__ float red[128];
  const int si = blockIdx.x, b = samples[3 * si], h = samples[3 * si + 1],
            t = samples[3 * si + 2];
  const int64_t ld = int64_t(H) * K, base = int64_t(b) * T * ld + int64_t(h) * K;
  const float scale = 1.0f / sqrtf(float(K));
  float* sb = scratch + int64_t(si) * 2 * T;
  float* db = sb + T;
  const fbf16* qt = q + base + int64_t(t) * ld;
  const fbf16* dt = dO + base + int64_t(t) * ld;
  float mx = -INFINITY;
  for (int j = threadIdx.x; j <= t; j += blockDim.x) {
    const fbf16* kj = k + base + int64_t(j) * ld;
    const fbf16* vj = v + base + int64_t(j) * ld;
    float s = 0.0f, dp = 0.0f;
    for (int d = 0; d < K; ++d) {
      s += __bfloat162float(qt[d]) * __bfloat162float(kj[d]);
      dp += __bfloat162float(dt[d]) * __bfloat162float(vj[d]);
    }
    sb[j] = s * scale;
    db[j] = dp;
    mx = fmaxf(mx, s * scale);
  }
  mx = blockReduce(mx, true, red);
  float sum = 0.0f;
  for (int j = threadIdx.x; j <= t; j += blockDim.x) sum += expf(sb[j] - mx);
  sum = blockReduce(sum, false, red);
  const float lse = mx + logf(sum);
  float delta = 0.0f;
  for (int j = threadIdx.x; j <= t; j += blockDim.x) {
    sb[j] = expf(sb[j] - lse);
    delta += sb[j] * db[j];
  }
  delta = blockReduce(delta, false, red);  // its barriers publish sb
  if (threadIdx.x < K) {
    const int d = threadIdx.x;
    float o = 0.0f, dq = 0.0f;
    for (int j = 0; j <= t; ++j) {
      const int64_t off = base + int64_t(j) * ld + d;
      o += sb[j] * __bfloat162float(v[off]);
      dq += sb[j] * (db[j] - delta) * __bfloat162float(k[off]);
    }
    outO[int64_t(si) * K + d] = o;
    outDq[int64_t(si) * K + d] = dq * scale;
  }
  if (threadIdx.x == 0) outLse[si] = lse;
}

// Key row (b, h, s): dk[K], dv[K], given lse and delta of every query row.
template <int K>
__global__ void refKeyKernel(const fbf16* q, const fbf16* k, const fbf16* v, const fbf16* dO,
                             const float* lse, const float* delta, int T, int H,
                             const int* samples, float* scratch, float* outDk, float* outDv) {
  const int si = blockIdx.x, b = samples[3 * si], h = samples[3 * si + 1],
            s = samples[3 * si + 2];
  const int64_t ld = int64_t(H) * K, base = int64_t(b) * T * ld + int64_t(h) * K;
  const int64_t rows = (int64_t(b) * H + h) * T;
  const float scale = 1.0f / sqrtf(float(K));
  float* pb = scratch + int64_t(si) * 2 * T;
  float* dsb = pb + T;
  const fbf16* ks = k + base + int64_t(s) * ld;
  const fbf16* vs = v + base + int64_t(s) * ld;
  for (int t = s + threadIdx.x; t < T; t += blockDim.x) {
    const fbf16* qt = q + base + int64_t(t) * ld;
    const fbf16* dt = dO + base + int64_t(t) * ld;
    float sc = 0.0f, dp = 0.0f;
    for (int d = 0; d < K; ++d) {
      sc += __bfloat162float(qt[d]) * __bfloat162float(ks[d]);
      dp += __bfloat162float(dt[d]) * __bfloat162float(vs[d]);
    }
    const float p = expf(sc * scale - lse[rows + t]);
    pb[t] = p;
    dsb[t] = p * (dp - delta[rows + t]);
  }
  __syncthreads();
  if (threadIdx.x < K) {
    const int d = threadIdx.x;
    float dk = 0.0f, dv = 0.0f;
    for (int t = s; t < T; ++t) {
      const int64_t off = base + int64_t(t) * ld + d;
      dv += pb[t] * __bfloat162float(dO[off]);
      dk += dsb[t] * __bfloat162float(q[off]);
    }
    outDk[int64_t(si) * K + d] = dk * scale;
    outDv[int64_t(si) * K + d] = dv;
  }
}

// delta[b, h, t] = sum_d O dO (independent of the engine's kernel).
template <int K>
__global__ void refDeltaKernel(const fbf16* o, const fbf16* dO, int64_t tokens, int T, int H,
                               float* delta) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= tokens * H) return;
  const int64_t n = i / H;
  const int h = int(i % H);
  const int64_t off = n * H * K + int64_t(h) * K;
  float acc = 0.0f;
  for (int d = 0; d < K; ++d) acc += __bfloat162float(o[off + d]) * __bfloat162float(dO[off + d]);
  delta[(n / T * H + h) * T + n % T] = acc;
}

// out[si][K] = float(src row (b, t), head h).
template <int K>
__global__ void gatherRows(const fbf16* src, int T, int H, const int* samples, float* out) {
  const int si = blockIdx.x, b = samples[3 * si], h = samples[3 * si + 1],
            t = samples[3 * si + 2];
  if (threadIdx.x < K)
    out[int64_t(si) * K + threadIdx.x] = __bfloat162float(
        src[(int64_t(b) * T + t) * H * K + int64_t(h) * K + threadIdx.x]);
}

// ---- Host helpers -------------------------------------------------------------------------

unsigned gridFor(int64_t n) { return unsigned(std::min<int64_t>((n + 255) / 256, 65536)); }

struct Buffers {
  fbf16 *q = nullptr, *k = nullptr, *v = nullptr, *o = nullptr, *dO = nullptr;
  fbf16 *dq = nullptr, *dk = nullptr, *dv = nullptr;
  float *lse = nullptr, *delta = nullptr;
  int64_t n = 0, rows = 0;  // bf16 elements per tensor; B*H*T
  void alloc(int B, int T, int H, int K) {
    n = int64_t(B) * T * H * K;
    rows = int64_t(B) * H * T;
    for (fbf16** p : {&q, &k, &v, &o, &dO, &dq, &dk, &dv}) CK(cudaMalloc(p, n * 2));
    CK(cudaMalloc(&lse, rows * 4));
    CK(cudaMalloc(&delta, rows * 4));
  }
  void release() {
    for (fbf16* p : {q, k, v, o, dO, dq, dk, dv}) CK(cudaFree(p));
    CK(cudaFree(lse));
    CK(cudaFree(delta));
  }
  void randomInputs(uint64_t seed) {
    fillNormal<<<gridFor(n), 256>>>(q, n, seed + 1);
    fillNormal<<<gridFor(n), 256>>>(k, n, seed + 2);
    fillNormal<<<gridFor(n), 256>>>(v, n, seed + 3);
    fillNormal<<<gridFor(n), 256>>>(dO, n, seed + 4);
    CK(cudaGetLastError());
  }
  void poison() {
    for (fbf16* p : {o, dq, dk, dv}) fillNanBf16<<<gridFor(n), 256>>>(p, n);
    fillNanF32<<<gridFor(rows), 256>>>(lse, rows);
    fillNanF32<<<gridFor(rows), 256>>>(delta, rows);
    CK(cudaGetLastError());
  }
  FlashFwdParams fwd(int T, int H, int K) const {
    return FlashFwdParams{q, k, v, o, lse, T, H, float(1.0 / std::sqrt(double(K)))};
  }
  FlashBwdParams bwd(int B, int T, int H, int K) const {
    FlashBwdParams p{};
    p.q = q; p.k = k; p.v = v; p.o = o; p.dO = dO; p.lse = lse; p.delta = delta;
    p.dq = dq; p.dk = dk; p.dv = dv;
    p.seqLen = T; p.heads = H; p.tokens = int64_t(B) * T;
    p.scale = float(1.0 / std::sqrt(double(K)));
    return p;
  }
};

std::vector<float> toHost(const fbf16* d, int64_t n) {
  std::vector<__nv_bfloat16> h(n);
  CK(cudaMemcpy(h.data(), d, n * 2, cudaMemcpyDeviceToHost));
  std::vector<float> f(n);
  for (int64_t i = 0; i < n; ++i) f[i] = __bfloat162float(h[i]);
  return f;
}
std::vector<float> toHostF(const float* d, int64_t n) {
  std::vector<float> f(n);
  CK(cudaMemcpy(f.data(), d, n * 4, cudaMemcpyDeviceToHost));
  return f;
}
template <typename A, typename B>
double relErr(const std::vector<A>& got, const std::vector<B>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(double(got[i]))) return INFINITY;
    const double d = double(got[i]) - double(want[i]);
    num += d * d;
    den += double(want[i]) * double(want[i]);
  }
  return std::sqrt(num) / std::max(std::sqrt(den), 1e-30);
}
unsigned long long nonFinite(const Buffers& bu) {
  unsigned long long* c;
  CK(cudaMalloc(&c, 8));
  CK(cudaMemset(c, 0, 8));
  for (const fbf16* p : {bu.o, bu.dq, bu.dk, bu.dv}) countNonFiniteBf16<<<1024, 256>>>(p, bu.n, c);
  countNonFiniteF32<<<1024, 256>>>(bu.lse, bu.rows, c);
  CK(cudaGetLastError());
  unsigned long long h = 0;
  CK(cudaMemcpy(&h, c, 8, cudaMemcpyDeviceToHost));
  CK(cudaFree(c));
  return h;
}
bool report(const char* what, const std::string& shape, double err, double tol) {
  const bool ok = err <= tol;
  std::printf("CHECK %-6s shape=%s err=%.3e tol=%.0e %s\n", what, shape.c_str(), err, tol,
              ok ? "PASS" : "FAIL");
  if (!ok) ++gFailures;
  return ok;
}

// ---- 1. Small shapes against a double CPU reference ---------------------------------------

template <int K>
void checkSmall(int B, int T, int H, uint64_t seed) {
  const std::string shape = "B" + std::to_string(B) + "_T" + std::to_string(T) + "_H" +
                            std::to_string(H) + "_K" + std::to_string(K);
  Buffers bu;
  bu.alloc(B, T, H, K);
  bu.randomInputs(seed);
  bu.poison();
  CK(launchFlashForward<K>(bu.fwd(T, H, K), B, 0));
  CK(launchFlashBackward<K>(bu.bwd(B, T, H, K), B, 0));
  CK(cudaDeviceSynchronize());
  const std::vector<float> q = toHost(bu.q, bu.n), k = toHost(bu.k, bu.n), v = toHost(bu.v, bu.n),
                           dO = toHost(bu.dO, bu.n);
  const std::vector<float> o = toHost(bu.o, bu.n), dq = toHost(bu.dq, bu.n),
                           dk = toHost(bu.dk, bu.n), dv = toHost(bu.dv, bu.n),
                           lse = toHostF(bu.lse, bu.rows);
  std::vector<double> ro(bu.n, 0), rdq(bu.n, 0), rdk(bu.n, 0), rdv(bu.n, 0), rlse(bu.rows);
  const double scale = 1.0 / std::sqrt(double(K));
  const int64_t ld = int64_t(H) * K;
  std::vector<double> P(size_t(T) * T), dS(size_t(T) * T);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h) {
      auto at = [&](int t, int d) { return (int64_t(b) * T + t) * ld + int64_t(h) * K + d; };
      for (int t = 0; t < T; ++t) {
        double mx = -INFINITY;
        for (int j = 0; j <= t; ++j) {
          double s = 0;
          for (int d = 0; d < K; ++d) s += double(q[at(t, d)]) * k[at(j, d)];
          P[size_t(t) * T + j] = s * scale;
          mx = std::max(mx, s * scale);
        }
        double sum = 0;
        for (int j = 0; j <= t; ++j) sum += std::exp(P[size_t(t) * T + j] - mx);
        const double l = mx + std::log(sum);
        rlse[(int64_t(b) * H + h) * T + t] = l;
        double delta = 0;
        for (int j = 0; j <= t; ++j) {
          double& p = P[size_t(t) * T + j];
          p = std::exp(p - l);
          double dp = 0;
          for (int d = 0; d < K; ++d) dp += double(dO[at(t, d)]) * v[at(j, d)];
          dS[size_t(t) * T + j] = dp;
          delta += p * dp;
        }
        for (int j = 0; j <= t; ++j) {
          const double p = P[size_t(t) * T + j];
          double& ds = dS[size_t(t) * T + j];
          ds = p * (ds - delta);
          for (int d = 0; d < K; ++d) {
            ro[at(t, d)] += p * v[at(j, d)];
            rdq[at(t, d)] += scale * ds * k[at(j, d)];
            rdk[at(j, d)] += scale * ds * q[at(t, d)];
            rdv[at(j, d)] += p * dO[at(t, d)];
          }
        }
      }
    }
  report("out", shape, relErr(o, ro), 1e-2);
  report("lse", shape, relErr(lse, rlse), 1e-3);
  report("dv", shape, relErr(dv, rdv), 2e-2);
  if (T == 1) {
    // One key: P = 1, dS = dP - delta = 0, so dq = dk = 0 analytically and a relative error
    // compares rounding noise with rounding noise: bound the absolute error by dv's scale.
    double dvScale = 0, eq = 0, ek = 0;
    for (size_t i = 0; i < dv.size(); ++i) dvScale = std::max(dvScale, std::fabs(double(dv[i])));
    for (size_t i = 0; i < dq.size(); ++i) eq = std::max(eq, std::fabs(double(dq[i]) - rdq[i]));
    for (size_t i = 0; i < dk.size(); ++i) ek = std::max(ek, std::fabs(double(dk[i]) - rdk[i]));
    report("dq_abs", shape, eq / std::max(dvScale, 1e-30), 1e-3);
    report("dk_abs", shape, ek / std::max(dvScale, 1e-30), 1e-3);
  } else {
    report("dq", shape, relErr(dq, rdq), 2e-2);
    report("dk", shape, relErr(dk, rdk), 2e-2);
  }
  bu.release();
}

// ---- 2. Benchmark shapes --------------------------------------------------------------------

template <typename F>
float medianMs(F&& f, int reps = 25) {
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  for (int i = 0; i < 3; ++i) f();
  std::vector<float> ms;
  for (int i = 0; i < reps; ++i) {
    CK(cudaEventRecord(a));
    f();
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

struct Row {
  std::string name, shape;
  float ms;
  double tflops, err;
  bool ok;
};
std::vector<Row> gRows;

void result(const std::string& name, const std::string& shape, float ms, double flops,
            double err, bool ok) {
  const double tf = flops > 0 ? flops / (ms * 1e-3) / 1e12 : 0.0;
  std::printf("RESULT name=%s shape=%s ms=%.4f tflops=%.1f err=%.3e status=%s\n", name.c_str(),
              shape.c_str(), ms, tf, err, ok ? "PASS" : "FAIL");
  gRows.push_back({name, shape, ms, tf, err, ok});
  if (!ok) ++gFailures;
}

template <int K>
void bigCase(int B, int T, int H, uint64_t seed) {
  const std::string shape = "B" + std::to_string(B) + "_T" + std::to_string(T) + "_H" +
                            std::to_string(H) + "_K" + std::to_string(K);
  Buffers bu;
  bu.alloc(B, T, H, K);
  bu.randomInputs(seed);
  bu.poison();
  const FlashFwdParams pf = bu.fwd(T, H, K);
  const FlashBwdParams pb = bu.bwd(B, T, H, K);
  CK(launchFlashForward<K>(pf, B, 0));
  CK(launchFlashBackward<K>(pb, B, 0));
  CK(cudaDeviceSynchronize());
  const unsigned long long bad = nonFinite(bu);
  report("finite", shape, double(bad), 0.0);

  // Sampled rows: first, last, middle and pseudo-random (b, h, t).
  constexpr int kS = 48;
  std::vector<int> samples(3 * kS);
  uint64_t x = seed * 2654435761ull + 7;
  for (int i = 0; i < kS; ++i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    samples[3 * i] = int((x >> 33) % B);
    samples[3 * i + 1] = int((x >> 17) % H);
    int t = int((x >> 40) % T);
    if (i == 0) t = 0;
    if (i == 1) t = T - 1;
    if (i == 2) t = T / 2;
    if (i == 3) t = std::min(T - 1, 127);
    samples[3 * i + 2] = t;
  }
  int* dSamples;
  float *scratch, *refO, *refLse, *refDq, *refDk, *refDv, *got, *refDelta;
  CK(cudaMalloc(&dSamples, samples.size() * 4));
  CK(cudaMemcpy(dSamples, samples.data(), samples.size() * 4, cudaMemcpyHostToDevice));
  CK(cudaMalloc(&scratch, int64_t(kS) * 2 * T * 4));
  for (float** p : {&refO, &refDq, &refDk, &refDv, &got}) CK(cudaMalloc(p, kS * K * 4));
  CK(cudaMalloc(&refLse, kS * 4));
  CK(cudaMalloc(&refDelta, bu.rows * 4));
  refRowKernel<K><<<kS, 128>>>(bu.q, bu.k, bu.v, bu.dO, T, H, dSamples, scratch, refO, refLse,
                               refDq);
  refDeltaKernel<K><<<gridFor(bu.rows), 256>>>(bu.o, bu.dO, int64_t(B) * T, T, H, refDelta);
  refKeyKernel<K><<<kS, 128>>>(bu.q, bu.k, bu.v, bu.dO, bu.lse, refDelta, T, H, dSamples,
                               scratch, refDk, refDv);
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  auto sampled = [&](const fbf16* src, const float* ref) {
    gatherRows<K><<<kS, 128>>>(src, T, H, dSamples, got);
    CK(cudaGetLastError());
    return relErr(toHostF(got, kS * K), toHostF(ref, kS * K));
  };
  const double eO = sampled(bu.o, refO), eDq = sampled(bu.dq, refDq),
               eDk = sampled(bu.dk, refDk), eDv = sampled(bu.dv, refDv);
  std::vector<float> lseGot(kS), lseAll = toHostF(bu.lse, bu.rows);
  for (int i = 0; i < kS; ++i)
    lseGot[i] = lseAll[(int64_t(samples[3 * i]) * H + samples[3 * i + 1]) * T + samples[3 * i + 2]];
  const double eLse = relErr(lseGot, toHostF(refLse, kS));
  const bool fOk = report("out", shape, eO, 1e-2) & report("lse", shape, eLse, 1e-3) & (bad == 0);
  const bool bOk = report("dq", shape, eDq, 2e-2) & report("dk", shape, eDk, 2e-2) &
                   report("dv", shape, eDv, 2e-2) & (bad == 0);

  // Determinism: a second backward must be bitwise equal.
  std::vector<float> dq1 = toHost(bu.dq, bu.n), dk1 = toHost(bu.dk, bu.n),
                     dv1 = toHost(bu.dv, bu.n);
  CK(launchFlashBackward<K>(pb, B, 0));
  CK(cudaDeviceSynchronize());
  const bool same = std::memcmp(dq1.data(), toHost(bu.dq, bu.n).data(), bu.n * 4) == 0 &&
                    std::memcmp(dk1.data(), toHost(bu.dk, bu.n).data(), bu.n * 4) == 0 &&
                    std::memcmp(dv1.data(), toHost(bu.dv, bu.n).data(), bu.n * 4) == 0;
  report("determ", shape, same ? 0.0 : 1.0, 0.0);

  const double fwdFlops = 2.0 * B * H * double(T) * T * K;
  const float fwdMs = medianMs([&] { CK(launchFlashForward<K>(pf, B, 0)); });
  result("flash_fwd", shape, fwdMs, fwdFlops, std::max(eO, eLse), fOk);
  const float bwdMs = medianMs([&] { CK(launchFlashBackward<K>(pb, B, 0)); });
  result("flash_bwd", shape, bwdMs, 2.5 * fwdFlops, std::max({eDq, eDk, eDv}), bOk && same);
  result("flash_fwd_bwd", shape, fwdMs + bwdMs, 3.5 * fwdFlops,
         std::max({eO, eLse, eDq, eDk, eDv}), fOk && bOk && same);
  // Backward kernels alone (same launch configurations as launchFlashBackward).
  const int64_t deltaThreads = pb.tokens * H * (K / 8);
  const float deltaMs = medianMs([&] {
    flash_attention_bwd_delta_kernel<K><<<unsigned((deltaThreads + 255) / 256), 256>>>(pb);
  });
  result("flash_bwd_delta", shape, deltaMs, 0.0, 0.0, true);
  const float kvMs = medianMs([&] {
    flash_attention_bwd_dkdv_kernel<K>
        <<<dim3(B * H, (T + kBwdN - 1) / kBwdN), kThreads, dkdvSmemBytes<K>()>>>(pb);
  });
  result("flash_bwd_dkdv", shape, kvMs, 4.0 / 2.0 * fwdFlops, 0.0, true);
  const float dqMs = medianMs([&] {
    flash_attention_bwd_dq_kernel<K>
        <<<dim3(B * H, (T + kFwdM - 1) / kFwdM), kThreads, dqSmemBytes<K>()>>>(pb);
  });
  result("flash_bwd_dq", shape, dqMs, 3.0 / 2.0 * fwdFlops, 0.0, true);
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());

  for (float* p : {scratch, refO, refLse, refDq, refDk, refDv, got, refDelta}) CK(cudaFree(p));
  CK(cudaFree(dSamples));
  bu.release();
}

}  // namespace

int main() {
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device %s, %d SMs\n", prop.name, prop.multiProcessorCount);
  uint64_t seed = 100;
  // T = 1, non-multiples of 64 / 128, one head, several sequences.
  checkSmall<64>(1, 1, 1, ++seed);
  checkSmall<128>(1, 1, 1, ++seed);
  checkSmall<64>(2, 77, 3, ++seed);
  checkSmall<128>(2, 77, 3, ++seed);
  checkSmall<128>(1, 200, 1, ++seed);
  checkSmall<64>(3, 200, 2, ++seed);
  checkSmall<128>(1, 333, 2, ++seed);
  checkSmall<64>(1, 256, 1, ++seed);
  bigCase<128>(8, 4096, 16, ++seed);
  bigCase<128>(2, 16384, 16, ++seed);
  bigCase<128>(1, 32768, 16, ++seed);
  bigCase<64>(8, 4096, 16, ++seed);

  std::printf("\n%-16s %-22s %9s %8s %10s %s\n", "name", "shape", "ms", "TFLOP/s", "err",
              "status");
  for (const Row& r : gRows)
    std::printf("%-16s %-22s %9.4f %8.1f %10.3e %s\n", r.name.c_str(), r.shape.c_str(), r.ms,
                r.tflops, r.err, r.ok ? "PASS" : "FAIL");
  std::printf("%s (%d failures)\n", gFailures ? "FAIL" : "PASS", gFailures);
  return gFailures ? 1 : 0;
}
