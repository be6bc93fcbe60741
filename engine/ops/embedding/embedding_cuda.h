// Token embedding on the GPU (ops/embedding/embedding.h): a row gather from the bf16 compute copy
// of table[vocab, D] by int32 token ids, and its backward, a scatter-add of the output-gradient
// rows into the fp32 table gradient.
//
// Ids outside [0, vocab) (negative ids mark image-patch positions, Batch::kImagePosition) give a
// zero output row and receive no gradient; the CPU reference CHECKs ids >= vocab, the kernel
// cannot, so they are treated like negative ids.
// The backward uses fp32 atomicAdd per element, so the summation order of repeated tokens (and
// therefore the last bits of dTable) may differ between runs.
// Costs: O(N D) reads and writes each way; one block per token row, 16-byte accesses when D is a
// multiple of 8 and the pointers are 16-byte aligned. No host synchronisation.
#pragma once

#include <cstdint>

#include "runtime/cuda/cuda_context.h"
#include "runtime/cuda/elementwise.h"
#include "moewb/base/status.h"

namespace moewb::engine::cuda {

// out[n, :] = table[tokens[n], :] (zero row for ids outside [0, vocab)).
// tokens [n] int32, table [vocab, d] bf16, out [n, d] bf16. Errors: launch errors.
Status embeddingForwardCuda(cudaStream_t stream, const int32_t* tokens, int64_t n,
                            const bf16* table, int64_t vocab, int64_t d, bf16* out);

// dTable[v, :] += sum over n with tokens[n] == v of dOut[n, :] (fp32 atomics).
// tokens [n], dOut [n, d] bf16, dTable [vocab, d] fp32. Errors: launch errors.
Status embeddingBackwardCuda(cudaStream_t stream, const int32_t* tokens, int64_t n,
                             const bf16* dOut, int64_t vocab, int64_t d, float* dTable);

}  // namespace moewb::engine::cuda
