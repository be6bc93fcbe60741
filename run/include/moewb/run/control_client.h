// askControlSocket: the client side of a run's live-control socket (control_socket.h): one
// request line sent, one answer line read back. What `moewb ctl` does; a GUI or a script can
// call it the same way. Blocking, bounded by a timeout; thread-safe (no shared state).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "moewb/base/status.h"

namespace moewb::run {

// Connects to the control socket at `path`, sends `request` and a '\n', and returns the answer
// line without its '\n' ("ok ..." or "error: ..."; see control_protocol.h), waiting at most
// `timeoutMs` for it. Errors: kInvalidArgument (an empty path or one over kControlMaxPathBytes,
// a request holding a '\n'), kNotFound (nothing listens at `path`: no file, not a socket, or a
// socket nobody accepts on; the message is "no run is listening at PATH (is `moewb run --control
// PATH` running?)", what `moewb ctl` prints), kCancelled (no
// answer within `timeoutMs`), kInternal (the connection failed or ended without an answer line).
Result<std::string> askControlSocket(const std::string& path, std::string_view request,
                                     int64_t timeoutMs);

}  // namespace moewb::run
