// AttnRes kernels (see attnres_cuda.h): one block per token for the forward, a few consecutive
// tokens per block for the backward, then a deterministic column sum of the da partials.
#include <cuda_runtime.h>

#include "runtime/cuda/cuda_check.h"
#include "moewb/base/check.h"
#include "ops/attnres/attnres_cuda_kernels.h"

namespace moewb::engine::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
constexpr int64_t kMaxChunks = 1024;  // bound on the backward's partial rows
constexpr int64_t kStaticSmemLimit = 48 * 1024;

// Sums K values over the block (blockDim.x == kThreads); every thread gets the totals, summed in
// the same order, so all threads hold identical values.
template <int K>
__device__ void blockSum(float (&values)[K], float (*scratch)[K]) {
  for (int k = 0; k < K; ++k) {
    for (int offset = 16; offset > 0; offset >>= 1)
      values[k] += __shfl_xor_sync(0xffffffffu, values[k], offset);
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();  // scratch may still be read by the previous call
  if (lane == 0) {
    for (int k = 0; k < K; ++k) scratch[warp][k] = values[k];
  }
  __syncthreads();
  for (int k = 0; k < K; ++k) {
    float total = 0.0f;
    for (int w = 0; w < kWarps; ++w) total += scratch[w][k];
    values[k] = total;
  }
}

__device__ float effectiveQuery(const bf16* query, const bf16* keyGain, float scale, int64_t j) {
  return __bfloat162float(query[j]) * __bfloat162float(keyGain[j]) * scale;
}

__device__ float loadGrad(const float* p) {
  return *p;
}
__device__ float loadGrad(const bf16* p) {
  return __bfloat162float(*p);
}
__device__ void storeGrad(float* p, float v) {
  *p = v;
}
__device__ void storeGrad(bf16* p, float v) {
  *p = __float2bfloat16(v);
}

// out[t] = sum_i softmax_i(z)_i v_i[t]; grid n blocks, dynamic shared memory d floats (the fp32
// accumulator; each thread owns columns threadIdx.x + k kThreads).
__global__ void __launch_bounds__(kThreads)
    attnres_fwd_kernel(AttnResSourceTable sources, int count, int64_t d,
                       const bf16* __restrict__ query, const bf16* __restrict__ keyGain, float eps,
                       float scale, bf16* __restrict__ out) {
  extern __shared__ float acc[];  // [d]
  __shared__ float scratch[kWarps][2];
  const int64_t t = blockIdx.x;
  for (int64_t j = threadIdx.x; j < d; j += kThreads) acc[j] = 0.0f;
  float maxZ = -INFINITY, sumExp = 0.0f;
  for (int i = 0; i < count; ++i) {
    const bf16* v = sources.ptr[i] + t * d;
    float sums[2] = {0.0f, 0.0f};  // sum v^2, v . a
    for (int64_t j = threadIdx.x; j < d; j += kThreads) {
      const float x = __bfloat162float(v[j]);
      sums[0] += x * x;
      sums[1] += x * effectiveQuery(query, keyGain, scale, j);
    }
    blockSum<2>(sums, scratch);
    const float r = 1.0f / sqrtf(sums[0] / float(d) + eps);
    const float z = r * sums[1];
    const float newMax = fmaxf(maxZ, z);
    const float rescale = expf(maxZ - newMax);  // 0 for the first source
    const float weight = expf(z - newMax);
    sumExp = sumExp * rescale + weight;
    maxZ = newMax;
    for (int64_t j = threadIdx.x; j < d; j += kThreads) {
      acc[j] = acc[j] * rescale + weight * __bfloat162float(v[j]);
    }
  }
  const float inv = 1.0f / sumExp;
  bf16* o = out + t * d;
  for (int64_t j = threadIdx.x; j < d; j += kThreads) o[j] = __float2bfloat16(acc[j] * inv);
}

// Tokens [blockIdx.x * tokensPerBlock, +tokensPerBlock) of the backward: dSources += dv and
// partial[blockIdx.x, :] = sum over the block's tokens of sum_i dz_i r_i v_i. Dynamic shared
// memory: d floats (the da partial, thread-owned columns).
template <typename G>
__global__ void __launch_bounds__(kThreads)
    attnres_bwd_kernel(AttnResSourceTable sources, AttnResGradTable<G> dSources, int count,
                       int64_t n, int64_t d, int64_t tokensPerBlock, const bf16* __restrict__ query,
                       const bf16* __restrict__ keyGain, float eps, float scale,
                       const bf16* __restrict__ dOut, float* __restrict__ partial) {
  extern __shared__ float da[];  // [d]
  __shared__ float scratch[kWarps][3];
  __shared__ float sR[kAttnResTableSize];    // r_i
  __shared__ float sDot[kAttnResTableSize];  // v_i . a
  __shared__ float sDp[kAttnResTableSize];   // do . v_i
  for (int64_t j = threadIdx.x; j < d; j += kThreads) da[j] = 0.0f;
  const int64_t tBegin = int64_t(blockIdx.x) * tokensPerBlock;
  const int64_t tEnd = tBegin + tokensPerBlock < n ? tBegin + tokensPerBlock : n;
  for (int64_t t = tBegin; t < tEnd; ++t) {
    const bf16* dy = dOut + t * d;
    for (int i = 0; i < count; ++i) {
      const bf16* v = sources.ptr[i] + t * d;
      float sums[3] = {0.0f, 0.0f, 0.0f};  // sum v^2, v . a, do . v
      for (int64_t j = threadIdx.x; j < d; j += kThreads) {
        const float x = __bfloat162float(v[j]);
        sums[0] += x * x;
        sums[1] += x * effectiveQuery(query, keyGain, scale, j);
        sums[2] += x * __bfloat162float(dy[j]);
      }
      blockSum<3>(sums, scratch);
      if (threadIdx.x == 0) {
        sR[i] = 1.0f / sqrtf(sums[0] / float(d) + eps);
        sDot[i] = sums[1];
        sDp[i] = sums[2];
      }
    }
    __syncthreads();
    // Softmax over the sources (every thread redundantly; count is small).
    float maxZ = -INFINITY;
    for (int i = 0; i < count; ++i) maxZ = fmaxf(maxZ, sR[i] * sDot[i]);
    float sumExp = 0.0f, weightedDp = 0.0f;
    for (int i = 0; i < count; ++i) {
      const float e = expf(sR[i] * sDot[i] - maxZ);
      sumExp += e;
      weightedDp += e * sDp[i];
    }
    const float inv = 1.0f / sumExp;
    const float meanDp = weightedDp * inv;  // sum_j p_j dp_j
    for (int i = 0; i < count; ++i) {
      const float p = expf(sR[i] * sDot[i] - maxZ) * inv;
      const float dz = p * (sDp[i] - meanDp);
      const float alongA = dz * sR[i];
      const float alongV = alongA * sR[i] * sR[i] / float(d) * sDot[i];
      const bf16* v = sources.ptr[i] + t * d;
      G* dv = dSources.ptr[i] == nullptr ? nullptr : dSources.ptr[i] + t * d;
      for (int64_t j = threadIdx.x; j < d; j += kThreads) {
        const float x = __bfloat162float(v[j]);
        da[j] += alongA * x;
        if (dv != nullptr) {
          const float a = effectiveQuery(query, keyGain, scale, j);
          storeGrad(dv + j,
                    loadGrad(dv + j) + p * __bfloat162float(dy[j]) + alongA * a - alongV * x);
        }
      }
    }
    __syncthreads();  // sR, sDot, sDp are rewritten by the next token
  }
  float* row = partial + int64_t(blockIdx.x) * d;
  for (int64_t j = threadIdx.x; j < d; j += kThreads) row[j] = da[j];
}

// dQuery[j] += da_j keyGain_j scale, dKeyGain[j] += da_j query_j scale with da_j the sum over
// chunks (in order) of partial[chunk, j].
__global__ void attnres_dquery_kernel(const float* __restrict__ partial, int64_t chunks, int64_t d,
                                      const bf16* __restrict__ query,
                                      const bf16* __restrict__ keyGain, float scale,
                                      float* __restrict__ dQuery, float* __restrict__ dKeyGain) {
  for (int64_t j = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; j < d;
       j += int64_t(gridDim.x) * blockDim.x) {
    float total = 0.0f;
    for (int64_t c = 0; c < chunks; ++c) total += partial[c * d + j];
    dQuery[j] += total * __bfloat162float(keyGain[j]) * scale;
    dKeyGain[j] += total * __bfloat162float(query[j]) * scale;
  }
}

template <typename Kernel>
Status allowSharedMemory(Kernel kernel, int64_t bytes) {
  if (bytes <= kStaticSmemLimit - 4 * 1024) return Status::ok();
  MOEWB_CUDA_RETURN_IF_ERROR(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
  return Status::ok();
}

int64_t tokensPerChunk(int64_t n) {
  int64_t chunks = n < kMaxChunks ? n : kMaxChunks;
  if (chunks < 1) chunks = 1;
  return (n + chunks - 1) / chunks;
}

}  // namespace

Status attnResForwardLaunch(cudaStream_t stream, const AttnResSourceTable& sources, int count,
                            int64_t n, int64_t d, const bf16* query, const bf16* keyGain, float eps,
                            float scale, bf16* out) {
  if (n <= 0 || d <= 0) return Status::ok();
  MOEWB_CHECK(n < (int64_t(1) << 31) && count >= 1 && count <= kAttnResTableSize);
  const int64_t smem = d * int64_t(sizeof(float));
  MOEWB_RETURN_IF_ERROR(allowSharedMemory(attnres_fwd_kernel, smem));
  attnres_fwd_kernel<<<unsigned(n), kThreads, size_t(smem), stream>>>(sources, count, d, query,
                                                                      keyGain, eps, scale, out);
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::ok();
}

int64_t attnResBackwardChunks(int64_t n) {
  if (n <= 0) return 0;
  const int64_t per = tokensPerChunk(n);
  return (n + per - 1) / per;
}

template <typename G>
Status attnResBackwardLaunch(cudaStream_t stream, const AttnResSourceTable& sources,
                             const AttnResGradTable<G>& dSources, int count, int64_t n, int64_t d,
                             const bf16* query, const bf16* keyGain, float eps, float scale,
                             const bf16* dOut, float* partial, float* dQuery, float* dKeyGain) {
  if (n <= 0 || d <= 0) return Status::ok();
  MOEWB_CHECK(count >= 1 && count <= kAttnResTableSize);
  const int64_t per = tokensPerChunk(n);
  const int64_t chunks = attnResBackwardChunks(n);
  const int64_t smem = d * int64_t(sizeof(float));
  MOEWB_RETURN_IF_ERROR(allowSharedMemory(attnres_bwd_kernel<G>, smem));
  attnres_bwd_kernel<G><<<unsigned(chunks), kThreads, size_t(smem), stream>>>(
      sources, dSources, count, n, d, per, query, keyGain, eps, scale, dOut, partial);
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  attnres_dquery_kernel<<<gridFor(d), 256, 0, stream>>>(partial, chunks, d, query, keyGain, scale,
                                                        dQuery, dKeyGain);
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::ok();
}

template Status attnResBackwardLaunch<float>(cudaStream_t, const AttnResSourceTable&,
                                             const AttnResGradTable<float>&, int, int64_t, int64_t,
                                             const bf16*, const bf16*, float, float, const bf16*,
                                             float*, float*, float*);
template Status attnResBackwardLaunch<bf16>(cudaStream_t, const AttnResSourceTable&,
                                            const AttnResGradTable<bf16>&, int, int64_t, int64_t,
                                            const bf16*, const bf16*, float, float, const bf16*,
                                            float*, float*, float*);

}  // namespace moewb::engine::cuda
