// The gated sparse attention layer's dense warm-up stage on flash kernels
// (engine/ops/sparse_attention/dense_stage_cuda.cuh: causal, MQA/GQA, sink, lse saved instead of
// probs, p* recomputed on tensor cores) against a plain fp64 CPU reference and against the
// gathered sparse core over the causal selection (sparse_attention_core_{fwd,bwd}.cuh, the
// engine's previous dense-stage path). Both kernel sets come from the engine's headers.
// Build (from /work/main):
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90,code=sm_90 -lineinfo -Xptxas -v -lcublas \
//        -I/work/main/engine -o /work/main/.scratch/bin/dense_stage_01 \
//        bench/scratch/dense_stage_01.cu
// Run: .scratch/bin/dense_stage_01   (no arguments; exits 1 on any FAIL or CUDA error)
// 1. Awkward small shapes vs fp64 CPU (every element; outputs NaN-poisoned, p* checked to be 0
//    past the diagonal): T in {1, 77, 130, 200, 333}, H in {1, 3, 4, 6, 16, 20}, Hkv in
//    {1, 2, 3, 4}, dh 64 / 128: context, lse, sinkProbs, p*, dq, dk, dv, dSink; the backward run
//    twice and compared bit for bit.
// 2. B=4 T=4096 H=16 Hkv=1 dh=128 (h200.toml): flash vs gathered core (context, sinkProbs, p*,
//    dq, dk, dv, dSink, relative norms), 32 sampled query rows vs fp64 CPU (context, lse,
//    sinkProbs, p* row, dq), two flash backward runs bitwise equal; then timed (cudaEvents,
//    median of 20; inputs 0.1-0.2 GB, beyond L2 anyway, not rotated).
// FLOP (FA convention, causal half): forward 2 B H T^2 dh, backward 2.5x, p* B H T^2 dh (S only).
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

#include "ops/sparse_attention/dense_stage_cuda.cuh"
#include "ops/sparse_attention/sparse_attention_core_bwd.cuh"

namespace ds = moewb::engine::cuda::dense_stage;
namespace sd = moewb::engine::cuda::sparse_detail;
using bf16 = __nv_bfloat16;

#define CK(x)                                                                          \
  do {                                                                                 \
    cudaError_t e_ = (x);                                                              \
    if (e_ != cudaSuccess) {                                                           \
      std::fprintf(stderr, "CUDA error %s at %s:%d: %s\n", cudaGetErrorString(e_),     \
                   __FILE__, __LINE__, #x);                                            \
      std::exit(1);                                                                    \
    }                                                                                  \
  } while (0)

static int g_failures = 0;
struct Row {
  std::string name, shape;
  double ms, tflops, err;
  bool pass;
};
static std::vector<Row> g_rows;

static void report(const std::string& name, const std::string& shape, double ms, double flop,
                   double err, bool pass) {
  const double tf = ms > 0 ? flop / (ms * 1e-3) / 1e12 : 0.0;
  std::printf("RESULT name=%s shape=%s ms=%.4f tflops=%.1f err=%.3e status=%s\n", name.c_str(),
              shape.c_str(), ms, tf, err, pass ? "PASS" : "FAIL");
  if (!pass) ++g_failures;
  g_rows.push_back({name, shape, ms, tf, err, pass});
}

// ---- host data ----------------------------------------------------------------------------------

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static double urand() {
  g_rng ^= g_rng << 13;
  g_rng ^= g_rng >> 7;
  g_rng ^= g_rng << 17;
  return double(g_rng >> 11) * (1.0 / 9007199254740992.0);
}
static double nrand() {
  const double u1 = std::max(urand(), 1e-300), u2 = urand();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}
// bf16-rounded random values (host float copy and bf16 bits).
static void randBf16(std::vector<float>& f, std::vector<bf16>& b, size_t n, double scale) {
  f.resize(n);
  b.resize(n);
  for (size_t i = 0; i < n; ++i) {
    b[i] = __float2bfloat16(float(nrand() * scale));
    f[i] = __bfloat162float(b[i]);
  }
}
template <typename T>
static T* devCopy(const std::vector<T>& h) {
  T* d = nullptr;
  CK(cudaMalloc(&d, h.size() * sizeof(T)));
  CK(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
  return d;
}
template <typename T>
static T* devPoisoned(size_t n) {
  T* d = nullptr;
  CK(cudaMalloc(&d, n * sizeof(T)));
  CK(cudaMemset(d, 0xFF, n * sizeof(T)));  // NaN in bf16 and fp32
  return d;
}
static std::vector<float> hostF(const float* d, size_t n) {
  std::vector<float> h(n);
  CK(cudaMemcpy(h.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost));
  return h;
}
static std::vector<float> hostB(const bf16* d, size_t n) {
  std::vector<bf16> b(n);
  CK(cudaMemcpy(b.data(), d, n * sizeof(bf16), cudaMemcpyDeviceToHost));
  std::vector<float> h(n);
  for (size_t i = 0; i < n; ++i) h[i] = __bfloat162float(b[i]);
  return h;
}
static bool allFinite(const std::vector<float>& v) {
  for (float x : v) {
    if (!std::isfinite(x)) return false;
  }
  return true;
}
// ||got - want|| / ||want|| (inf when got has a non-finite value).
static double relErr(const std::vector<float>& got, const std::vector<double>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    num += (got[i] - want[i]) * (got[i] - want[i]);
    den += want[i] * want[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}
static double relErrF(const std::vector<float>& got, const std::vector<float>& want) {
  std::vector<double> w(want.begin(), want.end());
  return relErr(got, w);
}

// ---- shapes and the fp64 reference ----------------------------------------------------------

struct Shape {
  int batch, seqLen, heads, kvHeads, hd;
  int64_t tokens() const { return int64_t(batch) * seqLen; }
  std::string str() const {
    return "B" + std::to_string(batch) + "_T" + std::to_string(seqLen) + "_H" +
           std::to_string(heads) + "_Hkv" + std::to_string(kvHeads) + "_K" + std::to_string(hd);
  }
};

struct HostIn {
  std::vector<float> q, k, v, sink, dO;  // bf16 values
  std::vector<bf16> qb, kb, vb, sinkb, dOb;
};

struct RefOut {
  std::vector<double> o, lse, sinkP, target, dq, dk, dv, dSink;
};

// One (token n, head h): o, lse, p_sink, p (added into tgtRow), dq; dk/dv added when given.
static void refRow(const Shape& s, const HostIn& in, int64_t n, int h, double* o, double& lse,
                   double& sinkP, double* tgtRow, double* dq, double* dk, double* dv,
                   double& dSinkTerm) {
  const int K = s.hd, T = s.seqLen, H = s.heads, g = h / (H / s.kvHeads);
  const int64_t ldq = int64_t(H) * K, ldkv = int64_t(s.kvHeads) * K;
  const int t = int(n % T);
  const int64_t base = n - t;
  const double scale = 1.0 / std::sqrt(double(K));
  const float* qh = &in.q[n * ldq + int64_t(h) * K];
  const float* dOh = &in.dO[n * ldq + int64_t(h) * K];
  std::vector<double> z(t + 1), p(t + 1);
  double m = in.sink[h];
  for (int j = 0; j <= t; ++j) {
    const float* kr = &in.k[(base + j) * ldkv + int64_t(g) * K];
    double acc = 0;
    for (int d = 0; d < K; ++d) acc += double(qh[d]) * kr[d];
    z[j] = acc * scale;
    m = std::max(m, z[j]);
  }
  double l = std::exp(in.sink[h] - m);
  for (int j = 0; j <= t; ++j) l += (p[j] = std::exp(z[j] - m));
  lse = m + std::log(l);
  sinkP = std::exp(in.sink[h] - m) / l;
  for (int d = 0; d < K; ++d) o[d] = 0;
  for (int j = 0; j <= t; ++j) {
    p[j] /= l;
    tgtRow[j] += p[j];
    const float* vr = &in.v[(base + j) * ldkv + int64_t(g) * K];
    for (int d = 0; d < K; ++d) o[d] += p[j] * vr[d];
  }
  double delta = 0;
  for (int d = 0; d < K; ++d) delta += double(dOh[d]) * o[d];
  dSinkTerm = -sinkP * delta;
  for (int d = 0; d < K; ++d) dq[d] = 0;
  for (int j = 0; j <= t; ++j) {
    const float* kr = &in.k[(base + j) * ldkv + int64_t(g) * K];
    const float* vr = &in.v[(base + j) * ldkv + int64_t(g) * K];
    double dp = 0;
    for (int d = 0; d < K; ++d) dp += double(dOh[d]) * vr[d];
    const double dz = p[j] * (dp - delta);
    for (int d = 0; d < K; ++d) dq[d] += scale * dz * kr[d];
    if (dk) {
      double* dkr = dk + (base + j) * ldkv + int64_t(g) * K;
      double* dvr = dv + (base + j) * ldkv + int64_t(g) * K;
      for (int d = 0; d < K; ++d) {
        dkr[d] += scale * dz * qh[d];
        dvr[d] += p[j] * dOh[d];
      }
    }
  }
}

static void normaliseRow(double* row, int count) {
  double sum = 0;
  for (int j = 0; j < count; ++j) sum += row[j];
  for (int j = 0; j < count; ++j) row[j] /= sum;
}

static RefOut reference(const Shape& s, const HostIn& in) {
  const int64_t n = s.tokens(), ldq = int64_t(s.heads) * s.hd, ldkv = int64_t(s.kvHeads) * s.hd;
  RefOut r;
  r.o.assign(n * ldq, 0);
  r.lse.assign(n * s.heads, 0);  // [B, H, T]
  r.sinkP.assign(n * s.heads, 0);
  r.target.assign(n * s.seqLen, 0);
  r.dq.assign(n * ldq, 0);
  r.dk.assign(n * ldkv, 0);
  r.dv.assign(n * ldkv, 0);
  r.dSink.assign(s.heads, 0);
  for (int64_t row = 0; row < n; ++row) {
    const int64_t b = row / s.seqLen, t = row % s.seqLen;
    for (int h = 0; h < s.heads; ++h) {
      double lse, sinkP, term;
      refRow(s, in, row, h, &r.o[row * ldq + int64_t(h) * s.hd], lse, sinkP,
             &r.target[row * s.seqLen], &r.dq[row * ldq + int64_t(h) * s.hd], r.dk.data(),
             r.dv.data(), term);
      r.lse[(b * s.heads + h) * s.seqLen + t] = lse;
      r.sinkP[row * s.heads + h] = sinkP;
      r.dSink[h] += term;
    }
    normaliseRow(&r.target[row * s.seqLen], int(t) + 1);
  }
  return r;
}

static HostIn makeInputs(const Shape& s) {
  HostIn in;
  const int64_t n = s.tokens(), ldq = int64_t(s.heads) * s.hd, ldkv = int64_t(s.kvHeads) * s.hd;
  randBf16(in.q, in.qb, n * ldq, 1.0);
  randBf16(in.k, in.kb, n * ldkv, 1.0);
  randBf16(in.v, in.vb, n * ldkv, 1.0);
  randBf16(in.sink, in.sinkb, s.heads, 2.0);
  randBf16(in.dO, in.dOb, n * ldq, 1.0);
  return in;
}

// ---- device buffers and runners -----------------------------------------------------------------

struct Flash {
  bf16 *q, *k, *v, *sink, *dO, *o, *dq, *dk, *dv;
  float *lse, *sinkP, *target, *dSink, *ws;
  int splits;
};

static Flash flashAlloc(const Shape& s, const HostIn& in) {
  Flash f{};
  const int64_t n = s.tokens(), ldq = int64_t(s.heads) * s.hd, ldkv = int64_t(s.kvHeads) * s.hd;
  f.q = devCopy(in.qb);
  f.k = devCopy(in.kb);
  f.v = devCopy(in.vb);
  f.sink = devCopy(in.sinkb);
  f.dO = devCopy(in.dOb);
  f.o = devPoisoned<bf16>(n * ldq);
  f.dq = devPoisoned<bf16>(n * ldq);
  f.dk = devPoisoned<bf16>(n * ldkv);
  f.dv = devPoisoned<bf16>(n * ldkv);
  f.lse = devPoisoned<float>(n * s.heads);
  f.sinkP = devPoisoned<float>(n * s.heads);
  f.target = devPoisoned<float>(n * s.seqLen);
  f.dSink = devPoisoned<float>(s.heads);
  f.splits = ds::denseStageSplits(s.batch, s.seqLen, s.heads, s.kvHeads);
  f.ws = devPoisoned<float>(2 * n * s.heads + 2 * int64_t(f.splits) * n * ldkv);
  return f;
}
static void flashFree(Flash& f) {
  for (void* p : {(void*)f.q, (void*)f.k, (void*)f.v, (void*)f.sink, (void*)f.dO, (void*)f.o,
                  (void*)f.dq, (void*)f.dk, (void*)f.dv, (void*)f.lse, (void*)f.sinkP,
                  (void*)f.target, (void*)f.dSink, (void*)f.ws}) {
    CK(cudaFree(p));
  }
  f = Flash{};
}
static ds::DenseStageParams flashParams(const Shape& s, const Flash& f) {
  const int64_t n = s.tokens(), ldkv = int64_t(s.kvHeads) * s.hd;
  ds::DenseStageParams p{};
  p.q = f.q;
  p.k = f.k;
  p.v = f.v;
  p.sink = f.sink;
  p.o = f.o;
  p.lse = f.lse;
  p.sinkProbs = f.sinkP;
  p.dO = f.dO;
  p.delta = f.ws;
  p.sinkTerms = f.ws + n * s.heads;
  p.dkPart = p.sinkTerms + n * s.heads;
  p.dvPart = p.dkPart + int64_t(f.splits) * n * ldkv;
  p.dq = f.dq;
  p.dk = f.dk;
  p.dv = f.dv;
  p.dSink = f.dSink;
  p.target = f.target;
  p.seqLen = s.seqLen;
  p.heads = s.heads;
  p.kvHeads = s.kvHeads;
  p.splits = f.splits;
  p.tokens = n;
  p.scale = float(1.0 / std::sqrt(double(s.hd)));
  return p;
}
static void flashFwd(const Shape& s, const Flash& f) {
  const ds::DenseStageParams p = flashParams(s, f);
  CK(s.hd == 64 ? ds::launchDenseStageForward<64>(p, s.batch, 0)
                : ds::launchDenseStageForward<128>(p, s.batch, 0));
}
static void flashTarget(const Shape& s, const Flash& f) {
  const ds::DenseStageParams p = flashParams(s, f);
  CK(s.hd == 64 ? ds::launchDenseStageTarget<64>(p, s.batch, 0)
                : ds::launchDenseStageTarget<128>(p, s.batch, 0));
}
static void flashBwd(const Shape& s, const Flash& f) {
  const ds::DenseStageParams p = flashParams(s, f);
  CK(s.hd == 64 ? ds::launchDenseStageBackward<64>(p, s.batch, 0)
                : ds::launchDenseStageBackward<128>(p, s.batch, 0));
}

// Gathered core over the causal selection (engine's previous dense-stage path).
__global__ void causal_selection_kernel(int64_t n, int seqLen, int32_t* sel) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n * seqLen) return;
  const int64_t row = i / seqLen, slot = i % seqLen;
  sel[i] = slot <= row % seqLen ? int32_t(slot) : -1;
}
// p* from probs [N, H, W] (the engine's indexer_target_fwd_kernel, one warp per row).
__global__ void target_from_probs_kernel(const float* probs, const int32_t* selected, int64_t n,
                                         int64_t heads, int64_t width, float* target) {
  const int64_t r = int64_t(blockIdx.x) * 4 + threadIdx.x / 32;
  const int lane = int(threadIdx.x) % 32;
  if (r >= n) return;
  float partial = 0.0f;
  for (int64_t slot = lane; slot < width; slot += 32) {
    if (selected[r * width + slot] < 0) continue;
    float value = 0.0f;
    for (int64_t h = 0; h < heads; ++h) value += probs[(r * heads + h) * width + slot];
    target[r * width + slot] = value;
    partial += value;
  }
  for (int off = 16; off > 0; off >>= 1) partial += __shfl_xor_sync(0xffffffffu, partial, off);
  const float inv = 1.0f / partial;
  for (int64_t slot = lane; slot < width; slot += 32) {
    const int64_t i = r * width + slot;
    target[i] = selected[i] >= 0 ? target[i] * inv : 0.0f;
  }
}

struct Gathered {
  int32_t* sel;
  float *probs, *sinkP, *target, *dz, *sinkTerms, *dSink;
  bf16 *o, *dq, *dk, *dv;
};
static Gathered gatheredAlloc(const Shape& s) {
  Gathered g{};
  const int64_t n = s.tokens(), ldq = int64_t(s.heads) * s.hd, ldkv = int64_t(s.kvHeads) * s.hd;
  const int64_t w = s.seqLen;
  CK(cudaMalloc(&g.sel, n * w * sizeof(int32_t)));
  causal_selection_kernel<<<unsigned((n * w + 255) / 256), 256>>>(n, s.seqLen, g.sel);
  CK(cudaGetLastError());
  g.probs = devPoisoned<float>(n * s.heads * w);
  g.sinkP = devPoisoned<float>(n * s.heads);
  g.target = devPoisoned<float>(n * w);
  g.dz = devPoisoned<float>(n * s.heads * w);
  g.sinkTerms = devPoisoned<float>(n * s.heads);
  g.dSink = devPoisoned<float>(s.heads);
  g.o = devPoisoned<bf16>(n * ldq);
  g.dq = devPoisoned<bf16>(n * ldq);
  g.dk = devPoisoned<bf16>(n * ldkv);
  g.dv = devPoisoned<bf16>(n * ldkv);
  return g;
}
static void gatheredFree(Gathered& g) {
  for (void* p : {(void*)g.sel, (void*)g.probs, (void*)g.sinkP, (void*)g.target, (void*)g.dz,
                  (void*)g.sinkTerms, (void*)g.dSink, (void*)g.o, (void*)g.dq, (void*)g.dk,
                  (void*)g.dv}) {
    CK(cudaFree(p));
  }
  g = Gathered{};
}
static void gatheredFwd(const Shape& s, const Flash& f, const Gathered& g) {
  const sd::CoreShape cs = sd::makeCoreShape(s.seqLen, s.seqLen, s.heads, s.kvHeads, s.hd);
  CK(sd::launchSparseFwdMma(0, f.q, f.k, f.v, f.sink, g.sel, s.batch, cs, g.probs, g.sinkP,
                            g.o));
}
static void gatheredTarget(const Shape& s, const Gathered& g) {
  const int64_t n = s.tokens();
  target_from_probs_kernel<<<unsigned((n + 3) / 4), 128>>>(g.probs, g.sel, n, s.heads, s.seqLen,
                                                           g.target);
  CK(cudaGetLastError());
}
static void gatheredBwd(const Shape& s, const Flash& f, const Gathered& g) {
  const sd::CoreShape cs = sd::makeCoreShape(s.seqLen, s.seqLen, s.heads, s.kvHeads, s.hd);
  const sd::CoreBwdArgs a{f.dO,  f.q,     f.k,     f.v,         g.o,  g.sel, g.probs, g.sinkP,
                          nullptr, nullptr, g.dz, g.sinkTerms, g.dq, g.dk,  g.dv,    g.dSink};
  CK(sd::launchSparseBwd(0, s.batch, cs, a, true, sd::KeyBwdPath::kMma));
}

// ---- checks -------------------------------------------------------------------------------------

static const std::vector<float> kDSinkInit = {0.25f, -0.5f, 0.75f, 1.0f};
static void initDSink(float* d, int heads) {
  std::vector<float> h(heads);
  for (int i = 0; i < heads; ++i) h[i] = kDSinkInit[i % 4];
  CK(cudaMemcpy(d, h.data(), heads * sizeof(float), cudaMemcpyHostToDevice));
}
static std::vector<float> dSinkDelta(const float* d, int heads) {
  std::vector<float> h = hostF(d, heads);
  for (int i = 0; i < heads; ++i) h[i] -= kDSinkInit[i % 4];
  return h;
}

static void check(const std::string& what, const std::string& shape, double err, double tol) {
  report(what, shape, 0.0, 0.0, err, err <= tol);
}

static void smallCase(const Shape& s) {
  const HostIn in = makeInputs(s);
  const RefOut r = reference(s, in);
  Flash f = flashAlloc(s, in);
  const int64_t n = s.tokens(), ldq = int64_t(s.heads) * s.hd, ldkv = int64_t(s.kvHeads) * s.hd;
  flashFwd(s, f);
  flashTarget(s, f);
  initDSink(f.dSink, s.heads);
  flashBwd(s, f);
  CK(cudaDeviceSynchronize());
  const std::string sh = s.str();
  check("small.context", sh, relErr(hostB(f.o, n * ldq), r.o), 1e-2);
  check("small.lse", sh, relErr(hostF(f.lse, n * s.heads), r.lse), 1e-4);
  check("small.sinkProbs", sh, relErr(hostF(f.sinkP, n * s.heads), r.sinkP), 1e-3);
  const std::vector<float> tgt = hostF(f.target, n * s.seqLen);
  bool zeros = true;
  for (int64_t row = 0; row < n; ++row) {
    for (int c = int(row % s.seqLen) + 1; c < s.seqLen; ++c) zeros &= tgt[row * s.seqLen + c] == 0;
  }
  check("small.target", sh, zeros ? relErr(tgt, r.target) : INFINITY, 1e-4);
  const std::vector<float> dq = hostB(f.dq, n * ldq), dk = hostB(f.dk, n * ldkv);
  const std::vector<float> dv = hostB(f.dv, n * ldkv), dSink = dSinkDelta(f.dSink, s.heads);
  check("small.dq", sh, relErr(dq, r.dq), 2e-2);
  check("small.dk", sh, relErr(dk, r.dk), 2e-2);
  check("small.dv", sh, relErr(dv, r.dv), 2e-2);
  check("small.dSink", sh, relErr(dSink, r.dSink), 2e-2);
  // Determinism: a second backward on poisoned outputs, bit for bit.
  CK(cudaMemset(f.dq, 0xFF, n * ldq * sizeof(bf16)));
  CK(cudaMemset(f.dk, 0xFF, n * ldkv * sizeof(bf16)));
  CK(cudaMemset(f.dv, 0xFF, n * ldkv * sizeof(bf16)));
  initDSink(f.dSink, s.heads);
  flashBwd(s, f);
  CK(cudaDeviceSynchronize());
  const bool same = hostB(f.dq, n * ldq) == dq && hostB(f.dk, n * ldkv) == dk &&
                    hostB(f.dv, n * ldkv) == dv && dSinkDelta(f.dSink, s.heads) == dSink;
  check("small.bwd_bitwise", sh, same ? 0.0 : 1.0, 0.0);
  flashFree(f);
}

template <typename F>
static double timeMs(F&& fn, int reps) {
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  fn();
  fn();
  std::vector<float> ms(reps);
  for (int i = 0; i < reps; ++i) {
    CK(cudaEventRecord(a));
    fn();
    CK(cudaEventRecord(b));
    CK(cudaEventSynchronize(b));
    CK(cudaEventElapsedTime(&ms[i], a, b));
  }
  CK(cudaEventDestroy(a));
  CK(cudaEventDestroy(b));
  std::sort(ms.begin(), ms.end());
  return ms[reps / 2];
}

static void benchCase(const Shape& s) {
  const HostIn in = makeInputs(s);
  Flash f = flashAlloc(s, in);
  Gathered g = gatheredAlloc(s);
  const int64_t n = s.tokens(), ldq = int64_t(s.heads) * s.hd, ldkv = int64_t(s.kvHeads) * s.hd;
  const std::string sh = s.str();
  flashFwd(s, f);
  flashTarget(s, f);
  initDSink(f.dSink, s.heads);
  flashBwd(s, f);
  gatheredFwd(s, f, g);
  gatheredTarget(s, g);
  initDSink(g.dSink, s.heads);
  gatheredBwd(s, f, g);
  CK(cudaDeviceSynchronize());

  // Flash vs gathered over every element.
  const std::vector<float> oF = hostB(f.o, n * ldq), sinkF = hostF(f.sinkP, n * s.heads);
  const std::vector<float> tgtF = hostF(f.target, n * s.seqLen), lseF = hostF(f.lse, n * s.heads);
  const std::vector<float> dqF = hostB(f.dq, n * ldq), dkF = hostB(f.dk, n * ldkv);
  const std::vector<float> dvF = hostB(f.dv, n * ldkv), dSinkF = dSinkDelta(f.dSink, s.heads);
  bool finite = allFinite(oF) && allFinite(sinkF) && allFinite(tgtF) && allFinite(lseF) &&
                allFinite(dqF) && allFinite(dkF) && allFinite(dvF) && allFinite(dSinkF);
  check("big.flash_all_finite", sh, finite ? 0.0 : 1.0, 0.0);
  check("big.vs_gathered.context", sh, relErrF(oF, hostB(g.o, n * ldq)), 1e-2);
  check("big.vs_gathered.sinkProbs", sh, relErrF(sinkF, hostF(g.sinkP, n * s.heads)), 1e-3);
  check("big.vs_gathered.target", sh, relErrF(tgtF, hostF(g.target, n * s.seqLen)), 1e-4);
  check("big.vs_gathered.dq", sh, relErrF(dqF, hostB(g.dq, n * ldq)), 2e-2);
  check("big.vs_gathered.dk", sh, relErrF(dkF, hostB(g.dk, n * ldkv)), 2e-2);
  check("big.vs_gathered.dv", sh, relErrF(dvF, hostB(g.dv, n * ldkv)), 2e-2);
  check("big.vs_gathered.dSink", sh, relErrF(dSinkF, dSinkDelta(g.dSink, s.heads)), 2e-2);

  // 32 sampled query rows vs fp64 CPU.
  std::vector<double> wantO, wantLse, wantSink, wantTgt, wantDq;
  std::vector<float> gotO, gotLse, gotSink, gotTgt, gotDq;
  const int ts[8] = {0, 1, 63, 64, 127, 1000, s.seqLen - 2, s.seqLen - 1};
  std::vector<double> o(s.hd), dq(s.hd), tgt(s.seqLen);
  for (int b = 0; b < s.batch; ++b) {
    for (int t : ts) {
      const int64_t row = int64_t(b) * s.seqLen + t;
      std::fill(tgt.begin(), tgt.end(), 0.0);
      for (int h = 0; h < s.heads; ++h) {
        double lse, sinkP, term;
        refRow(s, in, row, h, o.data(), lse, sinkP, tgt.data(), dq.data(), nullptr, nullptr,
               term);
        for (int d = 0; d < s.hd; ++d) {
          wantO.push_back(o[d]);
          wantDq.push_back(dq[d]);
          gotO.push_back(oF[row * ldq + int64_t(h) * s.hd + d]);
          gotDq.push_back(dqF[row * ldq + int64_t(h) * s.hd + d]);
        }
        wantLse.push_back(lse);
        gotLse.push_back(lseF[(int64_t(b) * s.heads + h) * s.seqLen + t]);
        wantSink.push_back(sinkP);
        gotSink.push_back(sinkF[row * s.heads + h]);
      }
      normaliseRow(tgt.data(), t + 1);
      for (int c = 0; c < s.seqLen; ++c) {
        wantTgt.push_back(tgt[c]);
        gotTgt.push_back(tgtF[row * s.seqLen + c]);
      }
    }
  }
  check("big.vs_cpu_rows.context", sh, relErr(gotO, wantO), 1e-2);
  check("big.vs_cpu_rows.lse", sh, relErr(gotLse, wantLse), 1e-4);
  check("big.vs_cpu_rows.sinkProbs", sh, relErr(gotSink, wantSink), 1e-3);
  check("big.vs_cpu_rows.target", sh, relErr(gotTgt, wantTgt), 1e-4);
  check("big.vs_cpu_rows.dq", sh, relErr(gotDq, wantDq), 2e-2);

  // Determinism of the flash backward.
  CK(cudaMemset(f.dq, 0xFF, n * ldq * sizeof(bf16)));
  CK(cudaMemset(f.dk, 0xFF, n * ldkv * sizeof(bf16)));
  initDSink(f.dSink, s.heads);
  flashBwd(s, f);
  CK(cudaDeviceSynchronize());
  const bool same = hostB(f.dq, n * ldq) == dqF && hostB(f.dk, n * ldkv) == dkF &&
                    hostB(f.dv, n * ldkv) == dvF && dSinkDelta(f.dSink, s.heads) == dSinkF;
  check("big.flash_bwd_bitwise", sh, same ? 0.0 : 1.0, 0.0);

  // Timing.
  const double fl = 2.0 * s.batch * s.heads * double(s.seqLen) * s.seqLen * s.hd;
  const int reps = 20;
  const double fFwd = timeMs([&] { flashFwd(s, f); }, reps);
  const double fTgt = timeMs([&] { flashTarget(s, f); }, reps);
  const double fBwd = timeMs([&] { flashBwd(s, f); }, reps);
  const double gFwd = timeMs([&] { gatheredFwd(s, f, g); }, reps);
  const double gTgt = timeMs([&] { gatheredTarget(s, g); }, reps);
  const double gBwd = timeMs([&] { gatheredBwd(s, f, g); }, reps);
  report("flash_fwd", sh, fFwd, fl, 0, true);
  report("flash_target", sh, fTgt, fl / 2, 0, true);
  report("flash_bwd", sh, fBwd, 2.5 * fl, 0, true);
  report("flash_total", sh, fFwd + fTgt + fBwd, 4.0 * fl, 0, true);
  report("gathered_fwd", sh, gFwd, fl, 0, true);
  report("gathered_target", sh, gTgt, 0, 0, true);
  report("gathered_bwd", sh, gBwd, 2.5 * fl, 0, true);
  report("gathered_total", sh, gFwd + gTgt + gBwd, 4.0 * fl, 0, true);
  std::printf("speedup fwd+target+bwd: %.2fx\n", (gFwd + gTgt + gBwd) / (fFwd + fTgt + fBwd));
  gatheredFree(g);
  flashFree(f);
}

int main() {
  const Shape small[] = {
      {1, 1, 1, 1, 64},    {2, 77, 4, 1, 64},   {1, 200, 16, 1, 128}, {2, 130, 6, 2, 128},
      {1, 333, 20, 4, 64}, {2, 65, 3, 3, 128},  {1, 129, 16, 2, 64},  {3, 256, 4, 2, 128},
  };
  for (const Shape& s : small) smallCase(s);
  benchCase({4, 4096, 16, 1, 128});
  std::printf("\n%-28s %-24s %10s %8s %10s %s\n", "name", "shape", "ms", "TFLOP/s", "err",
              "status");
  for (const Row& r : g_rows) {
    std::printf("%-28s %-24s %10.4f %8.1f %10.3e %s\n", r.name.c_str(), r.shape.c_str(), r.ms,
                r.tflops, r.err, r.pass ? "PASS" : "FAIL");
  }
  std::printf("%s (%d failures)\n", g_failures ? "FAIL" : "PASS", g_failures);
  return g_failures ? 1 : 0;
}
