// The wire protocol of the TCP store (tcp_store.h) and the socket helpers both ends share.
//
// Framing: every message is a 4-byte big-endian payload length followed by the payload (at most
// kMaxFrameBytes). A request payload is one op byte (StoreOp) and its fields; a response payload is
// one status byte (0 = ok, else a StatusCode) followed by the op's result fields when ok, or by one
// string field (the error message) when not. Fields: int64 as 8 bytes big-endian, strings and byte
// values as an int64 length and the raw bytes. A connection carries one request at a time: the
// client sends a request and reads its response before sending the next.
//
// The first request on every connection is kHello (magic kStoreMagic, rank, a per-client nonce);
// the answer carries the world size. Everything else needs a hello first.
//
// Socket helpers: IPv4 TCP only (MASTER_ADDR may be a host name or a dotted address), TCP_NODELAY
// and keepalive (a host that vanishes without closing its sockets is noticed within ~15 s),
// MSG_NOSIGNAL writes (a closed peer is an error, never SIGPIPE). Every blocking read or write
// takes a deadline; Deadline::max() waits forever.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "moewb/base/status.h"

namespace moewb::engine {

using StoreClock = std::chrono::steady_clock;
using Deadline = StoreClock::time_point;

inline constexpr std::string_view kStoreMagic = "moewb-store/1";
inline constexpr uint32_t kMaxFrameBytes = 64u << 20;

enum class StoreOp : uint8_t {
  kHello = 1,     // magic, rank, nonce -> worldSize
  kGoodbye = 2,   // -> (nothing); the rank leaves cleanly once all its connections said goodbye
  kSet = 3,       // key, value -> (nothing)
  kGet = 4,       // key, timeoutMs -> value (kCancelled after timeoutMs without the key)
  kAdd = 5,       // key, delta -> new value
  kBarrier = 6,   // name, count, timeoutMs -> (nothing)
  kProgress = 7,  // progress -> (nothing)
  kPeers = 8,     // -> worldSize, then per rank: state, hasProgress, progress, msSinceChange
};

// Builds a payload field by field.
class FrameWriter {
 public:
  FrameWriter& u8(uint8_t value);
  FrameWriter& i64(int64_t value);
  FrameWriter& str(std::string_view value);
  const std::string& payload() const { return m_payload; }

 private:
  std::string m_payload;
};

// Reads a payload field by field; every read fails with kDataLoss ("truncated <what>") past the
// end.
class FrameReader {
 public:
  explicit FrameReader(std::string_view payload) : m_rest(payload) {}
  Result<uint8_t> u8(const char* what);
  Result<int64_t> i64(const char* what);
  Result<std::string> str(const char* what);
  bool atEnd() const { return m_rest.empty(); }

 private:
  std::string_view m_rest;
};

// Owns a file descriptor; closes it on destruction.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : m_fd(fd) {}
  ~UniqueFd() { reset(); }
  UniqueFd(UniqueFd&& other) noexcept : m_fd(other.release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept;
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;

  int get() const { return m_fd; }
  bool valid() const { return m_fd >= 0; }
  int release();
  void reset(int fd = -1);

 private:
  int m_fd = -1;
};

// Writes one frame. Errors: kCancelled past the deadline; kFailedPrecondition when the peer closed
// the connection or another socket error; messages name `peer`.
Status sendFrame(int fd, std::string_view payload, Deadline deadline, const std::string& peer);

// Reads one frame's payload, or nullopt when the peer closed the connection cleanly between frames.
// Errors: kCancelled past the deadline; kDataLoss for a frame over kMaxFrameBytes or a connection
// that ended inside a frame; kFailedPrecondition for a socket error (reset by the peer, ...).
Result<std::optional<std::string>> receiveFrame(int fd, Deadline deadline, const std::string& peer);

// A listening IPv4 socket on all interfaces; port 0 picks a free port. Errors name the port
// (kAlreadyExists when it is in use).
Result<UniqueFd> listenTcp(uint16_t port);

// The local port a socket is bound to (0 when it cannot be read).
uint16_t boundPort(int fd);

// One connection attempt to host:port, bounded by `deadline`. Errors carry the reason only
// ("connection refused", "cannot resolve host 'x': ..."); the caller adds context and retries.
Result<UniqueFd> connectTcp(const std::string& host, uint16_t port, Deadline deadline);

// TCP_NODELAY and keepalive on a connected socket.
void tuneConnectedSocket(int fd);

// Milliseconds from now to the deadline, clamped to [0, INT32_MAX]; -1 for Deadline::max().
int pollTimeoutMs(Deadline deadline);

// A deadline `timeout` from now that never overflows (a huge timeout becomes Deadline::max()).
Deadline deadlineAfter(std::chrono::milliseconds timeout);

}  // namespace moewb::engine
