// TcpStore: the small key-value store over TCP where the ranks of a multi-process run meet.
//
// One process (rank 0 under joinRendezvous, rendezvous.h) runs a TcpStoreServer; every rank,
// the server's own included, connects a TcpStoreClient. Through it the ranks share bytes (the NCCL
// unique id), count (add), wait for each other (barrier) and watch each other's liveness.
//
// Operations: set(key, bytes), get(key, timeout) (waits until some rank sets the key), add(key,
// delta) (an int64 counter), barrier(name, count, timeout) (reusable: its k-th use waits for the
// k-th round of `count` arrivals), setProgress(n) (a rank's last finished collective or step, used
// to name stragglers), and the liveness queries peers(), deadRanks(), describeMissingPeers(),
// watch(callback).
//
// Liveness: the server knows each rank's connections. A rank whose connection drops without a
// goodbye (close()) is dead: its process exited or was killed, or a destructor ran without close()
// (so a rank that fails with an error looks dead too, which is what its peers need to know). A
// rank that said goodbye has left. A vanished host (no FIN) is noticed by TCP keepalive within
// ~15 s. A barrier of the whole world fails as soon as a rank that has not arrived is dead.
//
// Costs: the server runs one thread per connection (two per rank) plus an accept thread; every
// operation is one request/response round trip; values live in memory until the server stops.
// Protocol: store_protocol.h (length-prefixed frames, no dependencies beyond POSIX sockets).
//
// Errors: every call returns a Status naming the operation, the key and the store's host:port.
// Timeouts are StatusCode::kCancelled, as for collectives (communicator.h).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "moewb/base/status.h"

namespace moewb::engine {

enum class PeerState {
  kNotJoined,  // never connected to the store
  kAlive,      // connected
  kDead,       // a connection dropped without goodbye
  kLeft,       // said goodbye on every connection
};

// What the store knows about one rank.
struct PeerStatus {
  int32_t rank = 0;
  PeerState state = PeerState::kNotJoined;
  std::optional<int64_t> progress;  // last setProgress() value; empty when never set
  double secondsSinceChange = 0;    // s since it died or left (0 for other states)
};

// One sentence on the peers worth naming, or "" when every joined rank is alive and level:
// dead ranks first ("rank 2 died (its connection to the store closed 0.8 s ago)"), then ranks that
// left ("rank 1 left (closed its store connection 2.0 s ago)"), then ranks that never joined, then
// alive ranks behind the most advanced alive rank ("rank 3 is alive but behind (progress 41,
// others 42)"); parts joined by "; ". Pure function.
std::string describePeers(std::span<const PeerStatus> peers);

// The store's server. Thread-safe; stops on destruction.
class TcpStoreServer {
 public:
  // Listens on `port` on all IPv4 interfaces (0 = any free port; see port()) for a world of
  // `worldSize` ranks and serves from background threads. Errors: kInvalidArgument for worldSize
  // < 1; kAlreadyExists when the port is in use; kFailedPrecondition for other socket errors.
  static Result<std::unique_ptr<TcpStoreServer>> start(uint16_t port, int32_t worldSize);

  ~TcpStoreServer();
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;

  // The port it listens on (the chosen one when started with 0).
  uint16_t port() const;
  int32_t worldSize() const;

  // Waits until every rank has left or died (so stopping the server will not look like a crash
  // of this host to ranks still connected). Error kCancelled naming the ranks still connected
  // after `timeout`.
  Status waitUntilAllLeft(std::chrono::milliseconds timeout);

  // Closes the listening socket and every connection (clients see "the store closed"), wakes
  // blocked get/barrier calls and joins the threads. Idempotent.
  void stop();

 private:
  struct Impl;
  explicit TcpStoreServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> m_impl;
};

// One rank's connection to the store. All methods are thread-safe. Internally two connections:
// one for the blocking calls (get, barrier; two threads calling them wait for each other) and one
// for everything else, so liveness queries and set/add never wait behind a blocked get.
class TcpStoreClient {
 public:
  // Called by watch() once per newly dead rank, on the watch thread; rank -1 when the store itself
  // became unreachable (its host, rank 0 under joinRendezvous, has probably died), after which
  // the watch ends. `reason` is a sentence naming the rank. It must not call close() or destroy
  // the client.
  using DeathCallback = std::function<void(int32_t rank, std::string reason)>;

  // Connects to the store at host:port as `rank`, retrying until the server is up or `timeout`
  // passes. Errors: kCancelled naming host:port and the last error when the server never
  // answered; kInvalidArgument when the server refuses the rank (outside its world, or already
  // connected from another process); kFailedPrecondition when the peer is not a moewb store.
  static Result<std::unique_ptr<TcpStoreClient>> connect(const std::string& host, uint16_t port,
                                                         int32_t rank,
                                                         std::chrono::milliseconds timeout);

  // Stops the watch and closes the connections without a goodbye: peers see this rank as dead.
  ~TcpStoreClient();
  TcpStoreClient(const TcpStoreClient&) = delete;
  TcpStoreClient& operator=(const TcpStoreClient&) = delete;

  int32_t rank() const { return m_rank; }
  int32_t worldSize() const { return m_worldSize; }
  // "host:port" of the store.
  const std::string& address() const { return m_address; }

  // Sets `key` to `value` (any bytes), replacing an earlier value, and wakes its waiters.
  Status set(const std::string& key, std::string_view value);
  // The value of `key`, waiting until some rank sets it. Error kCancelled after `timeout`, with
  // the key, the time and what the store knows about missing peers (describePeers) in the message.
  Result<std::string> get(const std::string& key, std::chrono::milliseconds timeout);
  // Adds `delta` to the int64 counter `key` (0 when unset) and returns the new value. Error
  // kInvalidArgument when the key holds something other than a decimal integer.
  Result<int64_t> add(const std::string& key, int64_t delta);
  // Waits until `count` ranks (every caller passes the same count, 1..worldSize) have called
  // barrier(name) in this round. Errors: kCancelled after `timeout` naming the ranks that did
  // not arrive (when count == worldSize) and what is known about them (describePeers); kCancelled
  // at once when count == worldSize and a rank that has not arrived is dead.
  Status barrier(const std::string& name, int32_t count, std::chrono::milliseconds timeout);
  // Records this rank's progress (its last finished collective sequence number or step).
  Status setProgress(int64_t progress);

  // What the store knows about every rank, in rank order.
  Result<std::vector<PeerStatus>> peers();
  // Ranks whose connection dropped without goodbye, ascending.
  Result<std::vector<int32_t>> deadRanks();
  // describePeers(peers()), or a sentence saying the store is unreachable.
  std::string describeMissingPeers();

  // Starts a background thread that polls peers() every 100 ms and calls `callback` once per rank
  // that is newly dead (see DeathCallback). Error kFailedPrecondition when a watch already runs or
  // the client is closed.
  Status watch(DeathCallback callback);

  // Stops the watch and says goodbye on both connections: peers see this rank as left. Call it
  // when the rank finishes normally. A get/barrier in progress on another thread finishes first.
  // Idempotent; later calls on the client fail.
  Status close();

 private:
  struct Connection;
  TcpStoreClient(std::string host, uint16_t port, int32_t rank);
  Result<std::string> call(Connection& connection, const std::string& request,
                           std::chrono::steady_clock::time_point deadline, const std::string& what);
  Result<std::string> quickCall(const std::string& request, const std::string& what);
  void stopWatch();
  void watchLoop(DeathCallback callback);

  std::string m_host;
  uint16_t m_port = 0;
  std::string m_address;
  int32_t m_rank = 0;
  int32_t m_worldSize = 0;
  std::unique_ptr<Connection> m_blocking;  // get, barrier
  std::unique_ptr<Connection> m_quick;     // everything else
  struct Watch;
  std::unique_ptr<Watch> m_watch;
};

}  // namespace moewb::engine
