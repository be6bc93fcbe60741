// AttnRes (ENGINE-MATH §4.1/§4.3, CPU reference ops/attnres/attnres.h) on the GPU: per token t a
// softmax over L source rows v_i[t] (bf16 [N, D] each) with logits z_i = r_i (v_i[t] . a),
// a = query ⊙ keyGain * scale, r_i = (mean_j v_i[t, j]^2 + eps)^{-1/2}, and o[t] = sum_i p_i
// v_i[t].
//
// Forward: one block per token; each source row is read once, the softmax is online
// (m' = max(m, z), l' = l e^{m - m'} + e^{z - m'}) and the output is accumulated in fp32.
// Backward: a block handles a few consecutive tokens; per token a first pass over the sources
// recomputes r_i, v_i . a and dp_i = do . v_i (one read of each row: the statistics are not saved
// because this pass is needed for dp anyway), then a second pass adds dv_i and the token's share of
// da = sum_t sum_i dz_i r_i v_i into a per-block fp32 partial; a second kernel sums the partials
// in block order and adds dQuery = da ⊙ keyGain * scale, dKeyGain = da ⊙ query * scale.
// Every statistic, reduction and softmax is fp32; results are bitwise reproducible for a given N.
// Costs: forward reads L N D bf16 once; backward reads them twice plus dOut, and read-modify-writes
// the source gradients. At most kAttnResMaxSources sources (pointer tables are kernel arguments,
// so no host-to-device copy and no synchronisation). D up to 50000 (fp32 row in shared memory).
// Queues on the context's stream; no host synchronisation.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/cuda/cuda_context.h"
#include "runtime/cuda/elementwise.h"
#include "moewb/base/status.h"
#include "ops/attnres/attnres.h"

namespace moewb::engine::cuda {

inline constexpr int64_t kAttnResMaxSources = 256;

// out[N, D] = AttnRes(sources, query, keyGain) (overwritten). `sources` holds 1..kAttnResMaxSources
// device pointers to bf16 [n, d] rows (none null; out must not alias one); query, keyGain: bf16
// [d] compute copies. n == 0 is a no-op. Errors: kInvalidArgument (source count, d too large, null
// pointer), kInternal (launch).
Status attnResForwardCuda(CudaContext& context, const std::vector<const bf16*>& sources, int64_t n,
                          int64_t d, const bf16* query /*[D]*/, const bf16* keyGain /*[D]*/,
                          const AttnResOptions& options, bf16* out /*[N, D]*/);

// Adds the gradients of o (dOut [n, d] bf16) into dSources[i] ([n, d] each, same count as
// sources; a null entry skips that source; no two entries alias), dQuery [d] and dKeyGain [d]
// (fp32). fp32 dSources are accumulation buffers (what AttnResStateCuda uses: a block receives
// gradient from many later calls); bf16 ones are read, added to in fp32 and rounded once.
// Errors: as attnResForwardCuda, plus kResourceExhausted (partial-sum workspace).
Status attnResBackwardCuda(CudaContext& context, const std::vector<const bf16*>& sources, int64_t n,
                           int64_t d, const bf16* query, const bf16* keyGain,
                           const AttnResOptions& options, const bf16* dOut /*[N, D]*/,
                           const std::vector<float*>& dSources, float* dQuery /*[D]*/,
                           float* dKeyGain /*[D]*/);
Status attnResBackwardCuda(CudaContext& context, const std::vector<const bf16*>& sources, int64_t n,
                           int64_t d, const bf16* query, const bf16* keyGain,
                           const AttnResOptions& options, const bf16* dOut /*[N, D]*/,
                           const std::vector<bf16*>& dSources, float* dQuery /*[D]*/,
                           float* dKeyGain /*[D]*/);

}  // namespace moewb::engine::cuda
