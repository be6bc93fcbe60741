// Frames, fields and POSIX socket helpers of the TCP store (see store_protocol.h).
#include "comm/launch/store_protocol.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>

namespace moewb::engine {
namespace {

std::string errnoText(int err) {
  return std::strerror(err);
}

// Waits until `fd` is ready for `events` or the deadline passes. Returns false on timeout.
Result<bool> waitReady(int fd, short events, Deadline deadline) {
  while (true) {
    pollfd p{fd, events, 0};
    const int n = ::poll(&p, 1, pollTimeoutMs(deadline));
    if (n > 0) return true;
    if (n == 0) {
      if (StoreClock::now() >= deadline) return false;
      continue;  // poll's timeout was clamped; keep waiting
    }
    if (errno != EINTR) return failedPrecondition("poll failed: " + errnoText(errno));
  }
}

}  // namespace

FrameWriter& FrameWriter::u8(uint8_t value) {
  m_payload.push_back(char(value));
  return *this;
}

FrameWriter& FrameWriter::i64(int64_t value) {
  const uint64_t bits = uint64_t(value);
  for (int shift = 56; shift >= 0; shift -= 8) m_payload.push_back(char((bits >> shift) & 0xff));
  return *this;
}

FrameWriter& FrameWriter::str(std::string_view value) {
  i64(int64_t(value.size()));
  m_payload.append(value);
  return *this;
}

Result<uint8_t> FrameReader::u8(const char* what) {
  if (m_rest.empty()) return dataLoss(std::string("truncated ") + what);
  const uint8_t value = uint8_t(m_rest[0]);
  m_rest.remove_prefix(1);
  return value;
}

Result<int64_t> FrameReader::i64(const char* what) {
  if (m_rest.size() < 8) return dataLoss(std::string("truncated ") + what);
  uint64_t bits = 0;
  for (int i = 0; i < 8; ++i) bits = (bits << 8) | uint8_t(m_rest[size_t(i)]);
  m_rest.remove_prefix(8);
  return int64_t(bits);
}

Result<std::string> FrameReader::str(const char* what) {
  MOEWB_ASSIGN_OR_RETURN(int64_t size, i64(what));
  if (size < 0 || uint64_t(size) > m_rest.size()) return dataLoss(std::string("truncated ") + what);
  std::string value(m_rest.substr(0, size_t(size)));
  m_rest.remove_prefix(size_t(size));
  return value;
}

UniqueFd& UniqueFd::operator=(UniqueFd&& other) noexcept {
  if (this != &other) reset(other.release());
  return *this;
}

int UniqueFd::release() {
  const int fd = m_fd;
  m_fd = -1;
  return fd;
}

void UniqueFd::reset(int fd) {
  if (m_fd >= 0) ::close(m_fd);
  m_fd = fd;
}

int pollTimeoutMs(Deadline deadline) {
  if (deadline == Deadline::max()) return -1;
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - StoreClock::now());
  if (left.count() <= 0) return 0;
  return left.count() > INT32_MAX ? INT32_MAX : int(left.count());
}

Deadline deadlineAfter(std::chrono::milliseconds timeout) {
  const auto now = StoreClock::now();
  if (timeout.count() < 0) return now;
  if (timeout > std::chrono::duration_cast<std::chrono::milliseconds>(Deadline::max() - now)) {
    return Deadline::max();
  }
  return now + timeout;
}

Status sendFrame(int fd, std::string_view payload, Deadline deadline, const std::string& peer) {
  std::string frame(4, '\0');
  const uint32_t size = uint32_t(payload.size());
  for (int i = 0; i < 4; ++i) frame[size_t(i)] = char((size >> (24 - 8 * i)) & 0xff);
  frame.append(payload);
  size_t sent = 0;
  while (sent < frame.size()) {
    MOEWB_ASSIGN_OR_RETURN(bool ready, waitReady(fd, POLLOUT, deadline));
    if (!ready) return cancelled("timed out sending to " + peer);
    const ssize_t n = ::send(fd, frame.data() + sent, frame.size() - sent, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return failedPrecondition("the connection to " + peer + " failed: " + errnoText(errno));
    }
    sent += size_t(n);
  }
  return Status::ok();
}

namespace {

// Reads exactly `size` bytes. Returns the number read before a clean end of stream (< size only
// when the peer closed the connection).
Result<size_t> receiveExact(int fd, char* data, size_t size, Deadline deadline,
                            const std::string& peer) {
  size_t got = 0;
  while (got < size) {
    MOEWB_ASSIGN_OR_RETURN(bool ready, waitReady(fd, POLLIN, deadline));
    if (!ready) return cancelled("timed out waiting for " + peer);
    const ssize_t n = ::recv(fd, data + got, size - got, 0);
    if (n == 0) return got;
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return failedPrecondition("the connection to " + peer + " failed: " + errnoText(errno));
    }
    got += size_t(n);
  }
  return got;
}

}  // namespace

Result<std::optional<std::string>> receiveFrame(int fd, Deadline deadline,
                                                const std::string& peer) {
  char header[4];
  MOEWB_ASSIGN_OR_RETURN(size_t got, receiveExact(fd, header, 4, deadline, peer));
  if (got == 0) return std::optional<std::string>();
  if (got < 4) return dataLoss("the connection to " + peer + " ended inside a message header");
  uint32_t size = 0;
  for (char c : header) size = (size << 8) | uint8_t(c);
  if (size > kMaxFrameBytes) {
    return dataLoss("a message of " + std::to_string(size) + " bytes from " + peer +
                    " is over the limit of " + std::to_string(kMaxFrameBytes) +
                    " bytes (is it a moewb store peer?)");
  }
  std::string payload(size, '\0');
  MOEWB_ASSIGN_OR_RETURN(size_t body, receiveExact(fd, payload.data(), size, deadline, peer));
  if (body < size) return dataLoss("the connection to " + peer + " ended inside a message");
  return std::optional<std::string>(std::move(payload));
}

Result<UniqueFd> listenTcp(uint16_t port) {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return internalError("socket() failed: " + errnoText(errno));
  const int one = 1;
  ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = htons(port);
  if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
    const int err = errno;
    if (err == EADDRINUSE) {
      return alreadyExists("TCP port " + std::to_string(port) +
                           " is already in use on this host (another job's store or a leftover "
                           "process); choose another port (MASTER_PORT / --master-port)");
    }
    return failedPrecondition("cannot bind TCP port " + std::to_string(port) + ": " +
                              errnoText(err));
  }
  if (::listen(fd.get(), 1024) != 0) {
    return failedPrecondition("cannot listen on TCP port " + std::to_string(port) + ": " +
                              errnoText(errno));
  }
  return fd;
}

uint16_t boundPort(int fd) {
  sockaddr_in addr{};
  socklen_t len = sizeof(addr);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return 0;
  return ntohs(addr.sin_port);
}

void tuneConnectedSocket(int fd) {
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
  const int idleS = 5, intervalS = 2, probes = 5;
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idleS, sizeof(idleS));
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intervalS, sizeof(intervalS));
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &probes, sizeof(probes));
}

Result<UniqueFd> connectTcp(const std::string& host, uint16_t port, Deadline deadline) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found);
  if (rc != 0) {
    return notFound("cannot resolve host '" + host + "': " + ::gai_strerror(rc));
  }
  std::string lastError = "no IPv4 address";
  for (addrinfo* ai = found; ai != nullptr; ai = ai->ai_next) {
    UniqueFd fd(
        ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol));
    if (!fd.valid()) {
      lastError = errnoText(errno);
      continue;
    }
    int err = 0;
    if (::connect(fd.get(), ai->ai_addr, ai->ai_addrlen) != 0) {
      err = errno;
      if (err == EINPROGRESS) {
        auto ready = waitReady(fd.get(), POLLOUT, deadline);
        if (!ready.isOk() || !*ready) {
          err = ETIMEDOUT;
        } else {
          socklen_t len = sizeof(err);
          ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
        }
      }
    }
    if (err != 0) {
      lastError = errnoText(err);
      continue;
    }
    tuneConnectedSocket(fd.get());
    ::freeaddrinfo(found);
    return fd;
  }
  ::freeaddrinfo(found);
  return failedPrecondition(lastError);
}

}  // namespace moewb::engine
