// Checking macros for every CUDA runtime and cuBLAS call of the CUDA backend: a failed call
// becomes a Status (kResourceExhausted for out-of-memory, kInternal otherwise) whose message
// names the call, the file and line, and the library's own message. Kernel launches are checked
// with MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR() right after the launch.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "moewb/base/status.h"

namespace moewb::engine::cuda {

// Status of a CUDA runtime result; ok for cudaSuccess. `call` is the expression's text.
Status cudaStatus(cudaError_t result, const char* call, const char* file, int line);
// Status of a cuBLAS result; ok for CUBLAS_STATUS_SUCCESS.
Status cublasStatus(cublasStatus_t result, const char* call, const char* file, int line);

}  // namespace moewb::engine::cuda

#define MOEWB_CUDA_RETURN_IF_ERROR(expr) \
  MOEWB_RETURN_IF_ERROR(::moewb::engine::cuda::cudaStatus((expr), #expr, __FILE__, __LINE__))

#define MOEWB_CUBLAS_RETURN_IF_ERROR(expr) \
  MOEWB_RETURN_IF_ERROR(::moewb::engine::cuda::cublasStatus((expr), #expr, __FILE__, __LINE__))

// After a <<<...>>> launch: returns the launch error (bad configuration, no kernel image, ...).
#define MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR()                                                    \
  MOEWB_RETURN_IF_ERROR(::moewb::engine::cuda::cudaStatus(cudaGetLastError(), "kernel launch", \
                                                          __FILE__, __LINE__))
