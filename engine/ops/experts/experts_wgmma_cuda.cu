// Launchers of the wgmma grouped expert GEMMs (grouped_gemm_wgmma_cuda.cuh): forward gate+up,
// forward down (plain or row-weighted), the dRowWeight recompute, dh (+ GLU backward), dx and the
// weight gradients.
// The only translation unit of
// the engine compiled for sm_90a (its own object library, engine/ops/experts/cuda_sources.cmake):
// it defines the wg:: kernels and none of v1 / v2's (MOEWB_GROUPED_DEVICE_PARTS_ONLY; those live
// in experts_mma_cuda.cu, which calls these launchers per expertsWgmmaStages()). Grids,
// schedule and workspaces are v2's, so the caller's rowTileSlots / tileStart serve both.
// Forward down (plain and row-weighted) and dx run round 5's warp-specialized persistent kernel
// (grouped_gemm_ws_cuda.cuh) in the sweep's tma_rel0 configuration when expertsWarpSpecialized()
// (experts_wgmma_cuda.h; docs/GPU.md has the measurements), round 2 otherwise or when the TMA
// maps cannot be encoded. It reads the same 128-row tileStart schedule.
// Forward gate+up and dh run round 9's split (round 5's kernel with plain epilogues, then the
// elementwise GLU passes of glu_split_cuda.cuh) when expertsGluSplit(), else round 7's ping-pong
// kernel (grouped_gemm_ws_pingpong_cuda.cuh, same 128-row schedule and round 2's bits) when
// expertsGluPingPong(), round 2 otherwise. The weight
// gradients run round 6 (grouped_gemm_ws_wgrad_cuda.cuh, round 2's bits, the tile walk of
// expertsWgradWalk()) when expertsWsWgrad(), round 2 otherwise.
#define MOEWB_GROUPED_DEVICE_PARTS_ONLY 1
// Round 5's configuration (bench/scratch/grouped_gemm_05.md, sweep variant tma_rel0): B by TMA,
// each consumer releases its ring slot as soon as its batch retires (wait_group 0).
#define MOEWB_WS_TMA_B 1
#define MOEWB_WS_RELEASE 0

#include <cstdint>

#include "ops/experts/experts_cuda_kernels.h"
#include "ops/experts/experts_wgmma_cuda.h"
#include "ops/experts/glu_split_cuda.cuh"
#include "ops/experts/grouped_gemm_wgmma_cuda.cuh"
#include "ops/experts/grouped_gemm_ws_cuda.cuh"
#include "ops/experts/grouped_gemm_ws_pingpong_cuda.cuh"
#include "ops/experts/grouped_gemm_ws_wgrad_cuda.cuh"
#include "runtime/cuda/cuda_check.h"

namespace moewb::engine::cuda {
namespace {

namespace wg = grouped::wg;
namespace ws = grouped::ws;
namespace pp = grouped::pp;

unsigned columnTiles(int64_t extent, int64_t tile) {
  const int64_t n = (extent + tile - 1) / tile;
  return unsigned(n > 0 ? n : 1);
}

// Opts the kernel in to wg::kSmemBytes of dynamic shared memory (above the 48 KB default).
template <class Kernel>
Status allowSmem(Kernel kernel) {
  MOEWB_CUDA_RETURN_IF_ERROR(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, wg::kSmemBytes));
  return Status::ok();
}

// The current device's multiprocessor count.
Status multiprocessors(int& sms) {
  int device = 0;
  MOEWB_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
  MOEWB_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  return Status::ok();
}

// Round 5: the persistent warp-specialized kernel for stage kS over grid = min(#SMs, tiles) CTAs.
// `launched` false (nothing issued, no error pending) when the TMA maps cannot be encoded (no
// driver entry point, a rejected map): the caller runs round 2 instead.
template <ws::Stage kS>
Status wsLaunch(const GroupedRowStage& s, ws::Params p, int64_t outColumns, bool& launched) {
  launched = false;
  p.d = s.d;
  p.f = s.f;
  p.offsets = s.offsets;
  p.tileStart = s.tileStart;
  p.numExperts = s.numExperts;
  // The encoder reports through its return value only (no runtime error is left pending).
  if (ws::encodeWeightMaps<kS>(p) != cudaSuccess) return Status::ok();
  const auto kernel = ws::grouped_ws_kernel<kS>;
  MOEWB_CUDA_RETURN_IF_ERROR(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, ws::kSmemBytes));
  int sms = 0;
  MOEWB_RETURN_IF_ERROR(multiprocessors(sms));
  // Tiles: at most s.slots row tiles x column tiles; the kernel reads the real count on the device.
  const int64_t tiles = int64_t(s.slots) * columnTiles(outColumns, ws::kBN);
  const unsigned grid = unsigned(tiles < sms ? tiles : sms);
  kernel<<<grid > 0 ? grid : 1, ws::kThreads, ws::kSmemBytes, s.stream>>>(p);
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  launched = true;
  return Status::ok();
}

// Round 7: the ping-pong kernel for gate+up or dh (grouped_gemm_ws_pingpong_cuda.cuh) over
// grid = min(#SMs, tiles) CTAs, B maps over b1 (and b2 for gate+up). `launched` false (nothing
// issued, no error pending) when the TMA maps cannot be encoded: the caller runs round 2.
template <pp::Stage kS>
Status ppLaunch(const GroupedRowStage& s, pp::Params p, const bf16* b1, const bf16* b2,
                bool& launched) {
  launched = false;
  p.d = s.d;
  p.f = s.f;
  p.offsets = s.offsets;
  p.tileStart = s.tileStart;
  p.numExperts = s.numExperts;
  if (pp::encodeMaps<kS>(p, b1, b2) != cudaSuccess) return Status::ok();
  const auto kernel = pp::grouped_pp_kernel<kS>;
  MOEWB_CUDA_RETURN_IF_ERROR(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, pp::kSmemBytes));
  int sms = 0;
  MOEWB_RETURN_IF_ERROR(multiprocessors(sms));
  const int64_t width = kS == pp::Stage::kGateUp ? pp::kBN / 2 : pp::kBN;
  const int64_t tiles = int64_t(s.slots) * columnTiles(s.f, width);
  const unsigned grid = unsigned(tiles < sms ? tiles : sms);
  kernel<<<grid > 0 ? grid : 1, pp::kThreads, pp::kSmemBytes, s.stream>>>(p);
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  launched = true;
  return Status::ok();
}

// Round 9 forward: gatePre / upPre from round 5's kernel (no hidden in its epilogue), then hidden
// from them. `launched` false (nothing issued) when the TMA maps cannot be encoded.
Status splitGateUpLaunch(const GroupedRowStage& s, const ExpertsForwardArgs& args,
                         const GluParams& activation, bool& launched) {
  ws::Params p;
  p.a1 = args.x;
  p.gather = args.gatherIndex;
  p.b1 = args.gate;
  p.b2 = args.up;
  p.out1 = args.gatePre;
  p.out2 = args.upPre;
  p.out3 = nullptr;
  // 2 f: the grid count of 128-wide gate+up column tiles (wsLaunch divides by 256).
  MOEWB_RETURN_IF_ERROR(wsLaunch<ws::Stage::kGateUp>(s, p, 2 * s.f, launched));
  if (!launched) return Status::ok();
  int sms = 0;
  MOEWB_RETURN_IF_ERROR(multiprocessors(sms));
  glu_split::glu_split_fwd_kernel<<<glu_split::gridFor(s.maxRows, s.f, sms), glu_split::kThreads,
                                    0, s.stream>>>(gluDeviceParams(activation), args.gatePre,
                                                   args.upPre, args.hidden, s.maxRows, s.f,
                                                   s.offsets + s.numExperts);
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::ok();
}

// Round 9 dh: dh rows in fp32 into args.dHidden from round 5's kernel, then the GLU backward.
Status splitDhLaunch(const GroupedRowStage& s, const bf16* dYRows, const ExpertsBackwardArgs& args,
                     const GluParams& activation, bool& launched) {
  ws::Params p;
  p.a1 = dYRows;
  p.b1 = args.down;
  p.dHidden = args.dHidden;
  MOEWB_RETURN_IF_ERROR(wsLaunch<ws::Stage::kDh>(s, p, s.f, launched));
  if (!launched) return Status::ok();
  int sms = 0;
  MOEWB_RETURN_IF_ERROR(multiprocessors(sms));
  glu_split::glu_split_bwd_kernel<<<glu_split::gridFor(s.maxRows, s.f, sms), glu_split::kThreads,
                                    0, s.stream>>>(gluDeviceParams(activation), args.gatePre,
                                                   args.upPre, args.dHidden, args.dGate, args.dUp,
                                                   s.maxRows, s.f, s.offsets + s.numExperts);
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::ok();
}

}  // namespace

bool expertsWgmmaLoadable() {
  cudaFuncAttributes attributes{};
  const bool ok = cudaFuncGetAttributes(&attributes, wg::grouped_fwd_down_kernel) == cudaSuccess;
  if (!ok) (void)cudaGetLastError();  // not sticky: clear it for the next launch check
  return ok;
}

Status expertsWgmmaGateUpLaunch(const GroupedRowStage& s, const ExpertsForwardArgs& args,
                                const GluParams& activation) {
  if (expertsGluSplit() && s.f % 8 == 0) {
    bool launched = false;
    MOEWB_RETURN_IF_ERROR(splitGateUpLaunch(s, args, activation, launched));
    if (launched) return Status::ok();
  }
  if (expertsGluPingPong()) {
    pp::Params p;
    p.a = args.x;
    p.gather = args.gatherIndex;
    p.glu = gluDeviceParams(activation);
    p.out1 = args.gatePre;
    p.out2 = args.upPre;
    p.out3 = args.hidden;
    bool launched = false;
    MOEWB_RETURN_IF_ERROR(ppLaunch<pp::Stage::kGateUp>(s, p, args.gate, args.up, launched));
    if (launched) return Status::ok();
  }
  MOEWB_RETURN_IF_ERROR(allowSmem(wg::grouped_fwd_gate_up_kernel));
  wg::grouped_fwd_gate_up_kernel<<<dim3(columnTiles(s.f, grouped::v2::kGateUpCols), s.slots),
                                   wg::kThreads, wg::kSmemBytes, s.stream>>>(
      args.x, args.gatherIndex, args.gate, args.up, s.d, s.f, s.offsets, s.tileStart,
      s.numExperts, gluDeviceParams(activation), args.gatePre, args.upPre, args.hidden);
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::ok();
}

Status expertsWgmmaDownLaunch(const GroupedRowStage& s, const bf16* hidden, const bf16* down,
                              const float* rowWeight, bf16* y) {
  if (expertsWarpSpecialized()) {
    ws::Params p;
    p.a1 = hidden;
    p.b1 = down;
    p.rowWeight = rowWeight;
    p.out1 = y;
    bool launched = false;
    MOEWB_RETURN_IF_ERROR(wsLaunch<ws::Stage::kDown>(s, p, s.d, launched));
    if (launched) return Status::ok();
  }
  MOEWB_RETURN_IF_ERROR(allowSmem(wg::grouped_fwd_down_kernel));
  wg::grouped_fwd_down_kernel<<<dim3(columnTiles(s.d, wg::kBN), s.slots), wg::kThreads,
                                wg::kSmemBytes, s.stream>>>(hidden, down, s.d, s.f, s.offsets,
                                                            s.tileStart, s.numExperts, rowWeight,
                                                            y);
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::ok();
}

Status expertsWgmmaRowWeightLaunch(const GroupedRowStage& s, const ExpertsBackwardArgs& args,
                                   int64_t maxRows) {
  // Round 2 whatever expertsWarpSpecialized(): the recompute of bf16(h Wd^T) must match the
  // forward's y bits for the folded combine's dRowWeight, and round 5's down kernel gives round
  // 2's bits exactly (same per-element K order; grouped_gemm_05.cu, ExpertsWgmmaCudaTest), so
  // the forward may run either.
  // Round 2 (bench/scratch/grouped_gemm_03.md): the epilogue's loads batched, round 1's bits.
  const auto kernel = wg::grouped_bwd_rowweight_batched_kernel;
  MOEWB_RETURN_IF_ERROR(allowSmem(kernel));
  kernel<<<dim3(columnTiles(s.d, wg::kBN), s.slots), wg::kThreads, wg::kSmemBytes, s.stream>>>(
      args.hidden, args.down, s.d, s.f, s.offsets, s.tileStart, s.numExperts, args.dY,
      args.outputIndex, maxRows, args.rowWeightPartial);
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::ok();
}

Status expertsWgmmaDhLaunch(const GroupedRowStage& s, const bf16* dYRows,
                            const ExpertsBackwardArgs& args, const GluParams& activation) {
  if (args.dHidden != nullptr && expertsGluSplit() && s.f % 8 == 0) {
    bool launched = false;
    MOEWB_RETURN_IF_ERROR(splitDhLaunch(s, dYRows, args, activation, launched));
    if (launched) return Status::ok();
  }
  if (expertsGluPingPong()) {
    pp::Params p;
    p.a = dYRows;
    p.glu = gluDeviceParams(activation);
    p.gatePre = args.gatePre;
    p.upPre = args.upPre;
    p.out1 = args.dGate;
    p.out2 = args.dUp;
    bool launched = false;
    MOEWB_RETURN_IF_ERROR(ppLaunch<pp::Stage::kDh>(s, p, args.down, nullptr, launched));
    if (launched) return Status::ok();
  }
  MOEWB_RETURN_IF_ERROR(allowSmem(wg::grouped_bwd_dh_kernel));
  wg::grouped_bwd_dh_kernel<<<dim3(columnTiles(s.f, wg::kBN), s.slots), wg::kThreads,
                              wg::kSmemBytes, s.stream>>>(
      dYRows, args.down, s.d, s.f, s.offsets, s.tileStart, s.numExperts,
      gluDeviceParams(activation), args.gatePre, args.upPre, args.dGate, args.dUp);
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::ok();
}

Status expertsWgmmaDxLaunch(const GroupedRowStage& s, const ExpertsBackwardArgs& args) {
  if (expertsWarpSpecialized()) {
    ws::Params p;
    p.a1 = args.dGate;
    p.a2 = args.dUp;
    p.b1 = args.gate;
    p.b2 = args.up;
    p.out1 = args.dx;
    bool launched = false;
    MOEWB_RETURN_IF_ERROR(wsLaunch<ws::Stage::kDx>(s, p, s.d, launched));
    if (launched) return Status::ok();
  }
  MOEWB_RETURN_IF_ERROR(allowSmem(wg::grouped_bwd_dx_kernel));
  wg::grouped_bwd_dx_kernel<<<dim3(columnTiles(s.d, wg::kBN), s.slots), wg::kThreads,
                              wg::kSmemBytes, s.stream>>>(args.dGate, args.dUp, args.gate,
                                                          args.up, s.d, s.f, s.offsets,
                                                          s.tileStart, s.numExperts, args.dx);
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::ok();
}

namespace {

// Round 6 (grouped_gemm_ws_wgrad_cuda.cuh, bench/scratch/grouped_gemm_06.md): the weight
// gradient on the warp-specialized persistent kernel, min(#SMs, tiles) CTAs; nothing to launch
// when there are no tiles (E = 0). A comes by TMA where its map encodes (else by cp.async: the
// same bytes, so the same result). The walk is p's (tileCounter, bySkew): same bits either way.
Status wsWgradLaunch(cudaStream_t stream, grouped::wsw::WgradParams p) {
  namespace wsw = grouped::wsw;
  wsw::encodeWgradMapA(p);
  const auto kernel = wsw::grouped_ws_wgrad_kernel;
  MOEWB_CUDA_RETURN_IF_ERROR(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, wsw::kSmemBytes));
  int sms = 0;
  MOEWB_RETURN_IF_ERROR(multiprocessors(sms));
  const unsigned grid = wsw::wgradGrid(p, sms);
  if (grid == 0) return Status::ok();
  kernel<<<grid, wsw::kThreads, wsw::kSmemBytes, stream>>>(p);
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::ok();
}

}  // namespace

Status expertsWgmmaWgradLaunch(cudaStream_t stream, const bf16* a, const bf16* b,
                               const int32_t* bIndex, int64_t mSize, int64_t nSize,
                               int64_t experts, const int32_t* offsets,
                               const int32_t* expertOrder, float* grad, int32_t* tileTicket) {
  if (expertsWsWgrad()) {
    grouped::wsw::WgradParams p;
    p.a = a;
    p.b = b;
    p.bIndex = bIndex;
    p.mSize = mSize;
    p.nSize = nSize;
    p.offsets = offsets;
    p.expertOrder = expertOrder;
    p.numExperts = int(experts);
    p.grad = grad;
    const ExpertsWgradWalk walk = expertsWgradWalk();
    p.tileCounter = walk == ExpertsWgradWalk::kStatic ? nullptr : tileTicket;
    p.bySkew = walk == ExpertsWgradWalk::kBySkew;
    return wsWgradLaunch(stream, p);
  }
  // Round 2 (bench/scratch/grouped_gemm_03.md): the gather index read one K tile ahead.
  const auto kernel = wg::grouped_wgrad_prefetch_kernel;
  MOEWB_RETURN_IF_ERROR(allowSmem(kernel));
  const dim3 grid(columnTiles(nSize, wg::kBN), columnTiles(mSize, wg::kBM), unsigned(experts));
  kernel<<<grid, wg::kThreads, wg::kSmemBytes, stream>>>(
      a, b, bIndex, mSize, nSize, offsets, expertOrder, grad);
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::ok();
}

}  // namespace moewb::engine::cuda
