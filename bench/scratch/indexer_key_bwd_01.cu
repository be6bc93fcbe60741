// Indexer key-side backward, round 1 (bench/scratch/indexer_key_bwd_01.md):
// engine/ops/sparse_attention/indexer_key_bwd_tiled.cuh (KM = 32 and 64 forced, and the
// launcher's own choice) against a copy of today's indexer_key_bwd_kernel (indexer_cuda.cu) and
// an fp64 host loop.
// Build:
//   nvcc -O3 -std=c++17 -arch=sm_90a -lineinfo -Xptxas -v -Xcompiler -fopenmp \
//        -I/work/main/engine -o .scratch/bin/indexer_key_bwd_01 bench/scratch/indexer_key_bwd_01.cu
// Run: .scratch/bin/indexer_key_bwd_01   (no arguments; exits 1 on any FAIL or CUDA error)
// Selections: host top-k per query over s <= t of integer-valued random scores (many ties), ties
// to the earlier key, slots in ascending key order, -1 padding when t + 1 < W (as
// indexerTopKCuda); transposed by a stable counting sort (as launchTransposeSelection: per key
// its query * W + slot entries in query order). coef random with ~half zeros (the ReLU), NaN in
// padding slots (never read). Checks: tiled vs fp64 and vs the old kernel (max |diff| / max |ref|,
// bound 1e-4: fp32 sums of up to ~16k terms), dk poisoned with NaN first; large shapes check the
// fp64 loop on every 7th key.
// Timing: median of 20 (cudaEvent per call) at B=4 T=4096 HI=8 dI=64 W=512 and B=1 T=32768 W=2048.
#include <cuda_runtime.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <vector>

#include "ops/sparse_attention/indexer_key_bwd_tiled.cuh"

using namespace moewb::engine::cuda::sparse_detail;

#define CK(x)                                                                         \
  do {                                                                                \
    cudaError_t e_ = (x);                                                             \
    if (e_ != cudaSuccess) {                                                          \
      std::printf("CUDA error %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__); \
      std::exit(1);                                                                   \
    }                                                                                 \
  } while (0)

// Copy of today's engine kernel (indexer_cuda.cu, indexer_key_bwd_kernel), one warp per key.
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

struct Shape {
  int batch, seqLen, heads, di, topK;
  bool time;
};

struct Host {
  int64_t n, width;
  std::vector<float> q, coef;
  std::vector<int32_t> keyStart, entries;
};

uint64_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  return x ^ (x >> 33);
}
float unitRand(uint64_t seed, uint64_t i) {
  return float(mix(seed * 0x9e3779b97f4a7c15ull + i) >> 40) / float(1 << 24);
}

Host build(const Shape& s, uint64_t seed) {
  Host h;
  h.n = int64_t(s.batch) * s.seqLen;
  h.width = std::min<int64_t>(s.topK, s.seqLen);
  const int64_t n = h.n, w = h.width, hi = s.heads;
  std::vector<int32_t> sel(size_t(n * w));
#pragma omp parallel for schedule(dynamic, 64)
  for (int64_t r = 0; r < n; ++r) {
    const int64_t t = r % s.seqLen, count = t + 1;
    int32_t* out = sel.data() + r * w;
    if (count <= w) {
      for (int64_t i = 0; i < w; ++i) out[i] = i < count ? int32_t(i) : -1;
      continue;
    }
    std::vector<uint64_t> keys(static_cast<size_t>(count));  // (score, earlier wins) as one integer
    for (int64_t k = 0; k < count; ++k) {
      const uint64_t score = mix(seed ^ uint64_t(r * 1315423911ull + k)) % 997;
      keys[size_t(k)] = (score << 32) | uint64_t(0xffffffffu - uint32_t(k));
    }
    std::nth_element(keys.begin(), keys.begin() + (w - 1), keys.end(), std::greater<uint64_t>());
    std::vector<int32_t> chosen(static_cast<size_t>(w));
    for (int64_t i = 0; i < w; ++i) {
      chosen[size_t(i)] = int32_t(0xffffffffu - uint32_t(keys[size_t(i)]));
    }
    std::sort(chosen.begin(), chosen.end());
    std::copy(chosen.begin(), chosen.end(), out);
  }
  h.keyStart.assign(size_t(n + 1), 0);  // counting sort by key token, stable in query order
  for (int64_t i = 0; i < n * w; ++i) {
    if (sel[size_t(i)] >= 0) ++h.keyStart[size_t(i / w - (i / w) % s.seqLen + sel[size_t(i)] + 1)];
  }
  for (int64_t m = 0; m < n; ++m) h.keyStart[size_t(m + 1)] += h.keyStart[size_t(m)];
  h.entries.assign(size_t(h.keyStart[size_t(n)]), 0);
  std::vector<int32_t> fill(h.keyStart.begin(), h.keyStart.end() - 1);
  for (int64_t i = 0; i < n * w; ++i) {
    if (sel[size_t(i)] < 0) continue;
    const int64_t key = i / w - (i / w) % s.seqLen + sel[size_t(i)];
    h.entries[size_t(fill[size_t(key)]++)] = int32_t(i);
  }
  h.q.resize(size_t(n * hi * s.di));
  h.coef.resize(size_t(n * hi * w));
#pragma omp parallel for
  for (int64_t i = 0; i < int64_t(h.q.size()); ++i) {
    h.q[size_t(i)] = 2.0f * unitRand(seed + 1, i) - 1.0f;
  }
#pragma omp parallel for
  for (int64_t i = 0; i < int64_t(h.coef.size()); ++i) {
    const int64_t r = i / (hi * w), slot = i % w;
    const float u = unitRand(seed + 2, i);
    h.coef[size_t(i)] = sel[size_t(r * w + slot)] < 0 ? NAN : (u < 0.5f ? 0.0f : 4.0f * u - 3.0f);
  }
  return h;
}

// fp64 dk of every `stride`-th key.
std::vector<double> reference(const Shape& s, const Host& h, int stride) {
  std::vector<double> dk(size_t(h.n * s.di), 0.0);
  const int64_t hi = s.heads, di = s.di, w = h.width;
#pragma omp parallel for schedule(dynamic, 16)
  for (int64_t m = 0; m < h.n; m += stride) {
    double* out = dk.data() + m * di;
    for (int32_t e = h.keyStart[size_t(m)]; e < h.keyStart[size_t(m + 1)]; ++e) {
      const int64_t entry = h.entries[size_t(e)], r = entry / w, slot = entry % w;
      for (int64_t j = 0; j < hi; ++j) {
        const double c = h.coef[size_t((r * hi + j) * w + slot)];
        const float* qr = h.q.data() + (r * hi + j) * di;
        for (int64_t d = 0; d < di; ++d) out[d] += c * double(qr[d]);
      }
    }
  }
  return dk;
}

// max |got - want| / max |want| over the checked keys.
double relErr(const std::vector<float>& got, const std::vector<double>& want, int64_t di,
              int stride, int64_t n) {
  double maxDiff = 0.0, maxRef = 0.0;
  for (int64_t m = 0; m < n; m += stride) {
    for (int64_t d = 0; d < di; ++d) {
      const double g = got[size_t(m * di + d)], r = want[size_t(m * di + d)];
      maxDiff = std::isfinite(g) ? std::max(maxDiff, std::fabs(g - r)) : INFINITY;
      maxRef = std::max(maxRef, std::fabs(r));
    }
  }
  return maxRef > 0.0 ? maxDiff / maxRef : maxDiff;
}

struct Device {
  float *q = nullptr, *coef = nullptr, *dk = nullptr;
  int32_t *keyStart = nullptr, *entries = nullptr;
};

enum class Kernel { kOld, kTiledAuto, kTiled32, kTiled64 };
const char* kernelName(Kernel k) {
  return k == Kernel::kOld ? "old" : k == Kernel::kTiledAuto ? "tiled(auto)"
                                   : k == Kernel::kTiled32  ? "tiled KM=32"
                                                            : "tiled KM=64";
}

template <int KM>
cudaError_t launchForced(const Shape& s, const KeyTiledArgs& a) {
  if (s.di == 64 && s.heads == 8) return launchKeyTiled<KM, 64, 8>(0, a, s.batch);
  if (s.di == 128 && s.heads == 8) return launchKeyTiled<KM, 128, 8>(0, a, s.batch);
  if (s.di == 64 && s.heads == 4) return launchKeyTiled<KM, 64, 4>(0, a, s.batch);
  if (s.di == 128 && s.heads == 16) return launchKeyTiled<KM, 128, 16>(0, a, s.batch);
  if (s.di == 64 && s.heads == 16) return launchKeyTiled<KM, 64, 16>(0, a, s.batch);
  return cudaErrorInvalidValue;
}

void launch(Kernel k, const Shape& s, const Host& h, const Device& d) {
  const KeyTiledArgs a{d.q, d.coef, d.keyStart, d.entries, int(h.n), s.seqLen, int(h.width), d.dk};
  switch (k) {
    case Kernel::kOld:
      old_key_bwd_kernel<<<unsigned((h.n + 3) / 4), 128>>>(d.q, d.coef, d.keyStart, d.entries, h.n,
                                                           h.width, s.heads, s.di, d.dk);
      CK(cudaGetLastError());
      break;
    case Kernel::kTiledAuto:
      CK(launchIndexerKeyBwdTiled(0, d.q, d.coef, d.keyStart, d.entries, s.batch, s.seqLen,
                                  h.width, s.heads, s.di, d.dk));
      break;
    case Kernel::kTiled32: CK(launchForced<32>(s, a)); break;
    case Kernel::kTiled64: CK(launchForced<64>(s, a)); break;
  }
}

template <typename T>
T* upload(const std::vector<T>& v) {
  T* p = nullptr;
  CK(cudaMalloc(&p, std::max<size_t>(v.size(), 1) * sizeof(T)));
  if (!v.empty()) CK(cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
  return p;
}

bool runShape(const Shape& s, uint64_t seed) {
  const Host h = build(s, seed);
  Device d;
  d.q = upload(h.q);
  d.coef = upload(h.coef);
  d.keyStart = upload(h.keyStart);
  d.entries = upload(h.entries);
  CK(cudaMalloc(&d.dk, size_t(h.n * s.di) * sizeof(float)));
  const int stride = h.n * h.width > (int64_t(1) << 24) ? 7 : 1;
  const std::vector<double> want = reference(s, h, stride);
  std::vector<float> oldDk(size_t(h.n * s.di));
  bool ok = true;
  double oldMs = 0.0;
  for (Kernel k : {Kernel::kOld, Kernel::kTiledAuto, Kernel::kTiled32, Kernel::kTiled64}) {
    CK(cudaMemset(d.dk, 0xff, size_t(h.n * s.di) * sizeof(float)));  // NaN poison
    launch(k, s, h, d);
    CK(cudaDeviceSynchronize());
    std::vector<float> got(size_t(h.n * s.di));
    CK(cudaMemcpy(got.data(), d.dk, got.size() * sizeof(float), cudaMemcpyDeviceToHost));
    if (k == Kernel::kOld) oldDk = got;
    const double errRef = relErr(got, want, s.di, stride, h.n);
    std::vector<double> oldD(oldDk.begin(), oldDk.end());
    const double errOld = relErr(got, oldD, s.di, 1, h.n);
    const bool pass = errRef <= 1e-4 && errOld <= 1e-4;
    ok = ok && pass;
    double ms = 0.0;
    if (s.time) {
      std::vector<float> times;
      cudaEvent_t e0, e1;
      CK(cudaEventCreate(&e0));
      CK(cudaEventCreate(&e1));
      for (int rep = 0; rep < 21; ++rep) {
        CK(cudaEventRecord(e0));
        launch(k, s, h, d);
        CK(cudaEventRecord(e1));
        CK(cudaEventSynchronize(e1));
        float t = 0.0f;
        CK(cudaEventElapsedTime(&t, e0, e1));
        if (rep > 0) times.push_back(t);
      }
      std::sort(times.begin(), times.end());
      ms = times[times.size() / 2];
      if (k == Kernel::kOld) oldMs = ms;
    }
    const double usefulFma = double(h.entries.size()) * s.heads * s.di;
    std::printf("B=%d T=%5d HI=%2d dI=%3d W=%4lld %-12s errFp64 %.2e errOld %.2e", s.batch,
                s.seqLen, s.heads, s.di, (long long)h.width, kernelName(k), errRef, errOld);
    if (s.time) {
      std::printf("  %8.3f ms  useful %6.2f TFLOP/s  x%.2f", ms, 2.0 * usefulFma / ms * 1e-9,
                  oldMs / ms);
    }
    std::printf("  %s\n", pass ? "PASS" : "FAIL");
  }
  CK(cudaFree(d.q));
  CK(cudaFree(d.coef));
  CK(cudaFree(d.keyStart));
  CK(cudaFree(d.entries));
  CK(cudaFree(d.dk));
  return ok;
}

int main() {
  const Shape shapes[] = {
      {1, 1, 8, 64, 16, false},      {1, 100, 8, 64, 16, false},   {3, 200, 8, 64, 64, false},
      {3, 77, 8, 128, 100, false},   {1, 1000, 4, 64, 48, false},  {2, 333, 16, 128, 40, false},
      {2, 130, 16, 64, 512, false},  {3, 8200, 8, 64, 64, false},  {1, 2111, 8, 64, 512, false},
      {4, 4096, 8, 64, 512, true},   {1, 32768, 8, 64, 2048, true},
  };
  bool ok = true;
  uint64_t seed = 11;
  for (const Shape& s : shapes) ok = runShape(s, ++seed) && ok;
  std::printf("%s\n", ok ? "ALL PASS" : "SOME FAIL");
  return ok ? 0 : 1;
}
