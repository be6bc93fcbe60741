// Private to ops/experts: the grouped-experts launchers over raw device pointers (allocation and
// shape checks live in experts_cuda.cpp, host code, because nvcc cannot compile
// DeviceTensor::create's `return tensor;` into a Result).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "runtime/cuda/elementwise.h"
#include "moewb/base/status.h"
#include "ops/experts/glu_activation.h"

namespace moewb::engine::cuda {

// Column tile of the mma.sync kernels after gate+up (sizes the dRowWeight partial-sum workspace).
constexpr int64_t kExpertsMmaTileN = 128;

struct ExpertsLaunchShape {
  int64_t experts = 0;  // E
  int64_t d = 0;        // D (x width)
  int64_t f = 0;        // F (expert hidden width)
  int64_t maxRows = 0;  // N k, the upper bound of R
};

struct ExpertsForwardArgs {
  const bf16* x = nullptr;               // [N k, D], or [N, D] with gatherIndex
  const int32_t* gatherIndex = nullptr;  // [N k] or null
  const int32_t* offsets = nullptr;      // [E + 1]
  const bf16* gate = nullptr;            // [E, F, D]
  const bf16* up = nullptr;              // [E, F, D]
  const bf16* down = nullptr;            // [E, D, F]
  const float* rowWeight = nullptr;      // [N k] or null
  int32_t* tileStart = nullptr;          // [E + 1] workspace
  bf16* gatePre = nullptr;               // [N k, F]
  bf16* upPre = nullptr;                 // [N k, F]
  bf16* hidden = nullptr;                // [N k, F]
  bf16* y = nullptr;                     // [N k, D]; null: the gate + up stage only (recompute)
};

struct ExpertsBackwardArgs {
  const bf16* dY = nullptr;              // [N k, D], or [N, D] with rowWeight
  const bf16* x = nullptr;               // as in the forward
  const int32_t* gatherIndex = nullptr;  // [N k] or null
  const float* rowWeight = nullptr;      // [N k] or null
  const int32_t* outputIndex = nullptr;  // [N k] (with rowWeight)
  const int32_t* offsets = nullptr;      // [E + 1]
  const bf16* gate = nullptr;            // [E, F, D]
  const bf16* up = nullptr;              // [E, F, D]
  const bf16* down = nullptr;            // [E, D, F]
  const bf16* gatePre = nullptr;         // [N k, F] saved
  const bf16* upPre = nullptr;           // [N k, F]
  const bf16* hidden = nullptr;          // [N k, F]
  int32_t* tileStart = nullptr;          // [E + 1] workspace
  int32_t* expertOrder = nullptr;        // [E] workspace (experts by row count, largest first)
  int32_t* wgradTickets = nullptr;       // [3] workspace (round 6's tile tickets) or null
  bf16* dGate = nullptr;                 // [N k, F] workspace
  bf16* dUp = nullptr;                   // [N k, F] workspace
  float* dHidden = nullptr;              // [N k, F] workspace for round 9's split dh, or null
  bf16* dYWeighted = nullptr;            // [N k, D] workspace (with rowWeight)
  float* rowWeightPartial = nullptr;     // [ceil(D / kExpertsMmaTileN), N k] workspace
  bf16* dx = nullptr;                    // [N k, D] output
  float* gradGate = nullptr;             // [E, F, D] accumulated
  float* gradUp = nullptr;               // [E, F, D]
  float* gradDown = nullptr;             // [E, D, F]
  float* dRowWeight = nullptr;           // [N k] (with rowWeight)
};

Status expertsForwardLaunch(cudaStream_t stream, const ExpertsLaunchShape& shape,
                            const ExpertsForwardArgs& args, const GluParams& activation);

Status expertsBackwardLaunch(cudaStream_t stream, const ExpertsLaunchShape& shape,
                             const ExpertsBackwardArgs& args, const GluParams& activation);

// The mma.sync pipeline (experts_mma_cuda.cu), called by the two launchers above when D % 8 == 0,
// F % 8 == 0 and every pointer is 16-byte aligned.
Status expertsForwardMmaLaunch(cudaStream_t stream, const ExpertsLaunchShape& shape,
                               const ExpertsForwardArgs& args, const GluParams& activation);
Status expertsBackwardMmaLaunch(cudaStream_t stream, const ExpertsLaunchShape& shape,
                                const ExpertsBackwardArgs& args, const GluParams& activation);

// ---- wgmma (sm_90a) stages: experts_wgmma_cuda.cu, built when MOEWB_EXPERTS_WGMMA is 1
// (engine/ops/experts/cuda_sources.cmake). Called by experts_mma_cuda.cu, same preconditions as
// the mma.sync pipeline (aligned pointers, D % 8 == 0, F % 8 == 0) plus expertsWgmmaStages().

// Which stages of this launch run wgmma: `fc` (forward gate+up, forward down, the dRowWeight
// recompute), `dgrad` (dh, dx) and `wgrad` (the three weight gradients). All false unless the
// build has them and the current device is compute capability 9.0 and loads them; then
// setExpertsWgmmaMode / MOEWB_GROUPED_WGMMA (read once: 0 none, fc, dgrad (fc + dgrad), 1 or
// unset all). Errors: kInvalidArgument for another MOEWB_GROUPED_WGMMA value.
struct WgmmaStages {
  bool fc = false;
  bool dgrad = false;
  bool wgrad = false;
};
Status expertsWgmmaStages(WgmmaStages& stages);

// One row-tile stage launch: grid (column tiles, `slots` row-tile slots) over the schedule
// tileStart (grouped_schedule_kernel, 128-row tiles).
struct GroupedRowStage {
  cudaStream_t stream = nullptr;
  unsigned slots = 0;
  int64_t d = 0, f = 0;
  int numExperts = 0;
  const int32_t* offsets = nullptr;
  const int32_t* tileStart = nullptr;
  int64_t maxRows = 0;  // rows the [rows, ...] buffers hold (offsets[numExperts] <= maxRows)
};

#if MOEWB_EXPERTS_WGMMA
// True when the sm_90a kernels load on the current device (cudaFuncGetAttributes succeeds).
bool expertsWgmmaLoadable();
// Forward gate+up (writes args.gatePre, upPre, hidden).
Status expertsWgmmaGateUpLaunch(const GroupedRowStage& s, const ExpertsForwardArgs& args,
                                const GluParams& activation);
// Forward down: y = bf16(h Wd^T), times rowWeight[r] when rowWeight is set.
Status expertsWgmmaDownLaunch(const GroupedRowStage& s, const bf16* hidden, const bf16* down,
                              const float* rowWeight, bf16* y);
// dRowWeight part 1: args.rowWeightPartial [ceil(D / 128), maxRows] per-column-tile dots.
Status expertsWgmmaRowWeightLaunch(const GroupedRowStage& s, const ExpertsBackwardArgs& args,
                                   int64_t maxRows);
// dh = dYRows Wd, then the GLU backward into args.dGate / dUp (round 9's split stores dh in
// args.dHidden first when that is set).
Status expertsWgmmaDhLaunch(const GroupedRowStage& s, const bf16* dYRows,
                            const ExpertsBackwardArgs& args, const GluParams& activation);
// dx = dGate Wg + dUp Wu into args.dx.
Status expertsWgmmaDxLaunch(const GroupedRowStage& s, const ExpertsBackwardArgs& args);
// grad [E, mSize, nSize] += a^T b per expert (a [N k, mSize], b through bIndex); expertOrder as
// grouped_expert_order_kernel's (or null). tileTicket: a device int that is 0 when the launch
// runs (round 6 may take its tiles from it, expertsWgradWalk; left in any state), or null (round
// 6 takes the static walk).
Status expertsWgmmaWgradLaunch(cudaStream_t stream, const bf16* a, const bf16* b,
                               const int32_t* bIndex, int64_t mSize, int64_t nSize,
                               int64_t experts, const int32_t* offsets,
                               const int32_t* expertOrder, float* grad, int32_t* tileTicket);
#endif

}  // namespace moewb::engine::cuda
