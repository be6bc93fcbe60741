// The chunked KDA core on the GPU (ENGINE-MATH §2.3 / §2.5; see kda_cuda.h for the kernel plan,
// limits and costs): the Status launchers of kda_cuda_kernels.h around the kernels (workspace
// layouts in kda_chunk_kernels.cuh). Which kernel runs:
//   intra-chunk forward   where kdaIntraR5Supported: round 8 (intraRound8(), on by default,
//                         MOEWB_KDA_INTRA_R8,
//                         setKdaIntraRound8; bench/scratch/kda_chunk_08: tensor-core diagonal
//                         blocks, M by blocks, other bits), else round 5 (kda_intra_r5.cuh;
//                         intraRound5(), on by default, MOEWB_KDA_INTRA_R5, setKdaIntraRound5;
//                         bench/scratch/kda_chunk_05), else round 2 (kda_intra_mma.cuh, round
//                         5's bits) where kdaIntraMmaSupported (chunk and keyDim multiples of
//                         16, valueDim of 8), else the fp32 kda_intra_fwd_kernel
//                         (kda_chunk_kernels.cuh).
//   recurrences           round 3 on tensor cores (kda_recurrent_r3.cuh), every shape.
//   backward products     round 3 (kda_products_r3.cuh), every shape.
//   per-chunk backward    kda_bwd_chunk.cuh's kernel where kdaBwdChunkSupported: round 6
//                         (bwdChunkRound6(), on by default; MOEWB_KDA_BWD_R6, setKdaBwdChunkRound6:
//                         the pairwise sums' diagonal blocks on tensor cores, other bits than
//                         round 5's, bench/scratch/kda_chunk_07), else round 5 (bwdChunkRound5(),
//                         on by default; MOEWB_KDA_BWD_R5, setKdaBwdChunkRound5: round 2's bits,
//                         bench/scratch/kda_chunk_06); else round 2 (kda_bwd_mma.cuh) where
//                         kdaBwdMmaSupported, else the fp32 kda_bwd_kernel.
#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/kernel_choice.h"
#include "ops/kda/kda_bwd_chunk.cuh"
#include "ops/kda/kda_bwd_mma.cuh"
#include "ops/kda/kda_chunk_kernels.cuh"
#include "ops/kda/kda_intra_mma.cuh"
#include "ops/kda/kda_intra_r5.cuh"
#include "ops/kda/kda_products_r3.cuh"
#include "ops/kda/kda_recurrent_r3.cuh"
#include "ops/kda/kda_cuda.h"
#include "ops/kda/kda_cuda_kernels.h"

namespace moewb::engine::cuda {
namespace {

// Round 5 of the intra-chunk forward (bench/scratch/kda_chunk_05.md): on since its H200 check
// (B2 T8192: 2.42 -> 1.71 ms, the recompute 1.40 -> 0.55 ms; every output bitwise round 2's).
KernelChoice& intraRound5() {
  static KernelChoice choice("MOEWB_KDA_INTRA_R5", true);
  return choice;
}

// Round 8 of the intra-chunk forward (bench/scratch/kda_chunk_08.md): the diagonal blocks on
// tensor cores and M by blocks on tensor cores; on since its H200 check (B2 T8192 1.71 -> 0.90
// ms with the model's gate range; Aqk / M within 2e-5 of fp64, round 5's bits elsewhere).
KernelChoice& intraRound8() {
  static KernelChoice choice("MOEWB_KDA_INTRA_R8", true);
  return choice;
}

// Round 5 of the per-chunk backward (bench/scratch/kda_chunk_06.md): on since its H200 check
// (B2 T8192 3.87 -> 3.77 ms against round 4, which gave round 2's bits as round 5 does); off
// runs round 2 (kda_bwd_mma.cuh) when round 6 is off too.
KernelChoice& bwdChunkRound5() {
  static KernelChoice choice("MOEWB_KDA_BWD_R5", true);
  return choice;
}

// Round 6 of the per-chunk backward (bench/scratch/kda_chunk_07.md): on since its H200 check
// (B2 T8192 3.79 -> 2.78 ms, B1 T32768 7.47 -> 5.49 ms; errors against fp64 as round 5's but dg,
// within max(4x round 5's, 3e-5)).
KernelChoice& bwdChunkRound6() {
  static KernelChoice choice("MOEWB_KDA_BWD_R6", true);
  return choice;
}

kda_detail::CoreArgs coreArgs(const KdaCoreDims& dims) {
  return {dims.batch,  dims.seqLen,   dims.numHeads, dims.valueHeads(),
          dims.keyDim, dims.valueDim, dims.chunk,    dims.numChunks()};
}

kda_detail::IntraBwdArgs intraBwdArgs(const KdaChunkBackwardArgs& in) {
  return {in.q,     in.k,     in.v,      in.dO,    in.g,      in.beta,   in.savedM,
          in.states, in.dStates, in.vn,  in.dvn,   in.dqAcc,  in.dkAcc,  in.dGWork,
          in.dv,    in.dg,    in.dbeta,  in.p0,    in.p1,     in.p2,     in.p3,
          in.p4,    in.sds};
}

}  // namespace

Status launchKdaIntraForward(cudaStream_t stream, const KdaCoreDims& dims, const bf16* q,
                             const bf16* k, const bf16* v, const float* g, const float* beta,
                             bool computeM, float* savedAqk, float* savedM,
                             const KdaWyWorkspace& work) {
  const kda_detail::CoreArgs args = coreArgs(dims);
  const bool mma = kda_detail::kdaIntraMmaSupported(args);
  const bool r5Shape = mma && kda_detail::kdaIntraR5Supported(args);
  const auto launch = !mma                                   ? kda_detail::launchIntraForward
                      : r5Shape && intraRound8().newer()     ? kda_detail::launchIntraForwardR8
                      : r5Shape && intraRound5().newer()     ? kda_detail::launchIntraForwardR5
                                                             : kda_detail::launchIntraForwardMma;
  MOEWB_CUDA_RETURN_IF_ERROR(launch(stream, args, q, k, v, g, beta, computeM, savedAqk, savedM,
                                    work.w, work.u, work.qg, work.kDec, work.eGC));
  return Status::ok();
}

void setKdaIntraRound5(int mode) {
  intraRound5().force(mode);
}

void setKdaIntraRound8(int mode) {
  intraRound8().force(mode);
}

void setKdaBwdChunkRound5(int mode) {
  bwdChunkRound5().force(mode);
}

void setKdaBwdChunkRound6(int mode) {
  bwdChunkRound6().force(mode);
}

Status launchKdaRecurrentForward(cudaStream_t stream, const KdaCoreDims& dims,
                                 const KdaWyWorkspace& work, const float* aqk,
                                 const float* initialState, float* statesOut, float* vnOut,
                                 bf16* o, float* finalState) {
  const kda_detail::CoreArgs args = coreArgs(dims);
  MOEWB_CUDA_RETURN_IF_ERROR(kda_detail::launchRecurrentForwardR3(
      stream, args, work.w, work.u, work.qg, work.kDec, work.eGC, aqk, initialState, statesOut,
      vnOut, o, finalState));
  return Status::ok();
}

Status launchKdaStateBackward(cudaStream_t stream, const KdaCoreDims& dims,
                              const KdaWyWorkspace& work, const float* aqk, const bf16* dO,
                              const float* dFinalState, float* dStatesOut, float* dvnOut,
                              float* dInitialState) {
  const kda_detail::CoreArgs args = coreArgs(dims);
  MOEWB_CUDA_RETURN_IF_ERROR(kda_detail::launchStateBackwardR3(
      stream, args, dO, dFinalState, work.w, work.qg, work.kDec, work.eGC, aqk, dStatesOut, dvnOut,
      dInitialState));
  return Status::ok();
}

Status launchKdaChunkBackward(cudaStream_t stream, const KdaCoreDims& dims,
                              const KdaChunkBackwardArgs& in) {
  const kda_detail::CoreArgs args = coreArgs(dims);
  const kda_detail::IntraBwdArgs p = intraBwdArgs(in);
  MOEWB_CUDA_RETURN_IF_ERROR(kda_detail::launchBackwardProductsR3(stream, args, p));
  const bool round6 = bwdChunkRound6().newer();
  if ((round6 || bwdChunkRound5().newer()) && kda_detail::kdaBwdChunkSupported(args)) {
    MOEWB_CUDA_RETURN_IF_ERROR(kda_detail::launchChunkBackwardSplit(stream, args, p, round6));
    return Status::ok();
  }
  const auto launch = kda_detail::kdaBwdMmaSupported(args) ? kda_detail::launchChunkBackwardMma
                                                           : kda_detail::launchChunkBackward;
  MOEWB_CUDA_RETURN_IF_ERROR(launch(stream, args, p));
  return Status::ok();
}

}  // namespace moewb::engine::cuda
