// Grouped GLU experts on the GPU (ENGINE-MATH §5.8, §5.9), mirroring ops/experts/experts.h:
// expert e owns the permuted rows offsets[e] .. offsets[e+1]-1 (possibly none) and computes
//   g = x Wg_e^T,  u = x Wu_e^T,  h = a(g) ⊙ c(u),  y = h Wd_e^T
// with SwiGLU or SiTU-GLU (ops/experts/glu_activation.h, evaluated in fp32 on the device).
// Backward: dh = dy Wd_e, (dg, du) = GLU backward, dx = dg Wg_e + du Wu_e, and
// dWd_e += dy^T h, dWg_e += dg^T x, dWu_e += du^T x, ADDED into fp32 gradients (empty experts add
// nothing).
//
// Kernels: one bf16 tensor-core (WMMA 16x16x16, fp32 accumulators) tile kernel per stage, each ONE
// launch for all experts, reading the group sizes from the device offsets (no host sync, no
// per-expert launch). Row-tile stages (forward, dh, dx) use a device tile schedule: a one-thread
// kernel turns offsets into tileStart[E + 1] (64-row tiles per expert, prefix-summed); the grid is
// sized by the upper bound ceil(N k / 64) + E tiles and every CTA binary-searches its (expert,
// row tile), CTAs past the last tile exit. Weight-gradient stages use a grid (column tile, row
// tile, expert) whose CTAs loop over their expert's rows and exit at once for empty experts; each
// gradient element is owned by one CTA (deterministic read-add-write, no atomics).
// Stages: forward gate+up with the GLU in the epilogue (writes g, u, h), forward down (optionally
// times rowWeight); backward dh with the GLU backward in the epilogue (writes dg, du), dx (both
// products in one accumulator), three weight-gradient launches, and with the folded combine one
// more launch that recomputes h Wd^T per row tile and forms dRowWeight = <dy_token, yPerm_r>
// (each CTA sweeps all D columns, so the dot is accumulated in a fixed order).
//
// Fusions (DeviceExpertsIo, as in the CPU ExpertsIo):
//  - gatherIndex: x is [N, D] and row r reads x[gatherIndex[r]] while the tile is loaded (no
//    xPerm). Bitwise equal to permute + unfused experts.
//  - rowWeight + outputIndex: output row r is bf16(rowWeight[r] * acc) in the epilogue; the
//    backward reads dy [N, D] through outputIndex and forms bf16(w_r dy) (the unfused combine's
//    dYPerm, bitwise) while loading tiles, and returns dRowWeight [N k]. Equal to the unfused
//    combine + experts up to one bf16 rounding of the weighted output rows.
// Buffers are sized by the upper bound N k rows; rows >= R are never read or written.
// Tiles: 64 x 64 outputs per CTA, K step 32, 4 warps of 32 x 32; operand tiles are loaded with
// scalar bf16 loads (a cp.async / TMA pipeline is the next step for speed).
// Costs: 6 R D F flops forward, 12 R D F backward (+2 R D F with the folded combine).
#pragma once

#include <cstdint>

#include "runtime/cuda/cuda_context.h"
#include "runtime/cuda/device_tensor.h"
#include "runtime/cuda/elementwise.h"
#include "ops/experts/glu_activation.h"

namespace moewb::engine::cuda {

struct DeviceExpertWeights {
  const DeviceTensor<bf16>& gate;  // [E, F, D] bf16 compute copy
  const DeviceTensor<bf16>& up;    // [E, F, D]
  const DeviceTensor<bf16>& down;  // [E, D, F]
};

struct DeviceExpertGrads {
  DeviceTensor<float>& gate;  // [E, F, D] fp32, accumulated
  DeviceTensor<float>& up;    // [E, F, D]
  DeviceTensor<float>& down;  // [E, D, F]
};

struct DeviceExpertsSaved {
  DeviceTensor<bf16> gatePre;  // [N k, F] g (rows < R defined)
  DeviceTensor<bf16> upPre;    // [N k, F] u
  DeviceTensor<bf16> hidden;   // [N k, F] h = a(g) * c(u)
};

struct DeviceExpertsIo {
  const DeviceTensor<int32_t>* gatherIndex = nullptr;  // [N k] x row read by row r, or null
  const DeviceTensor<float>* rowWeight = nullptr;      // [N k] weight of output row r, or null
  const DeviceTensor<int32_t>* outputIndex = nullptr;  // [N k] token of row r (with rowWeight)
};

// Returns yPerm [N k, D] (rows < R; times rowWeight when set) and fills `saved` (kActivations).
// x is [N k, D] permuted rows, or [N, D] with io.gatherIndex ([N k]); the row upper bound N k is
// x.dim(0), resp. gatherIndex.numel(). offsets is the plan's [E + 1] (device; R = offsets[E]).
// Errors: kInvalidArgument (shapes), kResourceExhausted, kInternal.
Result<DeviceTensor<bf16>> expertsForwardCuda(
    CudaContext& context, const DeviceTensor<bf16>& x /*[N k or N, D]*/,
    const DeviceTensor<int32_t>& offsets /*[E + 1]*/, const DeviceExpertWeights& weights,
    DeviceExpertsSaved& saved, const GluParams& activation = {}, const DeviceExpertsIo& io = {});

// Returns dXPerm [N k, D] (per permuted row; permuteBackwardCuda sums it per token) and adds the
// weight gradients into `grads`. dY is dYPerm [N k, D]; with io.rowWeight it is the token
// gradient [N, D] read through io.outputIndex, and dRowWeight ([N k] fp32, required then; rows
// < R written) receives each row weight's gradient.
Result<DeviceTensor<bf16>> expertsBackwardCuda(
    CudaContext& context, const DeviceTensor<bf16>& dY /*[N k or N, D]*/,
    const DeviceTensor<bf16>& x /*[N k or N, D]*/, const DeviceTensor<int32_t>& offsets,
    const DeviceExpertWeights& weights, const DeviceExpertsSaved& saved,
    const DeviceExpertGrads& grads, const GluParams& activation = {},
    const DeviceExpertsIo& io = {}, DeviceTensor<float>* dRowWeight = nullptr /*[N k]*/);

}  // namespace moewb::engine::cuda
