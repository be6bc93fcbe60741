// Grouped GLU experts on the GPU (ENGINE-MATH §5.8, §5.9), mirroring ops/experts/experts.h:
// expert e owns the permuted rows offsets[e] .. offsets[e+1]-1 (possibly none) and computes
//   g = x Wg_e^T,  u = x Wu_e^T,  h = a(g) ⊙ c(u),  y = h Wd_e^T
// with SwiGLU or SiTU-GLU (ops/experts/glu_activation.h, evaluated in fp32 on the device).
// Backward: dh = dy Wd_e, (dg, du) = GLU backward, dx = dg Wg_e + du Wu_e, and
// dWd_e += dy^T h, dWg_e += dg^T x, dWu_e += du^T x, ADDED into fp32 gradients (empty experts add
// nothing).
//
// Kernels: one bf16 tensor-core tile kernel per stage, each ONE launch for all experts, reading the
// group sizes from the device offsets (no host sync, no per-expert launch). Row-tile stages
// (forward, dh, dx) use a device tile schedule: a one-thread kernel turns offsets into
// tileStart[E + 1] (128-row tiles per expert, prefix-summed); the grid is (column tiles, row-tile
// slots) with the upper bound ceil(N k / 128) + E slots, every CTA binary-searches its (expert,
// row tile), CTAs past the last tile exit. Weight-gradient stages use a grid (column tile, row
// tile, expert rank) whose CTAs loop over their expert's rows (the K dimension) and exit at once
// for empty experts; a one-block kernel ranks the experts by row count (largest first, so a hot
// expert's long CTAs are dispatched first); each gradient element is owned by one CTA
// (deterministic read-add-write, no atomics).
// Stages: forward gate+up with the GLU in the epilogue (writes g, u, h), forward down (optionally
// times rowWeight); backward dh with the GLU backward in the epilogue (writes dg, du), dx (both
// products in one accumulator, K = 2F), three weight-gradient launches, and with the folded
// combine a pre-pass forming the weighted dYPerm and two launches for dRowWeight = <dy_token,
// yPerm_r>: h Wd^T recomputed per (row tile, 128-column tile) with the per-tile dot in the
// epilogue, then a fixed-order sum over the column tiles.
//
// Fusions (DeviceExpertsIo, as in the CPU ExpertsIo):
//  - gatherIndex: x is [N, D] and row r reads x[gatherIndex[r]] while the tile is loaded (each
//    thread's cp.async source is the gathered row; no xPerm). Bitwise equal to permute + unfused
//    experts.
//  - rowWeight + outputIndex: output row r is bf16(rowWeight[r] * acc) in the epilogue; the
//    backward forms dYPerm[r] = bf16(w_r dy[token(r)]) (the unfused combine's, bitwise) in a
//    workspace pre-pass, and returns dRowWeight [N k]. Equal to the unfused combine + experts up
//    to one bf16 rounding of the weighted output rows.
// Buffers are sized by the upper bound N k rows; rows >= R are never read or written.
// Tiles, when D % 8 == 0 and F % 8 == 0 (every pointer, gradients included, 16-byte aligned):
// mma.sync m16n8k16 with fp32 accumulators, 128 x 128 CTA tiles at two CTAs per SM (gate + up:
// 128 rows x 64 columns of g and of u, one A tile against a B tile of 64 gate over 64 up rows).
// Mainloop v2 (grouped_gemm_v2_cuda.cuh, the default): 4 warps of 64 x 64, K step 64, a 3-stage
// 16-byte cp.async pipeline into XOR-swizzled shared memory, ldmatrix (.trans for weights read
// [K, N] and for the weight gradients' operands), epilogues staged through shared memory with
// 16-byte stores. Mainloop v1 (grouped_gemm_cuda.cuh, round 1, selectable per stage by kVersion
// in experts_mma_cuda.cu): 8 warps of 64 x 32, K step 32, 4 stages, padded shared memory; same
// results bitwise except dRowWeight's reduction order (bench/scratch/grouped_gemm_01.md, round
// 2). On compute capability 9.0 the same stages run a wgmma mainloop instead (sm_90a object,
// grouped_gemm_wgmma_cuda.cuh; switch: experts_wgmma_cuda.h, MOEWB_GROUPED_WGMMA). Other D, F
// (or unaligned pointers) fall back to WMMA 64 x 64 tiles with scalar loads (experts_cuda.cu).
// Costs: 6 R D F flops forward, 12 R D F backward (+2 R D F with the folded combine, plus the
// R x D weighted dYPerm and a ceil(D / 128) x N k fp32 workspace).
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

// Writes `saved` again as expertsForwardCuda wrote it (bitwise: the same gate + up launch over
// the same inputs), allocating the tensors that are empty (dropped after the forward) and
// overwriting the kept ones with the same values; the down projection is not run. x, offsets,
// weights, activation and io must be the forward's. Errors: kInvalidArgument (shapes, a kept
// tensor of another shape), kResourceExhausted, kInternal.
Status expertsRecomputeCuda(CudaContext& context, const DeviceTensor<bf16>& x /*[N k or N, D]*/,
                            const DeviceTensor<int32_t>& offsets /*[E + 1]*/,
                            const DeviceExpertWeights& weights, DeviceExpertsSaved& saved,
                            const GluParams& activation = {}, const DeviceExpertsIo& io = {});

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
