#include "runtime/cuda/cuda_check.h"

#include <string>

namespace moewb::engine::cuda {

Status cudaStatus(cudaError_t result, const char* call, const char* file, int line) {
  if (result == cudaSuccess) return Status::ok();
  std::string message = std::string(call) + " failed at " + file + ":" + std::to_string(line) +
                        ": " + cudaGetErrorName(result) + " (" + cudaGetErrorString(result) + ")";
  if (result == cudaErrorMemoryAllocation) return resourceExhausted(message);
  return internalError(message);
}

Status cublasStatus(cublasStatus_t result, const char* call, const char* file, int line) {
  if (result == CUBLAS_STATUS_SUCCESS) return Status::ok();
  std::string message = std::string(call) + " failed at " + file + ":" + std::to_string(line) +
                        ": " + cublasGetStatusName(result) + " (" + cublasGetStatusString(result) +
                        ")";
  if (result == CUBLAS_STATUS_ALLOC_FAILED) return resourceExhausted(message);
  return internalError(message);
}

}  // namespace moewb::engine::cuda
