// AttnResStateCuda: the device twin of AttnResState<T> (attnres_state.h; read its file comment
// for the block rule and the call order): the Block AttnRes bookkeeping of one forward/backward
// pass of the CUDA model, with the same operations in the same order, running attnres_cuda.h.
//
// Differences from the CPU state:
// - Every call takes the CudaContext (instead of the thread pool) and returns Status / Result
//   (out of memory, launch errors). A call out of order is a bug and aborts (MOEWB_CHECK), as on
//   the CPU. After an error the pass is lost: call begin() again.
// - Values are bf16 [N, D] (the embedding, the sublayer outputs, the block sums and prefixes; the
//   prefix sum prefix + out is one bf16 add, like the plain residual stream). The gradient buffers
//   of the blocks and the prefix are fp32 [N, D], because a block receives gradient from every
//   later AttnRes call; backwardSublayerOutput and takeEmbeddingGrad hand out bf16 copies.
// - Query and key gain are the parameters' bf16 compute copies [D]; their gradients are the fp32
//   [D] gradients, added into.
//
// Use in the CUDA model (st held by the model, options {normEps, 1.0}):
//   forward:  st.begin(embedded);
//             per layer: x1 = st.mixBeforeSublayer(ctx, wAttn.compute, gAttn.compute);
//                        st.addSublayerOutput(ctx, mixerOut(rmsnorm(x1)));
//                        x2 = st.mixBeforeSublayer(ctx, wMoe.compute, gMoe.compute);
//                        st.addSublayerOutput(ctx, moeOut(rmsnorm(x2)));
//             xTop = st.mixFinal(ctx, wTop.compute, gTop.compute);
//   backward: st.backwardFinal(ctx, dxTop, wTop.compute, gTop.compute, wTop.grad, gTop.grad);
//             per layer, last first: dm = st.backwardSublayerOutput(ctx); dx2 = ...(dm);
//                        st.backwardMixBeforeSublayer(ctx, dx2, wMoe..., gMoe...);
//                        da = st.backwardSublayerOutput(ctx); dx1 = ...(da);
//                        st.backwardMixBeforeSublayer(ctx, dx1, wAttn..., gAttn...);
//             dEmb = st.takeEmbeddingGrad(ctx);
// Memory (category kActivations): as the CPU state, plus fp32 gradient buffers (one per
// completed block and one for the prefix) during the backward.
// Costs: the AttnRes op per call, one bf16 add per non-boundary output, one fp32 -> bf16 cast per
// backwardSublayerOutput. Nothing synchronises with the host. Not thread-safe.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/cuda/cuda_context.h"
#include "runtime/cuda/elementwise.h"
#include "moewb/base/status.h"
#include "ops/attnres/attnres.h"

namespace moewb::engine::cuda {

class AttnResStateCuda {
 public:
  // blockSize: sublayers per block (>= 1, checked).
  AttnResStateCuda(int64_t blockSize, const AttnResOptions& options);

  // True when sublayer s closes the previous block (s % blockSize == 0).
  static bool isBoundary(int64_t sublayer, int64_t blockSize) { return sublayer % blockSize == 0; }

  // Starts a forward pass from the embedding output [N, D]; drops any earlier pass.
  void begin(DeviceTensor<bf16> embedding);
  // The input x_s [N, D] of the next sublayer (before its pre-norm). Errors: out of memory,
  // launch errors, more than kAttnResMaxSources sources.
  Result<DeviceTensor<bf16>> mixBeforeSublayer(CudaContext& context,
                                               const DeviceTensor<bf16>& query /*[D]*/,
                                               const DeviceTensor<bf16>& keyGain /*[D]*/);
  // Adds the output [N, D] of the sublayer whose input mixBeforeSublayer just returned (taken
  // over: it becomes, or is summed into, the prefix).
  Status addSublayerOutput(CudaContext& context, DeviceTensor<bf16> output);
  // The input [N, D] of the final norm; ends the forward.
  Result<DeviceTensor<bf16>> mixFinal(CudaContext& context, const DeviceTensor<bf16>& query,
                                      const DeviceTensor<bf16>& keyGain);

  // Backward of mixFinal given dL/dx_top [N, D] bf16; adds into dQuery[D], dKeyGain[D] (fp32).
  Status backwardFinal(CudaContext& context, const DeviceTensor<bf16>& dMixed,
                       const DeviceTensor<bf16>& query, const DeviceTensor<bf16>& keyGain,
                       DeviceTensor<float>& dQuery, DeviceTensor<float>& dKeyGain);
  // dL/d(out_s) [N, D] (bf16) for the last sublayer not yet reversed (complete).
  Result<DeviceTensor<bf16>> backwardSublayerOutput(CudaContext& context);
  // Backward of that sublayer's mixBeforeSublayer given dL/dx_s [N, D]; adds into dQuery,
  // dKeyGain and the source gradients.
  Status backwardMixBeforeSublayer(CudaContext& context, const DeviceTensor<bf16>& dMixed,
                                   const DeviceTensor<bf16>& query,
                                   const DeviceTensor<bf16>& keyGain, DeviceTensor<float>& dQuery,
                                   DeviceTensor<float>& dKeyGain);
  // dL/d(embedding) [N, D] (bf16) once every sublayer is reversed; ends the pass.
  Result<DeviceTensor<bf16>> takeEmbeddingGrad(CudaContext& context);

  int64_t blockSize() const { return m_blockSize; }
  // Sublayers mixed so far in this forward (or not yet reversed, in the backward).
  int64_t sublayers() const { return int64_t(m_calls.size()); }
  // Completed block sums currently held.
  int64_t completedBlocks() const { return int64_t(m_blocks.size()); }
  // Device bytes of the activations the state holds (blocks, prefixes, gradient buffers).
  int64_t heldBytes() const;

 private:
  enum class Stage { kIdle, kMix, kOutput, kForwardDone, kBackOutput, kBackMix, kBackDone };
  struct Call {
    int64_t blocksBefore = 0;  // completed blocks before the call
    bool boundary = false;     // the prefix became block blocksBefore at this call
  };

  std::vector<const bf16*> sourcesOf(size_t call) const;
  void expectStage(Stage stage) const;
  Result<DeviceTensor<bf16>> mix(CudaContext& context, const std::vector<const bf16*>& sources,
                                 const DeviceTensor<bf16>& query,
                                 const DeviceTensor<bf16>& keyGain) const;
  Result<DeviceTensor<bf16>> toBf16(CudaContext& context, const DeviceTensor<float>& grad) const;

  int64_t m_blockSize;
  AttnResOptions m_options;
  Stage m_stage = Stage::kIdle;
  int64_t m_rows = 0;   // N
  int64_t m_width = 0;  // D
  std::vector<Call> m_calls;
  std::vector<DeviceTensor<bf16>> m_blocks;     // completed block sums, [N, D] each
  std::vector<DeviceTensor<bf16>> m_snapshots;  // per call: its prefix source (empty at boundaries)
  DeviceTensor<bf16> m_prefix;                  // [N, D] partial sum of the open block (forward)
  DeviceTensor<bf16> m_finalPrefix;             // [N, D] the prefix mixFinal saw
  std::vector<DeviceTensor<float>> m_dBlocks;   // [N, D] fp32 gradient per completed block
  DeviceTensor<float> m_dPrefix;                // [N, D] fp32 gradient of the current prefix
};

}  // namespace moewb::engine::cuda
