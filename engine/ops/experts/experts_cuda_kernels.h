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
  bf16* y = nullptr;                     // [N k, D]
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
  bf16* dGate = nullptr;                 // [N k, F] workspace
  bf16* dUp = nullptr;                   // [N k, F] workspace
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

}  // namespace moewb::engine::cuda
