// The Unix socket address of a control socket path, shared by the server (control_socket.cpp) and
// the client (control_client.cpp). Private to the run library.
#pragma once

#include <sys/un.h>

#include <cstring>
#include <string>

namespace moewb::run {

// The AF_UNIX address of `path`; the caller has checked that it fits sun_path with its NUL
// (at most kControlMaxPathBytes bytes, control_socket.h).
inline sockaddr_un controlAddress(const std::string& path) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::memcpy(address.sun_path, path.data(), path.size());
  return address;
}

}  // namespace moewb::run
