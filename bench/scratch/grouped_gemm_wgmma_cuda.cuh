// Moved into the engine (issue 14): engine/ops/experts/grouped_gemm_wgmma_cuda.cuh. This file
// stays so that bench/scratch/grouped_gemm_02.cu (the round-2 record) still builds unchanged.
#pragma once

#include "ops/experts/grouped_gemm_wgmma_cuda.cuh"
