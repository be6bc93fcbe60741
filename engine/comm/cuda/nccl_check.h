// Status of NCCL results: every NCCL call of the NCCL communicator goes through ncclStatus, so a
// failure names the call, the file and line, the rank and NCCL's own messages.
#pragma once

#include <nccl.h>

#include <string>

#include "moewb/base/status.h"

namespace moewb::engine {

// ok for ncclSuccess and ncclInProgress (a non-blocking call under way; the caller polls).
// Otherwise kCancelled for ncclRemoteError and ncclSystemError (a peer or the network failed),
// kInternal for the rest, with the message "<call> failed at <file>:<line> on <who>: <NCCL's
// error string> (<ncclGetLastError>)".
Status ncclStatus(ncclResult_t result, const char* call, const char* file, int line,
                  const std::string& who);

}  // namespace moewb::engine
