// Token embedding on the GPU (ops/embedding/embedding.h): a row gather from the bf16 compute copy
// of table[vocab, D] by int32 token ids, and its backward, a scatter-add of the output-gradient
// rows into the fp32 table gradient.
//
// Ids outside [0, vocab) (negative ids mark image-patch positions, Batch::kImagePosition) give a
// zero output row and receive no gradient; the CPU reference CHECKs ids >= vocab, the kernel
// cannot, so they are treated like negative ids.
// The backward is deterministic: the rows are sorted by token id (a stable radix sort of N keys),
// then each token's rows are added in position order, as the CPU reference does, so dTable is
// bitwise the same run to run (an fp32 atomic per element made the order of repeated tokens, and
// the last bits, change between runs).
// Costs: O(N D) reads and writes each way; the forward one block per token row with 16-byte
// accesses when D is a multiple of 8 and the pointers are 16-byte aligned; the backward 16 N bytes
// of workspace and a sort of N int32 keys. No host synchronisation.
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

// dTable[v, :] += dOut[n, :] for each n with tokens[n] == v, in increasing n, in fp32, on
// context.stream(). tokens [n], dOut [n, d] bf16, dTable [vocab, d] fp32.
// Errors: kInvalidArgument (n or vocab not below 2^31 - 1), kResourceExhausted (workspace),
// launch errors.
Status embeddingBackwardCuda(CudaContext& context, const int32_t* tokens, int64_t n,
                             const bf16* dOut, int64_t vocab, int64_t d, float* dTable);

}  // namespace moewb::engine::cuda
