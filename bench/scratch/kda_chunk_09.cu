// KDA per-chunk backward (kda_bwd_chunk.cuh, round 6 as the engine runs it), stage phase round
// (bench/scratch/kda_chunk_09.md): times the kernel alone on random inputs of the benchmark
// shapes and prints an FNV-1a hash of every output and scratch buffer it writes, so a build of
// this file against the engine header before a change (an include path holding the old
// ops/kda/kda_bwd_chunk.cuh ahead of -Iengine) and one after it can be compared bitwise on the
// same inputs. The numerics against fp64 are the GPU tests' (KdaBwdChunkRound*, KdaChunk*).
// Build (from the repository root):
//   F="-O3 -std=c++20 -gencode=arch=compute_90a,code=sm_90a -Iengine -Iengine/include -Ibase/include"
//   nvcc $F -o .scratch/bin/kda_chunk_09 bench/scratch/kda_chunk_09.cu
//   nvcc $F -DMOEWB_KDA_BWD_PHASE_CLOCK -o .scratch/bin/kda_chunk_09_clock bench/scratch/kda_chunk_09.cu
//   old header: mkdir -p /tmp/old/ops/kda && git show HEAD:engine/ops/kda/kda_bwd_chunk.cuh \
//     > /tmp/old/ops/kda/kda_bwd_chunk.cuh; nvcc $F -I/tmp/old ... (the -I/tmp/old first)
// Inputs: q, k L2-normalised rows (q scaled by K^-1/2), v, dO ~ N(0, 1) bf16, gates U[-0.3, -0.01)
// (the model's range: every diagonal block on tensor cores), beta U(0, 1), M unit lower
// triangular with N(0, 0.05) below the diagonal, states / dS / Vn / dVn / P0..P4 / sds ~ N(0, 0.1).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "ops/kda/kda_bwd_chunk.cuh"

namespace nk = moewb::engine::cuda::kda_detail;
using bf16 = __nv_bfloat16;

#define CK(call)                                                                             \
  do {                                                                                       \
    cudaError_t e_ = (call);                                                                 \
    if (e_ != cudaSuccess) {                                                                 \
      std::fprintf(stderr, "CUDA error %s at %s:%d: %s\n", cudaGetErrorString(e_), __FILE__, \
                   __LINE__, #call);                                                         \
      std::exit(1);                                                                          \
    }                                                                                        \
  } while (0)

namespace {

std::mt19937_64 rng(909);

template <typename T>
T* upload(const std::vector<T>& h) {
  T* p = nullptr;
  CK(cudaMalloc(&p, h.size() * sizeof(T)));
  CK(cudaMemcpy(p, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
  return p;
}

std::vector<float> normal(int64_t n, float sd) {
  std::normal_distribution<float> d(0.f, sd);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = d(rng);
  return v;
}

std::vector<bf16> toBf16(const std::vector<float>& v) {
  std::vector<bf16> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = __float2bfloat16(v[i]);
  return out;
}

std::vector<bf16> unitRows(int64_t rows, int64_t width, float scale) {
  std::vector<float> v = normal(rows * width, 1.f);
  for (int64_t r = 0; r < rows; ++r) {
    double s = 0;
    for (int64_t d = 0; d < width; ++d) s += double(v[r * width + d]) * v[r * width + d];
    for (int64_t d = 0; d < width; ++d) v[r * width + d] *= scale / float(std::sqrt(s + 1e-6));
  }
  return toBf16(v);
}

uint64_t fnv(const void* dev, int64_t bytes) {
  std::vector<unsigned char> h(static_cast<size_t>(bytes));
  CK(cudaMemcpy(h.data(), dev, size_t(bytes), cudaMemcpyDeviceToHost));
  uint64_t x = 1469598103934665603ull;
  for (unsigned char b : h) x = (x ^ b) * 1099511628211ull;
  return x;
}

struct Run {
  nk::CoreArgs a;
  nk::IntraBwdArgs p;
  std::vector<float> p0h, p1h, p2h;  // scratch the kernel overwrites: restored before each run
  int64_t rowsR, n;
};

Run make(int64_t B, int64_t T) {
  const int64_t H = 16, K = 128, V = 128, C = 64, NC = (T + C - 1) / C;
  Run r;
  r.a = {B, T, H, H, K, V, C, NC};
  r.n = B * T;
  r.rowsR = B * H * NC * C;
  const int64_t n = r.n, R = r.rowsR, slots = B * H * NC;
  std::uniform_real_distribution<float> uni(0.f, 1.f);
  std::vector<float> g(static_cast<size_t>(n * H * K)), beta(static_cast<size_t>(n * H));
  for (auto& x : g) x = -0.01f - 0.29f * uni(rng);
  for (auto& x : beta) x = uni(rng);
  std::vector<float> m = normal(R * C, 0.05f);
  for (int64_t row = 0; row < R; ++row) {
    for (int64_t j = 0; j < C; ++j) {
      const int64_t i = row % C;
      if (j > i) m[row * C + j] = 0.f;
      if (j == i) m[row * C + j] = 1.f;
    }
  }
  r.p0h = normal(R * K, 0.1f);
  r.p1h = normal(R * K, 0.1f);
  r.p2h = normal(R * K, 0.1f);
  auto zeros = [](int64_t count) { return std::vector<float>(static_cast<size_t>(count), 0.f); };
  r.p.q = upload(unitRows(n * H, K, 1.f / std::sqrt(float(K))));
  r.p.k = upload(unitRows(n * H, K, 1.f));
  r.p.v = upload(toBf16(normal(n * H * V, 1.f)));
  r.p.dO = upload(toBf16(normal(n * H * V, 1.f)));
  r.p.g = upload(g);
  r.p.beta = upload(beta);
  r.p.savedM = upload(m);
  r.p.states = upload(normal(slots * K * V, 0.1f));
  r.p.dStates = upload(normal(slots * K * V, 0.1f));
  r.p.vn = upload(normal(R * V, 0.1f));
  r.p.dvn = upload(normal(R * V, 0.1f));
  r.p.dqAcc = upload(zeros(n * H * K));
  r.p.dkAcc = upload(zeros(n * H * K));
  r.p.dGWork = upload(zeros(R * K));
  r.p.dv = upload(toBf16(zeros(n * H * V)));
  r.p.dg = upload(zeros(n * H * K));
  r.p.dbeta = upload(zeros(n * H));
  r.p.p0 = upload(r.p0h);
  r.p.p1 = upload(r.p1h);
  r.p.p2 = upload(r.p2h);
  r.p.p3 = upload(normal(R * C, 0.1f));
  r.p.p4 = upload(normal(R * C, 0.1f));
  r.p.sds = upload(normal(slots * K, 0.1f));
  return r;
}

void reset(Run& r) {  // the inputs the kernel overwrites or accumulates into
  const int64_t hk = r.n * r.a.heads * r.a.keyDim;
  CK(cudaMemset(r.p.dqAcc, 0, size_t(hk) * 4));
  CK(cudaMemset(r.p.dkAcc, 0, size_t(hk) * 4));
  CK(cudaMemcpy(r.p.p0, r.p0h.data(), r.p0h.size() * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(r.p.p1, r.p1h.data(), r.p1h.size() * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(r.p.p2, r.p2h.data(), r.p2h.size() * 4, cudaMemcpyHostToDevice));
}

void runShape(int64_t B, int64_t T) {
  Run r = make(B, T);
  reset(r);
  CK(nk::launchChunkBackwardSplit(nullptr, r.a, r.p, true));
  CK(cudaDeviceSynchronize());
  const int64_t hk = r.n * r.a.heads * r.a.keyDim, R = r.rowsR, K = r.a.keyDim;
  const uint64_t h = fnv(r.p.dqAcc, hk * 4) ^ 3 * fnv(r.p.dkAcc, hk * 4) ^
                     5 * fnv(r.p.dv, r.n * r.a.heads * r.a.valueDim * 2) ^ 7 * fnv(r.p.dg, hk * 4) ^
                     11 * fnv(r.p.dbeta, r.n * r.a.heads * 4) ^ 13 * fnv(r.p.dGWork, R * K * 4) ^
                     17 * fnv(r.p.p0, R * K * 4) ^ 19 * fnv(r.p.p1, R * K * 4) ^
                     23 * fnv(r.p.p2, R * K * 4);
  std::vector<float> ms;
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  for (int it = 0; it < 23; ++it) {
    CK(cudaEventRecord(e0));
    CK(nk::launchChunkBackwardSplit(nullptr, r.a, r.p, true));
    CK(cudaEventRecord(e1));
    CK(cudaEventSynchronize(e1));
    float t = 0;
    CK(cudaEventElapsedTime(&t, e0, e1));
    if (it >= 3) ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  std::printf("| B%lld T%lld | bwd_chunk (round 6) | %.3f ms | outputs hash %016llx |\n",
              (long long)B, (long long)T, ms[ms.size() / 2], (unsigned long long)h);
#if defined(MOEWB_KDA_BWD_PHASE_CLOCK)
  long long c[nk::kBwdClockCtas][nk::kBwdClockStamps] = {};
  CK(cudaMemcpyToSymbol(nk::gKdaBwdClock, c, sizeof(c)));
  reset(r);
  CK(nk::launchChunkBackwardSplit(nullptr, r.a, r.p, true));
  CK(cudaDeviceSynchronize());
  CK(cudaMemcpyFromSymbol(c, nk::gKdaBwdClock, sizeof(c)));
  const char* names[] = {"",          "stage + G",     "(2)",        "inter-chunk + dW / kE",
                         "dT / dKg",  "dbeta / dM / dVn", "dv / X",  "dL + q / beta k operands",
                         "kR",        "pairwise",      "(10)",       "reverse cumsum + dbeta"};
  for (int k = 0; k < nk::kBwdClockCtas; ++k) {
    for (int s = 1; s < nk::kBwdClockStamps; ++s) {
      if (c[k][s] == 0) c[k][s] = c[k][s - 1];
    }
  }
  const int last = nk::kBwdClockStamps - 1;
  double total = 0;
  for (int k = 0; k < nk::kBwdClockCtas; ++k) total += double(c[k][last] - c[k][0]);
  total /= nk::kBwdClockCtas;
  for (int s = 1; s <= last; ++s) {
    double t = 0;
    for (int k = 0; k < nk::kBwdClockCtas; ++k) t += double(c[k][s] - c[k][s - 1]);
    t /= nk::kBwdClockCtas;
    if (t > 0) std::printf("  %-26s %8.0f  %5.1f%%\n", names[s], t, 100 * t / total);
  }
  std::printf("  %-26s %8.0f\n", "kernel", total);
#endif
}

}  // namespace

// Usage: kda_chunk_09 [all]   (B2 T8192; "all" adds B1 T32768, whose random inputs take the
// host ~20 s to draw).
int main(int argc, char** argv) {
  runShape(2, 8192);
  if (argc > 1 && std::string(argv[1]) == "all") runShape(1, 32768);
  return 0;
}
