// askControlSocket (control_client.h): one request, one answer over a run's control socket.
#include "moewb/run/control_client.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "control_address.h"
#include "moewb/run/control_protocol.h"
#include "moewb/run/control_socket.h"

namespace moewb::run {
namespace {

using Clock = std::chrono::steady_clock;

// Closes the descriptor when it goes out of scope.
struct Descriptor {
  int fd = -1;
  ~Descriptor() {
    if (fd >= 0) ::close(fd);
  }
};

// Milliseconds left until `deadline`, at least 0.
int msLeft(Clock::time_point deadline) {
  const auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left > 0 ? int(std::min<int64_t>(left, 1 << 30)) : 0;
}

Status noAnswer(const std::string& path, int64_t timeoutMs) {
  return cancelled("no answer from the run at '" + path + "' within " +
                   std::to_string(timeoutMs) + " ms");
}

Status connectTo(int fd, const std::string& path, Clock::time_point deadline, int64_t timeoutMs) {
  const sockaddr_un address = controlAddress(path);  // askControlSocket checked its length
  for (;;) {
    if (::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) == 0) {
      return Status::ok();
    }
    const int error = errno;
    if (error == ENOENT || error == ECONNREFUSED || error == ENOTSOCK || error == ENOTDIR) {
      return notFound("no run is listening at " + path + " (is `moewb run --control " + path +
                      "` running?)");
    }
    if (error != EAGAIN && error != EINTR) {
      return internalError("connecting to '" + path + "': " + std::strerror(error));
    }
    if (msLeft(deadline) == 0) return noAnswer(path, timeoutMs);  // its backlog stays full
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

// Waits until `fd` is ready for `events`; false at the deadline.
bool waitFor(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    pollfd item{fd, events, 0};
    const int ready = ::poll(&item, 1, msLeft(deadline));
    if (ready > 0) return true;
    if (ready == 0 || errno != EINTR) return false;
  }
}

Status sendAll(int fd, const std::string& bytes, const std::string& path,
               Clock::time_point deadline, int64_t timeoutMs) {
  size_t sent = 0;
  while (sent < bytes.size()) {
    const ssize_t n = ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += size_t(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      if (!waitFor(fd, POLLOUT, deadline)) return noAnswer(path, timeoutMs);
    } else {
      return internalError("sending to '" + path + "': " + std::strerror(errno));
    }
  }
  return Status::ok();
}

Result<std::string> readLine(int fd, const std::string& path, Clock::time_point deadline,
                             int64_t timeoutMs) {
  std::string answer;
  for (;;) {
    const size_t newline = answer.find('\n');
    if (newline != std::string::npos) return answer.substr(0, newline);
    if (answer.size() > kControlMaxLineBytes + 1) {
      return internalError("the answer from '" + path + "' is longer than " +
                           std::to_string(kControlMaxLineBytes) + " bytes");
    }
    if (!waitFor(fd, POLLIN, deadline)) return noAnswer(path, timeoutMs);
    char buffer[4096];
    const ssize_t n = ::recv(fd, buffer, sizeof buffer, 0);
    if (n > 0) {
      answer.append(buffer, size_t(n));
    } else if (n == 0) {
      return internalError("the run at '" + path + "' closed the connection without an answer");
    } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      return internalError("reading from '" + path + "': " + std::strerror(errno));
    }
  }
}

}  // namespace

Result<std::string> askControlSocket(const std::string& path, std::string_view request,
                                     int64_t timeoutMs) {
  if (path.empty() || path.size() > kControlMaxPathBytes) {
    return invalidArgument("control socket path '" + path + "' is " +
                           std::to_string(path.size()) + " bytes; accepted: 1 to " +
                           std::to_string(kControlMaxPathBytes) + " bytes (sun_path)");
  }
  if (request.find('\n') != std::string_view::npos) {
    return invalidArgument("a request is one line; this one holds a newline");
  }
  const Clock::time_point deadline = Clock::now() + std::chrono::milliseconds(timeoutMs);
  Descriptor socket{::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0)};
  if (socket.fd < 0) return internalError(std::string("socket: ") + std::strerror(errno));
  MOEWB_RETURN_IF_ERROR(connectTo(socket.fd, path, deadline, timeoutMs));
  MOEWB_RETURN_IF_ERROR(
      sendAll(socket.fd, std::string(request) + "\n", path, deadline, timeoutMs));
  return readLine(socket.fd, path, deadline, timeoutMs);
}

}  // namespace moewb::run
