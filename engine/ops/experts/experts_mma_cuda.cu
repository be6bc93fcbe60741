// Launchers of the mma.sync grouped expert GEMMs for the 16-byte-aligned case (D % 8 == 0,
// F % 8 == 0, aligned bases); experts_cuda.cu dispatches here and keeps its WMMA kernels for the
// other shapes. Two mainloops, picked per stage by kVersion: v1 (grouped_gemm_cuda.cuh, round 1)
// and v2 (grouped_gemm_v2_cuda.cuh: 64 x 64 warp tiles, K step 64, swizzled shared memory,
// epilogues through shared memory). Same grids and workspaces, same results bitwise
// (bench/scratch/grouped_gemm_02.cu checks it) except dRowWeight's fixed reduction order.
// On compute capability 9.0, when the build has the sm_90a object (MOEWB_EXPERTS_WGMMA), forward
// gate+up, forward down, the dRowWeight recompute, dh, dx and the weight gradients run the wgmma
// mainloop instead (experts_wgmma_cuda.cu; expertsWgmmaStages: MOEWB_GROUPED_WGMMA=0 turns it
// off, =fc / =dgrad keep the later stages on kVersion's): same grids and workspaces, results
// within rounding of v2's (checked by bench/scratch/grouped_gemm_03.cu, ExpertsWgmmaCudaTest).
// Among those, forward down and dx pick round 5's warp-specialized kernel inside
// experts_wgmma_cuda.cu (setExpertsWarpSpecialized; same bits as round 2), not here.
#include <cstdint>
#include <string>

#include "ops/experts/experts_cuda_kernels.h"
#include "ops/experts/grouped_gemm_cuda.cuh"
#include "ops/experts/grouped_gemm_v2_cuda.cuh"
#include "runtime/cuda/cuda_check.h"

namespace moewb::engine::cuda {
namespace {

namespace gg = grouped;
namespace g2 = grouped::v2;
// Mainloop version per stage: 2 = grouped_gemm_v2_cuda.cuh (round 2), 1 = round 1's
// grouped_gemm_cuda.cuh (kept selectable until v2 has passed on the GPU: bench/scratch/
// grouped_gemm_01.md, round 2). Both give bitwise-equal outputs and gradients (dRowWeight: up to
// its fixed reduction order), so the stages may mix versions.
struct StageVersions {
  int gateUp, down, dh, dx, wgrad;  // `down` also picks the dRowWeight recompute
};
// Measured on the H200 at T=16384 D=2048 E=64 k=8 FF=1024 (bench/scratch/grouped_gemm_02.cu):
// v2 wins gate+up (3.22 against 4.68 ms), down (1.68 / 2.16), dh (2.02 / 2.58) and dx (3.20 /
// 4.00); v1 wins the weight gradients (2.19-2.39 against 2.14-3.42 ms). Outputs are bitwise
// equal between the versions, so the mix changes no result.
constexpr StageVersions kVersion{2, 2, 2, 2, 1};
// v1 only: B operands per CTA of the stages after gate+up: 1, i.e. 128 x 128 tiles at 2 CTAs per
// SM (bench/scratch/grouped_gemm_01.md: 20.0 ms for the 7 stages against 25.7 ms with 128 x 256).
constexpr int kNB = 1;
constexpr int64_t kTileN = kNB * gg::kBN;  // output columns per CTA
static_assert(kTileN == kExpertsMmaTileN, "workspace sizing in experts_cuda.cpp");
static_assert(g2::kBN == kExpertsMmaTileN && g2::kBM == gg::kBM, "v2 shares grids / workspaces");

unsigned tiles(int64_t extent, int64_t tile) {
  const int64_t n = (extent + tile - 1) / tile;
  return unsigned(n > 0 ? n : 1);
}

// Upper bound of the 128-row tiles over all experts: sum_e ceil(c_e / 128) <= N k / 128 + E.
Status rowTileSlots(const ExpertsLaunchShape& shape, unsigned& slots) {
  const int64_t n = shape.maxRows / gg::kBM + shape.experts;
  if (n > 65535) {
    return invalidArgument("experts: " + std::to_string(n) +
                           " row tiles exceed one grid dimension (65535)");
  }
  slots = unsigned(n);
  return Status::ok();
}

// Opts the kernel in to `bytes` of dynamic shared memory (above the 48 KB default).
template <class Kernel>
Status allowSmem(Kernel kernel, int bytes) {
  MOEWB_CUDA_RETURN_IF_ERROR(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  return Status::ok();
}

Status schedule(cudaStream_t stream, const int32_t* offsets, int64_t experts, int32_t* tileStart) {
  gg::grouped_schedule_kernel<<<1, 32, 0, stream>>>(offsets, int(experts), gg::kBM, tileStart);
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::ok();
}

// Per-stage launches (version `ver` as kVersion, or kWgmma where the stage has a wgmma kernel;
// grids: 128-row tile slots x column tiles).
using RowStage = GroupedRowStage;
constexpr int kWgmma = 3;

Status launchGateUp(const RowStage& s, int ver, const ExpertsForwardArgs& args,
                    const GluParams& activation) {
#if MOEWB_EXPERTS_WGMMA
  if (ver == kWgmma) return expertsWgmmaGateUpLaunch(s, args, activation);
#endif
  const GluDeviceParams glu = gluDeviceParams(activation);
  if (ver == 2) {
    MOEWB_RETURN_IF_ERROR(allowSmem(g2::grouped_fwd_gate_up_kernel, g2::kSmemBytes));
    g2::grouped_fwd_gate_up_kernel<<<dim3(tiles(s.f, g2::kGateUpCols), s.slots), g2::kThreads,
                                     g2::kSmemBytes, s.stream>>>(
        args.x, args.gatherIndex, args.gate, args.up, s.d, s.f, s.offsets, s.tileStart,
        s.numExperts, glu, args.gatePre, args.upPre, args.hidden);
  } else {
    constexpr int kBytes = gg::FwdSmem::kBytes;
    MOEWB_RETURN_IF_ERROR(allowSmem(gg::grouped_fwd_gate_up_kernel, kBytes));
    gg::grouped_fwd_gate_up_kernel<<<dim3(tiles(s.f, gg::kBN), s.slots), gg::kThreads, kBytes,
                                     s.stream>>>(args.x, args.gatherIndex, args.gate, args.up, s.d,
                                                 s.f, s.offsets, s.tileStart, s.numExperts, glu,
                                                 args.gatePre, args.upPre, args.hidden);
  }
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::ok();
}

Status launchDown(const RowStage& s, int ver, const bf16* hidden, const bf16* down,
                  const float* rowWeight, bf16* y) {
#if MOEWB_EXPERTS_WGMMA
  if (ver == kWgmma) return expertsWgmmaDownLaunch(s, hidden, down, rowWeight, y);
#endif
  if (ver == 2) {
    MOEWB_RETURN_IF_ERROR(allowSmem(g2::grouped_fwd_down_kernel, g2::kSmemBytes));
    g2::grouped_fwd_down_kernel<<<dim3(tiles(s.d, g2::kBN), s.slots), g2::kThreads, g2::kSmemBytes,
                                  s.stream>>>(hidden, down, s.d, s.f, s.offsets, s.tileStart,
                                              s.numExperts, rowWeight, y);
  } else {
    constexpr int kBytes = gg::DownSmem<kNB>::kBytes;
    MOEWB_RETURN_IF_ERROR(allowSmem(gg::grouped_fwd_down_kernel<kNB>, kBytes));
    gg::grouped_fwd_down_kernel<kNB>
        <<<dim3(tiles(s.d, kTileN), s.slots), gg::kThreads, kBytes, s.stream>>>(
            hidden, down, s.d, s.f, s.offsets, s.tileStart, s.numExperts, rowWeight, y);
  }
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::ok();
}

// partial [ceil(d / 128), maxRows] of dRowWeight (the per-column-tile dots).
Status launchRowWeight(const RowStage& s, int ver, const ExpertsBackwardArgs& args,
                       int64_t maxRows) {
#if MOEWB_EXPERTS_WGMMA
  if (ver == kWgmma) return expertsWgmmaRowWeightLaunch(s, args, maxRows);
#endif
  if (ver == 2) {
    MOEWB_RETURN_IF_ERROR(allowSmem(g2::grouped_bwd_rowweight_kernel, g2::kSmemBytes));
    g2::grouped_bwd_rowweight_kernel<<<dim3(tiles(s.d, kTileN), s.slots), g2::kThreads,
                                       g2::kSmemBytes, s.stream>>>(
        args.hidden, args.down, s.d, s.f, s.offsets, s.tileStart, s.numExperts, args.dY,
        args.outputIndex, maxRows, args.rowWeightPartial);
  } else {
    constexpr int kBytes = gg::DownSmem<kNB>::kBytes;
    MOEWB_RETURN_IF_ERROR(allowSmem(gg::grouped_bwd_rowweight_kernel<kNB>, kBytes));
    gg::grouped_bwd_rowweight_kernel<kNB>
        <<<dim3(tiles(s.d, kTileN), s.slots), gg::kThreads, kBytes, s.stream>>>(
            args.hidden, args.down, s.d, s.f, s.offsets, s.tileStart, s.numExperts, args.dY,
            args.outputIndex, maxRows, args.rowWeightPartial);
  }
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::ok();
}

Status launchDh(const RowStage& s, int ver, const bf16* dYRows, const ExpertsBackwardArgs& args,
                const GluParams& activation) {
#if MOEWB_EXPERTS_WGMMA
  if (ver == kWgmma) return expertsWgmmaDhLaunch(s, dYRows, args, activation);
#endif
  const GluDeviceParams glu = gluDeviceParams(activation);
  if (ver == 2) {
    MOEWB_RETURN_IF_ERROR(allowSmem(g2::grouped_bwd_dh_kernel, g2::kSmemBytes));
    g2::grouped_bwd_dh_kernel<<<dim3(tiles(s.f, g2::kBN), s.slots), g2::kThreads, g2::kSmemBytes,
                                s.stream>>>(dYRows, args.down, s.d, s.f, s.offsets, s.tileStart,
                                            s.numExperts, glu, args.gatePre, args.upPre, args.dGate,
                                            args.dUp);
  } else {
    constexpr int kBytes = gg::DgradSmem<kNB>::kBytes;
    MOEWB_RETURN_IF_ERROR(allowSmem(gg::grouped_bwd_dh_kernel<kNB>, kBytes));
    gg::grouped_bwd_dh_kernel<kNB>
        <<<dim3(tiles(s.f, kTileN), s.slots), gg::kThreads, kBytes, s.stream>>>(
            dYRows, args.down, s.d, s.f, s.offsets, s.tileStart, s.numExperts, glu, args.gatePre,
            args.upPre, args.dGate, args.dUp);
  }
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::ok();
}

Status launchDx(const RowStage& s, int ver, const ExpertsBackwardArgs& args) {
#if MOEWB_EXPERTS_WGMMA
  if (ver == kWgmma) return expertsWgmmaDxLaunch(s, args);
#endif
  if (ver == 2) {
    MOEWB_RETURN_IF_ERROR(allowSmem(g2::grouped_bwd_dx_kernel, g2::kSmemBytes));
    g2::grouped_bwd_dx_kernel<<<dim3(tiles(s.d, g2::kBN), s.slots), g2::kThreads, g2::kSmemBytes,
                                s.stream>>>(args.dGate, args.dUp, args.gate, args.up, s.d, s.f,
                                            s.offsets, s.tileStart, s.numExperts, args.dx);
  } else {
    constexpr int kBytes = gg::DgradSmem<kNB>::kBytes;
    MOEWB_RETURN_IF_ERROR(allowSmem(gg::grouped_bwd_dx_kernel<kNB>, kBytes));
    gg::grouped_bwd_dx_kernel<kNB>
        <<<dim3(tiles(s.d, kTileN), s.slots), gg::kThreads, kBytes, s.stream>>>(
            args.dGate, args.dUp, args.gate, args.up, s.d, s.f, s.offsets, s.tileStart,
            s.numExperts, args.dx);
  }
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::ok();
}

// grad [E, mSize, nSize] += a^T b per expert (a [N k, mSize], b through bIndex); tileTicket: 0
// at launch or null (expertsWgmmaWgradLaunch; only the wgmma version reads it).
Status launchWgrad(cudaStream_t stream, int ver, const bf16* a, const bf16* b,
                   const int32_t* bIndex, int64_t mSize, int64_t nSize, int64_t experts,
                   const int32_t* offsets, const int32_t* expertOrder, float* grad,
                   [[maybe_unused]] int32_t* tileTicket) {
#if MOEWB_EXPERTS_WGMMA
  if (ver == kWgmma) {
    return expertsWgmmaWgradLaunch(stream, a, b, bIndex, mSize, nSize, experts, offsets,
                                   expertOrder, grad, tileTicket);
  }
#endif
  if (ver == 2) {
    MOEWB_RETURN_IF_ERROR(allowSmem(g2::grouped_wgrad_kernel, g2::kSmemBytes));
    const dim3 grid(tiles(nSize, g2::kBN), tiles(mSize, g2::kBM), unsigned(experts));
    g2::grouped_wgrad_kernel<<<grid, g2::kThreads, g2::kSmemBytes, stream>>>(
        a, b, bIndex, mSize, nSize, offsets, expertOrder, grad);
  } else {
    constexpr int kBytes = gg::WgradSmem<kNB>::kBytes;
    MOEWB_RETURN_IF_ERROR(allowSmem(gg::grouped_wgrad_kernel<kNB>, kBytes));
    const dim3 grid(tiles(nSize, kTileN), tiles(mSize, gg::kBM), unsigned(experts));
    gg::grouped_wgrad_kernel<kNB><<<grid, gg::kThreads, kBytes, stream>>>(
        a, b, bIndex, mSize, nSize, offsets, expertOrder, grad);
  }
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::ok();
}

// Per stage: kWgmma where expertsWgmmaStages turns it on, else kVersion's.
struct LaunchVersions {
  int gateUp, down, dh, dx, wgrad;
};
Status launchVersions(LaunchVersions& v) {
  WgmmaStages wgmma;
  MOEWB_RETURN_IF_ERROR(expertsWgmmaStages(wgmma));
  v.gateUp = wgmma.fc ? kWgmma : kVersion.gateUp;
  v.down = wgmma.fc ? kWgmma : kVersion.down;
  v.dh = wgmma.dgrad ? kWgmma : kVersion.dh;
  v.dx = wgmma.dgrad ? kWgmma : kVersion.dx;
  v.wgrad = wgmma.wgrad ? kWgmma : kVersion.wgrad;
  return Status::ok();
}

}  // namespace

Status expertsForwardMmaLaunch(cudaStream_t stream, const ExpertsLaunchShape& shape,
                               const ExpertsForwardArgs& args, const GluParams& activation) {
  RowStage s{stream, 0, shape.d, shape.f, int(shape.experts), args.offsets, args.tileStart,
             shape.maxRows};
  MOEWB_RETURN_IF_ERROR(rowTileSlots(shape, s.slots));
  MOEWB_RETURN_IF_ERROR(schedule(stream, args.offsets, shape.experts, args.tileStart));
  LaunchVersions ver{};
  MOEWB_RETURN_IF_ERROR(launchVersions(ver));
  MOEWB_RETURN_IF_ERROR(launchGateUp(s, ver.gateUp, args, activation));
  if (args.y == nullptr) return Status::ok();  // gate + up only (recompute)
  return launchDown(s, ver.down, args.hidden, args.down, args.rowWeight, args.y);
}

Status expertsBackwardMmaLaunch(cudaStream_t stream, const ExpertsLaunchShape& shape,
                                const ExpertsBackwardArgs& args, const GluParams& activation) {
  const int64_t d = shape.d, f = shape.f;
  const int numExperts = int(shape.experts);
  RowStage s{stream, 0, d, f, numExperts, args.offsets, args.tileStart, shape.maxRows};
  MOEWB_RETURN_IF_ERROR(rowTileSlots(shape, s.slots));
  MOEWB_RETURN_IF_ERROR(schedule(stream, args.offsets, shape.experts, args.tileStart));
  LaunchVersions ver{};
  MOEWB_RETURN_IF_ERROR(launchVersions(ver));
  // Gradient of the unweighted output rows: dY, or dYPerm = bf16(w_r dy[token(r)]) formed by a
  // pre-pass with the folded combine (bitwise the unfused combine's dYPerm).
  const bf16* dYRows = args.dY;
  if (args.rowWeight != nullptr) {
    if (args.dYWeighted == nullptr) return invalidArgument("experts: dYWeighted workspace missing");
    const int64_t chunks = shape.maxRows * d / 8;
    const unsigned blocks = unsigned(chunks / 256 + 1 < 132 * 16 ? chunks / 256 + 1 : 132 * 16);
    gg::grouped_weighted_rows_kernel<<<blocks, 256, 0, stream>>>(
        args.dY, args.rowWeight, args.outputIndex, args.offsets, numExperts, d, args.dYWeighted);
    MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
    dYRows = args.dYWeighted;
  }
  if (args.rowWeight != nullptr) {
    // dRowWeight[r] = <dy[token(r)], bf16(h_r Wd^T)>: per-column-tile partial dots, then a fixed
    // order sum over the column tiles.
    if (args.rowWeightPartial == nullptr || args.dRowWeight == nullptr) {
      return invalidArgument("experts: rowWeightPartial / dRowWeight missing");
    }
    MOEWB_RETURN_IF_ERROR(launchRowWeight(s, ver.down, args, shape.maxRows));
    const int64_t sumBlocks = shape.maxRows / 256 + 1;
    const unsigned blocks = unsigned(sumBlocks < 1024 ? sumBlocks : 1024);
    gg::grouped_rowweight_sum_kernel<<<blocks, 256, 0, stream>>>(
        args.rowWeightPartial, int(tiles(d, kTileN)), shape.maxRows, args.offsets, numExperts,
        args.dRowWeight);
    MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  }
  MOEWB_RETURN_IF_ERROR(launchDh(s, ver.dh, dYRows, args, activation));
  MOEWB_RETURN_IF_ERROR(launchDx(s, ver.dx, args));
  // dWd [E, D, F] += dYRows^T h;  dWg / dWu [E, F, D] += dg^T x / du^T x (x through gatherIndex).
  // Hot experts' weight-gradient CTAs (the longest: K = their rows) first.
  if (args.expertOrder != nullptr) {
    gg::grouped_expert_order_kernel<<<1, 1024, 0, stream>>>(args.offsets, numExperts,
                                                            args.expertOrder);
    MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  }
  // Round 6's tile tickets, one per gradient: zeroed once here, in the stream, rather than reset
  // by each kernel's last CTA, so a failed or aborted launch cannot leave a stale ticket behind
  // (the next launch would silently skip tiles); one 12-byte memset per backward.
  const int wv = ver.wgrad;
  int32_t* tickets = wv == kWgmma ? args.wgradTickets : nullptr;
  if (tickets != nullptr) {
    MOEWB_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(tickets, 0, 3 * sizeof(int32_t), stream));
  }
  auto ticket = [&](int i) { return tickets != nullptr ? tickets + i : nullptr; };
  MOEWB_RETURN_IF_ERROR(launchWgrad(stream, wv, dYRows, args.hidden, nullptr, d, f, shape.experts,
                                    args.offsets, args.expertOrder, args.gradDown, ticket(0)));
  MOEWB_RETURN_IF_ERROR(launchWgrad(stream, wv, args.dGate, args.x, args.gatherIndex, f, d,
                                    shape.experts, args.offsets, args.expertOrder, args.gradGate,
                                    ticket(1)));
  return launchWgrad(stream, wv, args.dUp, args.x, args.gatherIndex, f, d, shape.experts,
                     args.offsets, args.expertOrder, args.gradUp, ticket(2));
}

}  // namespace moewb::engine::cuda
