// NCCL result codes as Status (nccl_check.h).
#include "comm/cuda/nccl_check.h"

namespace moewb::engine {

Status ncclStatus(ncclResult_t result, const char* call, const char* file, int line,
                  const std::string& who) {
  if (result == ncclSuccess || result == ncclInProgress) return Status::ok();
  const char* last = ncclGetLastError(nullptr);
  std::string message = std::string(call) + " failed at " + file + ":" + std::to_string(line) +
                        " on " + who + ": " + ncclGetErrorString(result);
  if (last && *last) message += std::string(" (") + last + ")";
  if (result == ncclRemoteError || result == ncclSystemError) return cancelled(message);
  return internalError(message);
}

}  // namespace moewb::engine
