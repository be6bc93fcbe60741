// AttnRes (Attention Residuals, ENGINE-MATH §4.1/§4.3): a depth-wise softmax over source tensors
// that replaces the residual sum. Per token t, with sources v_i [N, D] (i < L, un-normalised),
// pseudo-query w[D] (zero-initialised) and key RMSNorm gain gamma[D]:
//   a   = w ⊙ gamma * scale,   r_i = (mean_j v_i[t, j]^2 + eps)^{-1/2},
//   z_i = r_i (v_i[t] . a),    p = softmax_i(z),   o[t] = sum_i p_i v_i[t].
// Backward (do = dL/do):
//   dp_i = do . v_i,  dz_i = p_i (dp_i - sum_j p_j dp_j),
//   dv_i += p_i do + dz_i (r_i a - (r_i^3 / D)(v_i . a) v_i),
//   da = sum_t sum_i dz_i r_i v_i,  dw += da ⊙ gamma * scale,  dgamma += da ⊙ w * scale.
// Zero w gives the mean of the sources; one source gives that source (and zero dw, dgamma).
// Any output RMSNorm (the next sublayer's pre-norm) is a separate rmsnorm op, not fused here.
// Block bookkeeping (which sources a sublayer sees) is attnres_state.h.
// Costs: O(L N D) each way; the backward recomputes r, z and p instead of saving them.
// Statistics and softmax in T (fp32 for float). Rows run in parallel; da is reduced over tokens in
// token order by column tiles, so results do not depend on the thread count.
#pragma once

#include <vector>

#include "runtime/thread_pool.h"
#include "runtime/tensor/tensor.h"

namespace moewb::engine {

struct AttnResOptions {
  double eps = 1e-6;   // key RMSNorm epsilon
  double scale = 1.0;  // multiplies the logits z before the softmax
};

// Returns o[N, D]. `sources` holds L >= 1 tensors [N, D] (none null); query and keyGain are [D].
template <typename T>
Tensor<T> attnResForward(ThreadPool& pool, const std::vector<const Tensor<T>*>& sources,
                         const Tensor<T>& query /*[D]*/, const Tensor<T>& keyGain /*[D]*/,
                         const AttnResOptions& options);

// Adds the gradients of o (given dOut[N, D]) into dSources[i] ([N, D] each, same count as
// `sources`; a null entry skips that source), dQuery[D] and dKeyGain[D]. Accumulates: callers
// zero them first when they want plain gradients.
template <typename T>
void attnResBackward(ThreadPool& pool, const std::vector<const Tensor<T>*>& sources,
                     const Tensor<T>& query /*[D]*/, const Tensor<T>& keyGain /*[D]*/,
                     const AttnResOptions& options, const Tensor<T>& dOut /*[N, D]*/,
                     const std::vector<Tensor<T>*>& dSources, Tensor<T>& dQuery /*[D]*/,
                     Tensor<T>& dKeyGain /*[D]*/);

}  // namespace moewb::engine
