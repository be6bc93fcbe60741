// TcpStoreClient: two connections to the store (blocking calls / everything else), each behind
// its own mutex, and an optional watch thread that polls the peers' liveness.
#include <unistd.h>

#include <condition_variable>
#include <mutex>
#include <random>
#include <thread>

#include "comm/launch/store_protocol.h"
#include "comm/launch/tcp_store.h"

namespace moewb::engine {
namespace {

using std::chrono::milliseconds;

// How long a non-blocking request may take before the store counts as hung.
constexpr milliseconds kQuickCallTimeout{30000};
// Slack on top of a blocking call's own timeout for the server's answer to arrive.
constexpr milliseconds kBlockingSlack{10000};
constexpr milliseconds kWatchPeriod{100};

int64_t randomClientId() {
  std::random_device device;
  const uint64_t high = device();
  const uint64_t low = device();
  return int64_t(((high << 32) | low) ^ (uint64_t(::getpid()) << 16));
}

}  // namespace

struct TcpStoreClient::Connection {
  std::mutex mutex;
  UniqueFd fd;
};

struct TcpStoreClient::Watch {
  std::mutex mutex;
  std::condition_variable wake;
  bool started = false;
  bool stop = false;
  std::thread thread;
};

TcpStoreClient::TcpStoreClient(std::string host, uint16_t port, int32_t rank)
    : m_host(std::move(host)),
      m_port(port),
      m_address(m_host + ":" + std::to_string(port)),
      m_rank(rank),
      m_blocking(std::make_unique<Connection>()),
      m_quick(std::make_unique<Connection>()),
      m_watch(std::make_unique<Watch>()) {}

TcpStoreClient::~TcpStoreClient() {
  stopWatch();
}

Result<std::unique_ptr<TcpStoreClient>> TcpStoreClient::connect(const std::string& host,
                                                                uint16_t port, int32_t rank,
                                                                milliseconds timeout) {
  std::unique_ptr<TcpStoreClient> client(new TcpStoreClient(host, port, rank));
  const Deadline deadline = deadlineAfter(timeout);
  const int64_t clientId = randomClientId();
  for (Connection* connection : {client->m_blocking.get(), client->m_quick.get()}) {
    std::string lastError;
    while (!connection->fd.valid()) {
      const Deadline attemptDeadline = std::min(deadline, deadlineAfter(milliseconds(2000)));
      auto fd = connectTcp(host, port, attemptDeadline);
      if (fd.isOk()) {
        connection->fd = std::move(fd).value();
        break;
      }
      lastError = fd.status().message();
      if (StoreClock::now() >= deadline) {
        return cancelled("cannot reach the store at " + client->m_address + " within " +
                         std::to_string(timeout.count()) + " ms (last error: " + lastError +
                         "); check that rank 0 is running and that MASTER_ADDR and MASTER_PORT "
                         "name its host and port");
      }
      std::this_thread::sleep_for(milliseconds(50));
    }
    const std::string hello = FrameWriter()
                                  .u8(uint8_t(StoreOp::kHello))
                                  .str(kStoreMagic)
                                  .i64(rank)
                                  .i64(clientId)
                                  .payload();
    auto answer = client->call(*connection, hello, deadline, "hello");
    if (!answer.isOk()) {
      if (answer.status().code() == StatusCode::kDataLoss) {
        return failedPrecondition("the server at " + client->m_address +
                                  " does not answer like a moewb store (" +
                                  answer.status().message() + ")");
      }
      return answer.status();
    }
    FrameReader in(*answer);
    MOEWB_ASSIGN_OR_RETURN(int64_t worldSize, in.i64("world size"));
    client->m_worldSize = int32_t(worldSize);
  }
  return client;
}

Result<std::string> TcpStoreClient::call(Connection& connection, const std::string& request,
                                         Deadline deadline, const std::string& what) {
  std::lock_guard<std::mutex> lock(connection.mutex);
  const std::string context = what + " on the store at " + m_address;
  if (!connection.fd.valid()) {
    return failedPrecondition(context + ": the connection is closed");
  }
  const std::string peer = "the store at " + m_address;
  if (Status sent = sendFrame(connection.fd.get(), request, deadline, peer); !sent.isOk()) {
    connection.fd.reset();
    return sent.withContext(context);
  }
  auto frame = receiveFrame(connection.fd.get(), deadline, peer);
  if (!frame.isOk()) {
    connection.fd.reset();  // a late answer would be out of step with the next request
    return frame.status().withContext(context);
  }
  if (!frame->has_value()) {
    connection.fd.reset();
    return failedPrecondition(context +
                              ": the store closed the connection (the process hosting it, rank 0 "
                              "under a launcher, has probably exited)");
  }
  const std::string& payload = **frame;
  FrameReader in(payload);
  MOEWB_ASSIGN_OR_RETURN(uint8_t code, in.u8("response status"));
  if (code == 0) return payload.substr(1);
  if (code > uint8_t(StatusCode::kInternal)) {
    return dataLoss(context + ": unknown response status " + std::to_string(code));
  }
  MOEWB_ASSIGN_OR_RETURN(std::string message, in.str("error message"));
  return Status(StatusCode(code), "store at " + m_address + ": " + message);
}

Result<std::string> TcpStoreClient::quickCall(const std::string& request, const std::string& what) {
  return call(*m_quick, request, deadlineAfter(kQuickCallTimeout), what);
}

Status TcpStoreClient::set(const std::string& key, std::string_view value) {
  const std::string request =
      FrameWriter().u8(uint8_t(StoreOp::kSet)).str(key).str(value).payload();
  return quickCall(request, "set '" + key + "'").status();
}

Result<std::string> TcpStoreClient::get(const std::string& key, milliseconds timeout) {
  const std::string request =
      FrameWriter().u8(uint8_t(StoreOp::kGet)).str(key).i64(timeout.count()).payload();
  auto answer =
      call(*m_blocking, request, deadlineAfter(timeout + kBlockingSlack), "get '" + key + "'");
  if (!answer.isOk()) return answer.status();
  FrameReader in(*answer);
  return in.str("value");
}

Result<int64_t> TcpStoreClient::add(const std::string& key, int64_t delta) {
  const std::string request =
      FrameWriter().u8(uint8_t(StoreOp::kAdd)).str(key).i64(delta).payload();
  MOEWB_ASSIGN_OR_RETURN(std::string answer, quickCall(request, "add '" + key + "'"));
  FrameReader in(answer);
  return in.i64("counter");
}

Status TcpStoreClient::barrier(const std::string& name, int32_t count, milliseconds timeout) {
  const std::string request = FrameWriter()
                                  .u8(uint8_t(StoreOp::kBarrier))
                                  .str(name)
                                  .i64(count)
                                  .i64(timeout.count())
                                  .payload();
  auto answer =
      call(*m_blocking, request, deadlineAfter(timeout + kBlockingSlack), "barrier '" + name + "'");
  return answer.status();
}

Status TcpStoreClient::setProgress(int64_t progress) {
  const std::string request = FrameWriter().u8(uint8_t(StoreOp::kProgress)).i64(progress).payload();
  return quickCall(request, "set progress").status();
}

Result<std::vector<PeerStatus>> TcpStoreClient::peers() {
  MOEWB_ASSIGN_OR_RETURN(std::string answer,
                         quickCall(FrameWriter().u8(uint8_t(StoreOp::kPeers)).payload(), "peers"));
  FrameReader in(answer);
  MOEWB_ASSIGN_OR_RETURN(int64_t worldSize, in.i64("world size"));
  std::vector<PeerStatus> out;
  for (int64_t r = 0; r < worldSize; ++r) {
    PeerStatus peer;
    peer.rank = int32_t(r);
    MOEWB_ASSIGN_OR_RETURN(int64_t state, in.i64("peer state"));
    MOEWB_ASSIGN_OR_RETURN(uint8_t hasProgress, in.u8("peer progress"));
    MOEWB_ASSIGN_OR_RETURN(int64_t progress, in.i64("peer progress"));
    MOEWB_ASSIGN_OR_RETURN(int64_t sinceMs, in.i64("peer time"));
    if (state < 0 || state > int64_t(PeerState::kLeft)) {
      return dataLoss("the store at " + m_address + " sent peer state " + std::to_string(state));
    }
    peer.state = PeerState(state);
    if (hasProgress != 0) peer.progress = progress;
    peer.secondsSinceChange = double(sinceMs) / 1000.0;
    out.push_back(peer);
  }
  return out;
}

Result<std::vector<int32_t>> TcpStoreClient::deadRanks() {
  MOEWB_ASSIGN_OR_RETURN(std::vector<PeerStatus> all, peers());
  std::vector<int32_t> dead;
  for (const PeerStatus& peer : all) {
    if (peer.state == PeerState::kDead) dead.push_back(peer.rank);
  }
  return dead;
}

std::string TcpStoreClient::describeMissingPeers() {
  auto all = peers();
  if (!all.isOk()) return "cannot ask the store about the other ranks: " + all.status().message();
  return describePeers(*all);
}

Status TcpStoreClient::watch(DeathCallback callback) {
  std::lock_guard<std::mutex> lock(m_watch->mutex);
  if (m_watch->started) {
    return failedPrecondition("a watch already runs on this store client (rank " +
                              std::to_string(m_rank) + ")");
  }
  {
    std::lock_guard<std::mutex> connectionLock(m_quick->mutex);
    if (!m_quick->fd.valid()) {
      return failedPrecondition("watch: the connection to the store at " + m_address +
                                " is closed");
    }
  }
  m_watch->started = true;
  m_watch->thread = std::thread([this, callback = std::move(callback)] { watchLoop(callback); });
  return Status::ok();
}

void TcpStoreClient::watchLoop(DeathCallback callback) {
  std::vector<bool> reported;
  while (true) {
    auto all = peers();
    {
      std::lock_guard<std::mutex> lock(m_watch->mutex);
      if (m_watch->stop) return;
    }
    if (!all.isOk()) {
      callback(-1, "the store at " + m_address +
                       " became unreachable; the rank hosting it (rank 0 under a launcher) has "
                       "probably died (" +
                       all.status().message() + ")");
      return;
    }
    reported.resize(all->size(), false);
    for (const PeerStatus& peer : *all) {
      if (peer.state != PeerState::kDead || reported[size_t(peer.rank)]) continue;
      reported[size_t(peer.rank)] = true;
      callback(peer.rank, describePeers(std::span<const PeerStatus>(&peer, 1)));
    }
    std::unique_lock<std::mutex> lock(m_watch->mutex);
    if (m_watch->wake.wait_for(lock, kWatchPeriod, [this] { return m_watch->stop; })) return;
  }
}

void TcpStoreClient::stopWatch() {
  {
    std::lock_guard<std::mutex> lock(m_watch->mutex);
    m_watch->stop = true;
  }
  m_watch->wake.notify_all();
  if (m_watch->thread.joinable()) m_watch->thread.join();
}

Status TcpStoreClient::close() {
  stopWatch();
  Status first;
  const std::string goodbye = FrameWriter().u8(uint8_t(StoreOp::kGoodbye)).payload();
  for (Connection* connection : {m_quick.get(), m_blocking.get()}) {
    {
      std::lock_guard<std::mutex> lock(connection->mutex);
      if (!connection->fd.valid()) continue;
    }
    Status said = call(*connection, goodbye, deadlineAfter(milliseconds(5000)), "goodbye").status();
    if (first.isOk()) first = said;
    std::lock_guard<std::mutex> lock(connection->mutex);
    connection->fd.reset();
  }
  return first;
}

}  // namespace moewb::engine
