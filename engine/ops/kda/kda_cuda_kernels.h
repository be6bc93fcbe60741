// Internal to the KDA CUDA op: the kernel launchers of kda_chunk_cuda.cu, kda_gate_cuda.cu and
// kda_layer_cuda.cu on raw device pointers (allocation lives in the .cpp files, host code, since
// DeviceTensor<T>::create does not compile under nvcc). Workspace layouts of the core are
// described at the top of kda_chunk_cuda.cu. Each launcher queues its kernels on `stream` and
// returns the launch error.
#pragma once

#include <cstdint>

#include "runtime/cuda/elementwise.h"
#include "moewb/base/status.h"
#include "ops/kda/kda.h"
#include "ops/kda/kda_gate.h"

namespace moewb::engine::cuda {

// fp32 workspaces written by the intra-chunk forward kernel (R = B*HV*NC*C padded rows).
struct KdaWyWorkspace {
  float* w = nullptr;     // [R, K] W = M Diag(beta) (k ⊙ e^G)
  float* u = nullptr;     // [R, V] U = M Diag(beta) v
  float* qg = nullptr;    // [R, K] q ⊙ e^G
  float* kDec = nullptr;  // [R, K] k ⊙ e^{G_C - G}
  float* eGC = nullptr;   // [B*HV*NC, K] e^{G_C}
};

// Inputs, workspaces and outputs of the per-chunk backward (kda_bwd_products_r3_kernel, then
// kda_bwd_kernel; same field order as kda_detail::IntraBwdArgs in kda_chunk_kernels.cuh).
struct KdaChunkBackwardArgs {
  const bf16 *q, *k, *v, *dO;                 // as in kdaChunkBackwardCuda
  const float *g, *beta, *savedM;             // savedM [B*HV, NC*C, C]
  const float *states, *dStates;              // [B*HV*NC, K, V] entry states, dS leaving chunks
  const float *vn, *dvn;                      // [R, V]
  float *dqAcc, *dkAcc;                       // [N, H*K] fp32, zeroed, added into atomically
  float* dGWork;                              // [R, K] scratch
  bf16* dv;                                   // [N, HV*V]
  float *dg, *dbeta;                          // [N, HV*K], [N, HV]
  float *p0, *p1, *p2;                        // [R, K] scratch: dO S^T, Vn dS^T, dVn S^T
  float *p3, *p4;                             // [R, C] scratch: dO Vn^T, dVn v^T
  float* sds;                                 // [B*HV*NC, K] scratch: rowsum(S ⊙ dS)
};

// Per (chunk, b, hv): with computeM the decayed Aqk and M = (I + L)^{-1} into savedAqk / savedM,
// else M read from savedM (savedAqk unused); then the workspace.
Status launchKdaIntraForward(cudaStream_t stream, const KdaCoreDims& dims, const bf16* q,
                             const bf16* k, const bf16* v, const float* g, const float* beta,
                             bool computeM, float* savedAqk, float* savedM,
                             const KdaWyWorkspace& work);

// Tests and benchmarks: which intra-chunk forward launchKdaIntraForward runs where the shape
// allows round 5 (kda_intra_r5.cuh). mode 1 forces round 5, 0 forces round 2, -1 (the start
// state) follows intraRound5()'s default (on) in kda_chunk_cuda.cu unless the environment variable
// MOEWB_KDA_INTRA_R5 is set ("1": round 5, any other value: round 2; read once per process).
// Process-wide; safe to call from any thread, takes effect at the next launch.
void setKdaIntraRound5(int mode);

// Tests and benchmarks: round 8 of the intra-chunk forward (kda_intra_r5.cuh's kernel with the
// diagonal blocks on tensor cores and M solved by blocks; other bits than round 5's), checked
// before round 5 where the shape allows round 5. mode 1 forces round 8, 0 forces the round-5
// choice above, -1 (the start state) follows intraRound8()'s default (on) in kda_chunk_cuda.cu
// unless the environment variable MOEWB_KDA_INTRA_R8 is set ("1": round 8, any other value: not;
// read once per process). Process-wide; safe to call from any thread, takes effect at the next launch.
void setKdaIntraRound8(int mode);

// Tests and benchmarks: which per-chunk backward launchKdaChunkBackward runs where the shape
// allows round 5 (kda_bwd_chunk.cuh, kdaBwdChunkSupported) and round 6 is off. mode 1 forces
// round 5, 0 forces round 2 (kda_bwd_mma.cuh; the same bits as round 5), -1 (the start state)
// follows bwdChunkRound5()'s default (on) in kda_chunk_cuda.cu unless the environment variable
// MOEWB_KDA_BWD_R5 is set ("1": round 5, any other value: round 2; read once per process).
// Process-wide; safe to call from any thread, takes effect at the next launch.
void setKdaBwdChunkRound5(int mode);

// Tests and benchmarks: whether launchKdaChunkBackward runs round 6 of the per-chunk backward
// (kda_bwd_chunk.cuh with the diagonal blocks on tensor cores) where the shape allows, checked
// before round 5. mode 1 forces round 6, 0 forces the round-5 choice above, -1 (the start state)
// follows bwdChunkRound6()'s default (on) in kda_chunk_cuda.cu unless the environment variable
// MOEWB_KDA_BWD_R6 is set ("1": round 6, any other value: not; read once per process).
// Process-wide; safe to call from any thread, takes effect at the next launch.
void setKdaBwdChunkRound6(int mode);

// Per (b, hv, value tile): the chunk recurrence. Each output may be null: statesOut
// [B*HV*NC, K, V] (entry states), vnOut [R, V], o [N, HV*V], finalState [B, HV, K, V].
Status launchKdaRecurrentForward(cudaStream_t stream, const KdaCoreDims& dims,
                                 const KdaWyWorkspace& work, const float* aqk,
                                 const float* initialState, float* statesOut, float* vnOut,
                                 bf16* o, float* finalState);

// Per (b, hv, value tile): the reverse state-gradient recurrence; writes dStatesOut (dS leaving
// each chunk), dvnOut [R, V] and dInitialState (may be null).
Status launchKdaStateBackward(cudaStream_t stream, const KdaCoreDims& dims,
                              const KdaWyWorkspace& work, const float* aqk, const bf16* dO,
                              const float* dFinalState, float* dStatesOut, float* dvnOut,
                              float* dInitialState);

// Per (chunk, b, hv): the tensor-core products of the backward (P0..P4, rowsum(S ⊙ dS)), then the
// rest of the backward (see KdaChunkBackwardArgs).
Status launchKdaChunkBackward(cudaStream_t stream, const KdaCoreDims& dims,
                              const KdaChunkBackwardArgs& in);

// Token reductions (kda_gate_cuda.cu): rows are cut into kdaSplits(n) splits of
// kdaRowsPerSplit(n) rows (at most kKdaMaxSplits); partial-sum workspaces hold
// kdaSplits(n) * columns floats.
inline constexpr int64_t kKdaMaxSplits = 128;
inline constexpr int kKdaMaxConvWidth = 8;  // most short-conv taps the kernels take
int64_t kdaRowsPerSplit(int64_t n);
int64_t kdaSplits(int64_t n);

// Gate forward over n rows (see kdaGateForwardCuda).
Status launchKdaGateForward(cudaStream_t stream, const KdaGateParams& params, int64_t n,
                            const bf16* f, const bf16* aLog, const bf16* dtBias, float* g);

// Gate backward; partDf, partDA: [kdaSplits(n), H*K] workspaces.
Status launchKdaGateBackward(cudaStream_t stream, const KdaGateParams& params, int64_t n,
                             const float* dg, const bf16* f, const float* g, const bf16* aLog,
                             const bf16* dtBias, bf16* df, float* dALog, float* dDtBias,
                             float* partDf, float* partDA);

// out[d] += sum_rows sum_h in[row, h * fold + d] for d < fold (cols a multiple of fold);
// part: [kdaSplits(n), cols] workspace.
Status launchKdaColumnSums(cudaStream_t stream, const float* in, int64_t n, int64_t cols,
                           int64_t fold, float* part, float* out);

// out[d] += sum_s sum_h part[s, h * fold + d] for d < fold (cols a multiple of fold), in a fixed
// order (splits outer, h inner): the fold every token reduction ends with.
Status launchKdaFoldMod(cudaStream_t stream, const float* part, int64_t splits, int64_t cols,
                        int64_t fold, float* out);

// Short causal conv + SiLU over [B*T, channels] rows (kda_conv_cuda.cu): y, pre [B*T, channels].
// Vectorised kernels when channels % 8 == 0 and the pointers are 16-byte aligned, scalar ones
// otherwise; both give the same bits.
Status launchKdaShortConvForward(cudaStream_t stream, int64_t batch, int64_t seqLen,
                                 int64_t channels, int64_t width, const bf16* x, const bf16* w,
                                 bf16* y, bf16* pre);

// part: [kdaSplits(B*T), channels * width] workspace.
Status launchKdaShortConvBackward(cudaStream_t stream, int64_t batch, int64_t seqLen,
                                  int64_t channels, int64_t width, const bf16* dy, const bf16* x,
                                  const bf16* w, const bf16* pre, bf16* dx, float* dw,
                                  float* part);

// Tests only: false forces the scalar short-conv kernels (to check the vectorised ones against
// them bitwise); true (the default) lets the launchers choose. Process-wide.
void setKdaShortConvVectorised(bool on);

}  // namespace moewb::engine::cuda

namespace moewb::engine::cuda {

// Layer pieces (kda_layer_cuda.cu).
// x[i] = sigmoid(x[i]) in place.
Status launchKdaSigmoid(cudaStream_t stream, float* x, int64_t n);

// out[i] = bf16(dbeta[i] * beta[i] * (1 - beta[i])) (through the sigmoid of beta).
Status launchKdaBetaBackward(cudaStream_t stream, const float* dbeta, const float* beta, bf16* out,
                             int64_t n);

// ctx = o rstd normWeight sigmoid(gatePre + bg) per (row, head); rstd [N, H].
Status launchKdaGatedNormForward(cudaStream_t stream, int64_t n, int64_t numHeads, int64_t headDim,
                                 float eps, const bf16* o, const bf16* gatePre, const bf16* bg,
                                 const bf16* normWeight, bf16* ctx, float* rstd);

// Backward of the gated norm: dO, dGate (bf16) and, for the weight reductions, dGate and the
// norm-weight terms dCtx s (o rstd) in fp32 ([N, H*K] each).
Status launchKdaGatedNormBackward(cudaStream_t stream, int64_t n, int64_t numHeads,
                                  int64_t headDim, const bf16* dCtx, const bf16* o,
                                  const bf16* gatePre, const bf16* bg, const bf16* normWeight,
                                  const float* rstd, bf16* dO, bf16* dGate, float* dGateF,
                                  float* wTerms);

// Tests only: false forces the scalar short-conv kernels (to check the vectorised ones against
// them bitwise); true (the default) lets the launchers choose. Process-wide.
void setKdaShortConvVectorised(bool on);

}  // namespace moewb::engine::cuda
