// TcpStoreServer: an accept thread plus one thread per connection. All store state (values,
// barriers, per-rank liveness) sits behind one mutex; blocked get/barrier calls wait on one
// condition variable that every change notifies. Cheap for the few thousand requests of a launch
// (rendezvous, id exchange, progress); not meant for per-step traffic of thousands of ranks.
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <condition_variable>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "comm/launch/store_protocol.h"
#include "comm/launch/tcp_store.h"

namespace moewb::engine {
namespace {

using std::chrono::milliseconds;

struct RankRecord {
  PeerState state = PeerState::kNotJoined;
  int64_t nonce = 0;  // identifies the client (process) that holds the rank
  int32_t connections = 0;
  std::optional<int64_t> progress;
  StoreClock::time_point changedAt{};
};

struct BarrierRecord {
  int64_t arrivals = 0;                                    // over all rounds
  std::map<int64_t, std::vector<int32_t>> arrivedByRound;  // ranks, in arrival order
};

// One accepted connection, as its serving thread sees it.
struct ConnectionState {
  int fd = -1;
  int32_t rank = -1;  // -1 until hello
  int64_t nonce = 0;
  bool saidGoodbye = false;
};

std::string rankList(const std::vector<int32_t>& ranks) {
  std::string text = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) text += (i ? ", " : "") + std::to_string(ranks[i]);
  return text;
}

}  // namespace

struct TcpStoreServer::Impl {
  int32_t worldSize = 0;
  uint16_t port = 0;
  UniqueFd listenFd;
  UniqueFd wakeRead;
  UniqueFd wakeWrite;
  std::thread acceptThread;

  std::mutex mutex;
  std::condition_variable changed;
  bool stopping = false;
  std::map<std::string, std::string> values;
  std::map<std::string, BarrierRecord> barriers;
  std::vector<RankRecord> ranks;
  std::set<int> liveFds;
  std::vector<std::thread> threads;

  // Waits on `changed` until pred() or the deadline; returns pred().
  template <typename Pred>
  bool waitUntil(std::unique_lock<std::mutex>& lock, Deadline deadline, Pred pred) {
    if (deadline == Deadline::max()) {
      changed.wait(lock, pred);
      return true;
    }
    return changed.wait_until(lock, deadline, pred);
  }

  void acceptLoop();
  void serve(int fd);
  std::string respond(ConnectionState& conn, std::string_view request);
  Result<std::string> dispatch(ConnectionState& conn, std::string_view request);
  Result<std::string> hello(ConnectionState& conn, FrameReader& in);
  Result<std::string> get(FrameReader& in);
  Result<std::string> add(FrameReader& in);
  Result<std::string> barrier(ConnectionState& conn, FrameReader& in);
  Result<std::string> peers();
  // What the store knows about every rank now; `mutex` must be held.
  std::vector<PeerStatus> peerStatusesLocked() const;
  // "; " + describePeers(...) or "" when there is nothing to say; `mutex` must be held.
  std::string peerSuffixLocked() const;
  void connectionEnded(const ConnectionState& conn);
};

void TcpStoreServer::Impl::acceptLoop() {
  while (true) {
    pollfd fds[2] = {{listenFd.get(), POLLIN, 0}, {wakeRead.get(), POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[1].revents != 0) return;
    if ((fds[0].revents & POLLIN) == 0) continue;
    const int fd = ::accept4(listenFd.get(), nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      // EMFILE and friends: back off instead of spinning; the client retries its connect.
      if (errno != EINTR && errno != ECONNABORTED) std::this_thread::sleep_for(milliseconds(10));
      continue;
    }
    tuneConnectedSocket(fd);
    std::lock_guard<std::mutex> lock(mutex);
    if (stopping) {
      ::close(fd);
      return;
    }
    liveFds.insert(fd);
    threads.emplace_back([this, fd] { serve(fd); });
  }
}

void TcpStoreServer::Impl::serve(int fd) {
  ConnectionState conn;
  conn.fd = fd;
  const std::string peer = "a store client";
  while (true) {
    auto frame = receiveFrame(fd, Deadline::max(), peer);
    if (!frame.isOk() || !frame->has_value()) break;
    const std::string response = respond(conn, **frame);
    if (!sendFrame(fd, response, deadlineAfter(milliseconds(30000)), peer).isOk()) break;
  }
  connectionEnded(conn);
}

void TcpStoreServer::Impl::connectionEnded(const ConnectionState& conn) {
  std::lock_guard<std::mutex> lock(mutex);
  liveFds.erase(conn.fd);
  ::close(conn.fd);
  if (conn.rank < 0 || stopping) return;
  RankRecord& record = ranks[size_t(conn.rank)];
  if (record.nonce != conn.nonce) return;  // a connection of an earlier holder of the rank
  record.connections -= 1;
  if (!conn.saidGoodbye) {
    if (record.state != PeerState::kDead) {
      record.state = PeerState::kDead;
      record.changedAt = StoreClock::now();
    }
  } else if (record.connections == 0 && record.state == PeerState::kAlive) {
    record.state = PeerState::kLeft;
    record.changedAt = StoreClock::now();
  }
  changed.notify_all();
}

std::string TcpStoreServer::Impl::respond(ConnectionState& conn, std::string_view request) {
  Result<std::string> result = dispatch(conn, request);
  FrameWriter out;
  if (result.isOk()) {
    out.u8(0);
    return out.payload() + *result;
  }
  out.u8(uint8_t(result.status().code())).str(result.status().message());
  return out.payload();
}

Result<std::string> TcpStoreServer::Impl::dispatch(ConnectionState& conn,
                                                   std::string_view request) {
  FrameReader in(request);
  MOEWB_ASSIGN_OR_RETURN(uint8_t op, in.u8("request"));
  if (StoreOp(op) == StoreOp::kHello) return hello(conn, in);
  if (conn.rank < 0) return failedPrecondition("the first request on a connection must be hello");
  switch (StoreOp(op)) {
    case StoreOp::kGoodbye:
      conn.saidGoodbye = true;
      return std::string();
    case StoreOp::kSet: {
      MOEWB_ASSIGN_OR_RETURN(std::string key, in.str("key"));
      MOEWB_ASSIGN_OR_RETURN(std::string value, in.str("value"));
      std::lock_guard<std::mutex> lock(mutex);
      values[key] = std::move(value);
      changed.notify_all();
      return std::string();
    }
    case StoreOp::kGet:
      return get(in);
    case StoreOp::kAdd:
      return add(in);
    case StoreOp::kBarrier:
      return barrier(conn, in);
    case StoreOp::kProgress: {
      MOEWB_ASSIGN_OR_RETURN(int64_t progress, in.i64("progress"));
      std::lock_guard<std::mutex> lock(mutex);
      ranks[size_t(conn.rank)].progress = progress;
      return std::string();
    }
    case StoreOp::kPeers:
      return peers();
    default:
      return invalidArgument("unknown store request " + std::to_string(op) +
                             " (is the client a different moewb version?)");
  }
}

Result<std::string> TcpStoreServer::Impl::hello(ConnectionState& conn, FrameReader& in) {
  MOEWB_ASSIGN_OR_RETURN(std::string magic, in.str("protocol name"));
  MOEWB_ASSIGN_OR_RETURN(int64_t rank, in.i64("rank"));
  MOEWB_ASSIGN_OR_RETURN(int64_t nonce, in.i64("client id"));
  if (magic != kStoreMagic) {
    return failedPrecondition("the client speaks '" + magic + "', this store speaks '" +
                              std::string(kStoreMagic) + "'");
  }
  if (conn.rank >= 0) return failedPrecondition("hello sent twice on one connection");
  if (rank < 0 || rank >= worldSize) {
    return invalidArgument("rank " + std::to_string(rank) + " is outside this store's world of " +
                           std::to_string(worldSize) + " ranks (accepted: 0.." +
                           std::to_string(worldSize - 1) + ")");
  }
  std::lock_guard<std::mutex> lock(mutex);
  RankRecord& record = ranks[size_t(rank)];
  if (record.state == PeerState::kAlive && record.nonce != nonce) {
    return invalidArgument("rank " + std::to_string(rank) +
                           " is already connected from another process; every process needs its "
                           "own rank (check RANK / SLURM_PROCID)");
  }
  if (record.state != PeerState::kAlive || record.nonce != nonce) {
    record = RankRecord{};
    record.state = PeerState::kAlive;
    record.nonce = nonce;
  }
  record.connections += 1;
  conn.rank = int32_t(rank);
  conn.nonce = nonce;
  changed.notify_all();
  return FrameWriter().i64(worldSize).payload();
}

Result<std::string> TcpStoreServer::Impl::get(FrameReader& in) {
  MOEWB_ASSIGN_OR_RETURN(std::string key, in.str("key"));
  MOEWB_ASSIGN_OR_RETURN(int64_t timeoutMs, in.i64("timeout"));
  std::unique_lock<std::mutex> lock(mutex);
  waitUntil(lock, deadlineAfter(milliseconds(timeoutMs)),
            [&] { return stopping || values.count(key) > 0; });
  if (stopping) return cancelled("the store stopped while get '" + key + "' was waiting");
  auto it = values.find(key);
  if (it == values.end()) {
    return cancelled("get '" + key + "' timed out after " + std::to_string(timeoutMs) +
                     " ms: no rank has set it" + peerSuffixLocked());
  }
  return FrameWriter().str(it->second).payload();
}

Result<std::string> TcpStoreServer::Impl::add(FrameReader& in) {
  MOEWB_ASSIGN_OR_RETURN(std::string key, in.str("key"));
  MOEWB_ASSIGN_OR_RETURN(int64_t delta, in.i64("delta"));
  std::lock_guard<std::mutex> lock(mutex);
  int64_t value = 0;
  if (auto it = values.find(key); it != values.end()) {
    const std::string& text = it->second;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (ec != std::errc() || end != text.data() + text.size() || text.empty()) {
      return invalidArgument("add '" + key + "': the key holds '" + text.substr(0, 40) +
                             "', not a decimal int64 counter");
    }
  }
  if (__builtin_add_overflow(value, delta, &value)) {
    return invalidArgument("add '" + key + "': the counter would overflow int64");
  }
  values[key] = std::to_string(value);
  changed.notify_all();
  return FrameWriter().i64(value).payload();
}

Result<std::string> TcpStoreServer::Impl::barrier(ConnectionState& conn, FrameReader& in) {
  MOEWB_ASSIGN_OR_RETURN(std::string name, in.str("barrier name"));
  MOEWB_ASSIGN_OR_RETURN(int64_t count, in.i64("count"));
  MOEWB_ASSIGN_OR_RETURN(int64_t timeoutMs, in.i64("timeout"));
  if (count < 1 || count > worldSize) {
    return invalidArgument("barrier '" + name + "': count " + std::to_string(count) +
                           " is outside 1.." + std::to_string(worldSize) + " (the world size)");
  }
  std::unique_lock<std::mutex> lock(mutex);
  BarrierRecord& record = barriers[name];
  const int64_t round = record.arrivals / count;
  record.arrivals += 1;
  record.arrivedByRound[round].push_back(conn.rank);
  record.arrivedByRound.erase(record.arrivedByRound.begin(), record.arrivedByRound.find(round));
  changed.notify_all();
  const bool wholeWorld = count == worldSize;
  // Ranks of the world that have not arrived in this round (whole-world barriers only).
  auto missing = [&] {
    std::vector<int32_t> out;
    if (!wholeWorld) return out;
    const std::vector<int32_t>& arrived = record.arrivedByRound[round];
    for (int32_t r = 0; r < worldSize; ++r) {
      if (std::find(arrived.begin(), arrived.end(), r) == arrived.end()) out.push_back(r);
    }
    return out;
  };
  auto deadMissing = [&] {
    std::vector<int32_t> out;
    for (int32_t r : missing()) {
      if (ranks[size_t(r)].state == PeerState::kDead) out.push_back(r);
    }
    return out;
  };
  const int64_t target = (round + 1) * count;
  waitUntil(lock, deadlineAfter(milliseconds(timeoutMs)),
            [&] { return stopping || record.arrivals >= target || !deadMissing().empty(); });
  if (record.arrivals >= target) return std::string();
  if (stopping) return cancelled("the store stopped while barrier '" + name + "' was waiting");
  const int64_t arrived = record.arrivals - round * count;
  const std::string tally =
      std::to_string(arrived) + " of " + std::to_string(count) + " ranks arrived";
  if (!deadMissing().empty()) {
    return cancelled("barrier '" + name + "' cannot complete (" + tally + ")" + peerSuffixLocked());
  }
  std::string text =
      "barrier '" + name + "' timed out after " + std::to_string(timeoutMs) + " ms: " + tally;
  if (std::vector<int32_t> absent = missing(); !absent.empty()) {
    text += "; missing " + rankList(absent);
  }
  return cancelled(text + peerSuffixLocked());
}

std::vector<PeerStatus> TcpStoreServer::Impl::peerStatusesLocked() const {
  const auto now = StoreClock::now();
  std::vector<PeerStatus> out;
  for (int32_t r = 0; r < worldSize; ++r) {
    const RankRecord& record = ranks[size_t(r)];
    PeerStatus peer;
    peer.rank = r;
    peer.state = record.state;
    peer.progress = record.progress;
    if (record.state == PeerState::kDead || record.state == PeerState::kLeft) {
      peer.secondsSinceChange = std::chrono::duration<double>(now - record.changedAt).count();
    }
    out.push_back(peer);
  }
  return out;
}

std::string TcpStoreServer::Impl::peerSuffixLocked() const {
  const std::string sentence = describePeers(peerStatusesLocked());
  return sentence.empty() ? "" : "; " + sentence;
}

Result<std::string> TcpStoreServer::Impl::peers() {
  std::lock_guard<std::mutex> lock(mutex);
  FrameWriter out;
  out.i64(worldSize);
  for (const PeerStatus& peer : peerStatusesLocked()) {
    out.i64(int64_t(peer.state))
        .u8(peer.progress.has_value() ? 1 : 0)
        .i64(peer.progress.value_or(0))
        .i64(int64_t(peer.secondsSinceChange * 1000.0));
  }
  return out.payload();
}

TcpStoreServer::TcpStoreServer(std::unique_ptr<Impl> impl) : m_impl(std::move(impl)) {}

TcpStoreServer::~TcpStoreServer() {
  stop();
}

Result<std::unique_ptr<TcpStoreServer>> TcpStoreServer::start(uint16_t port, int32_t worldSize) {
  if (worldSize < 1) {
    return invalidArgument("store world size " + std::to_string(worldSize) +
                           " is not accepted (at least 1)");
  }
  auto impl = std::make_unique<Impl>();
  impl->worldSize = worldSize;
  impl->ranks.resize(size_t(worldSize));
  auto listening = listenTcp(port);
  if (!listening.isOk()) return listening.status().withContext("cannot start the store");
  impl->listenFd = std::move(listening).value();
  impl->port = boundPort(impl->listenFd.get());
  int pipeFds[2];
  if (::pipe2(pipeFds, O_CLOEXEC) != 0) return internalError("cannot start the store: pipe failed");
  impl->wakeRead.reset(pipeFds[0]);
  impl->wakeWrite.reset(pipeFds[1]);
  Impl* raw = impl.get();
  impl->acceptThread = std::thread([raw] { raw->acceptLoop(); });
  return std::unique_ptr<TcpStoreServer>(new TcpStoreServer(std::move(impl)));
}

uint16_t TcpStoreServer::port() const {
  return m_impl->port;
}

int32_t TcpStoreServer::worldSize() const {
  return m_impl->worldSize;
}

Status TcpStoreServer::waitUntilAllLeft(std::chrono::milliseconds timeout) {
  Impl& s = *m_impl;
  std::unique_lock<std::mutex> lock(s.mutex);
  auto connected = [&] {
    std::vector<int32_t> out;
    for (int32_t r = 0; r < s.worldSize; ++r) {
      if (s.ranks[size_t(r)].state == PeerState::kAlive) out.push_back(r);
    }
    return out;
  };
  if (s.waitUntil(lock, deadlineAfter(timeout),
                  [&] { return s.stopping || connected().empty(); })) {
    return Status::ok();
  }
  return cancelled(rankList(connected()) + " still connected to the store after " +
                   std::to_string(timeout.count()) + " ms");
}

void TcpStoreServer::stop() {
  Impl& s = *m_impl;
  if (!s.acceptThread.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    s.stopping = true;
    for (int fd : s.liveFds) ::shutdown(fd, SHUT_RDWR);
    s.changed.notify_all();
  }
  const char byte = 1;
  [[maybe_unused]] ssize_t n = ::write(s.wakeWrite.get(), &byte, 1);
  s.acceptThread.join();
  std::vector<std::thread> threads;
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    threads.swap(s.threads);
  }
  for (std::thread& t : threads) t.join();
  s.listenFd.reset();
}

}  // namespace moewb::engine
