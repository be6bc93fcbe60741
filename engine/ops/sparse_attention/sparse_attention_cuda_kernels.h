// Raw launchers of the sparse attention kernels (private to engine/ops/sparse_attention): the .cu
// files hold kernels and launchers on caller-provided buffers; the .cpp files allocate those
// buffers from the context (nvcc cannot compile the allocator's Result<DeviceTensor> path).
// Shapes and semantics as in sparse_attention_cuda.h; every launcher queues work on `stream`.
#pragma once

#include <cstddef>
#include <cstdint>

#include "ops/sparse_attention/sparse_attention_cuda.h"

namespace moewb::engine::cuda {

// kInvalidArgument when the indexer dims are outside the score kernel's limits.
Status checkIndexerDimsCuda(const IndexerDims& dims);

// Key LayerNorm of kPre [N, dI] (fp32) into kHat, rstd [N], k.
Status launchIndexerNormForward(cudaStream_t stream, const float* kPre, const bf16* gain,
                                const bf16* bias, int64_t n, int64_t di, double eps, float* kHat,
                                float* rstd, float* k);

// probs [N, W], per-row KL into rowKl [N] (scratch), their sum into klSum [1].
Status launchIndexerKl(cudaStream_t stream, const float* logits, const float* target,
                       const int32_t* selected, int64_t n, int64_t width, float* probs,
                       float* rowKl, float* klSum);

// Saved activations and scratch of the indexer backward.
struct IndexerBackwardBuffers {
  const float* q;     // [N, HI*dI] saved
  const float* k;     // [N, dI] saved
  const float* w;     // [N, HI] saved
  const float* kHat;  // [N, dI] saved
  const float* rstd;  // [N] saved
  float* coef;        // [N, HI, W] scratch
  bf16* dwPre;        // [N, HI] out: gradient of x Ww^T
  bf16* dq;           // [N, HI*dI] out: gradient of qI
  float* dk;          // [N, dI] scratch: gradient of kI
  bf16* dkPre;        // [N, dI] out: gradient of x WkI^T
};

// Everything of the indexer backward but the three weight GEMMs; adds into dGain, dBias [dI].
Status launchIndexerBackward(cudaStream_t stream, const IndexerDims& dims,
                             const IndexerBackwardBuffers& b, const int32_t* selected,
                             int64_t width, const int32_t* keyStart, const int32_t* entries,
                             const float* dLogits, const bf16* gain, float* dGain, float* dBias);

// Tests and benches only: 1 forces the tiled key-side backward (indexer_key_bwd_tiled.cuh) where
// its shape allows it, 0 the scalar indexer_key_bwd_kernel, -1 (the default) goes back to
// the default (on) or MOEWB_INDEXER_KEY_TILED (runtime/cuda/kernel_choice.h). Process-wide.
void setIndexerKeyBwdTiled(int mode);

// Scratch of the selection transpose (total = N W entries).
struct TransposeBuffers {
  uint32_t* keys;        // [total]
  uint32_t* sortedKeys;  // [total]
  int32_t* values;       // [total]
  void* temp;            // CUB temporary storage
  size_t tempBytes;      // its size (transposeSelectionTempBytes)
};

// CUB temporary bytes of the transpose of an [n, total / n] selection.
Status transposeSelectionTempBytes(int64_t n, int64_t total, size_t& bytes);

Status launchTransposeSelection(cudaStream_t stream, const int32_t* selected, int64_t n,
                                int64_t width, int64_t seqLen, const TransposeBuffers& b,
                                int32_t* keyStart, int32_t* entries);

// fp32 scratch of the core backward's key side (partial dk, dv per query span; 0 when the
// engine's key-side path needs none for these dims).
int64_t sparseKeyBwdPartialFloats(const SparseAttentionDims& dims);

// Core backward on caller scratch dz [N, H, W], sinkTerms [N, H] and keyPartials
// [sparseKeyBwdPartialFloats(dims)] (may be null when that is 0).
Status launchSparseCoreBackward(cudaStream_t stream, const SparseAttentionDims& dims,
                                const bf16* dContext, const SparseCoreSavedView& saved,
                                const int32_t* keyStart, const int32_t* entries, float* dz,
                                float* sinkTerms, float* keyPartials, bf16* dq, bf16* dk,
                                bf16* dv, float* dSink);

}  // namespace moewb::engine::cuda
