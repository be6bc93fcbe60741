// joinRendezvous and RendezvousSession (see rendezvous.h).
#include "comm/launch/rendezvous.h"

#include <algorithm>

#include "comm/launch/store_protocol.h"

namespace moewb::engine {
namespace {

using std::chrono::milliseconds;

milliseconds timeLeft(Deadline deadline) {
  if (deadline == Deadline::max()) return milliseconds::max() / 2;
  return std::max(milliseconds(0), std::chrono::ceil<milliseconds>(deadline - StoreClock::now()));
}

Status checkEnv(const LaunchEnv& env) {
  if (env.worldSize < 1) {
    return invalidArgument("world size " + std::to_string(env.worldSize) +
                           " is not accepted (at least 1)");
  }
  if (env.rank < 0 || env.rank >= env.worldSize) {
    return invalidArgument("rank " + std::to_string(env.rank) + " is outside 0.." +
                           std::to_string(env.worldSize - 1));
  }
  if (env.worldSize > 1 && env.masterPort == 0) {
    return invalidArgument("master port 0 is only accepted for a single rank; with " +
                           std::to_string(env.worldSize) +
                           " ranks the others could not find the store (accepted: 1..65535)");
  }
  if (env.worldSize > 1 && env.masterAddr.empty()) {
    return invalidArgument("the master address is empty; it must name the host of rank 0");
  }
  return Status::ok();
}

}  // namespace

RendezvousSession::~RendezvousSession() {
  if (m_closed || !m_server) return;
  // Rank 0 stopping on an error: drop the client first (the others see this rank die), then keep
  // the store up until they have noticed and gone, so they learn which rank failed instead of
  // only losing the store.
  m_client.reset();
  (void)m_server->waitUntilAllLeft(kStoreLingerOnFailure);
}

Result<std::string> RendezvousSession::shareFromRankZero(const std::string& key,
                                                         const std::string& value,
                                                         milliseconds timeout) {
  if (m_env.rank == 0) {
    MOEWB_RETURN_IF_ERROR(m_client->set(key, value));
    return value;
  }
  return m_client->get(key, timeout);
}

Status RendezvousSession::close(milliseconds timeout) {
  if (m_closed) return Status::ok();
  m_closed = true;
  Status said = m_client->close();
  Status waited;
  if (m_server) {
    waited = m_server->waitUntilAllLeft(timeout).withContext("rank 0 stopped the store");
    m_server->stop();
  }
  return said.isOk() ? waited : said;
}

Result<std::unique_ptr<RendezvousSession>> joinRendezvous(const LaunchEnv& env,
                                                          milliseconds timeout) {
  MOEWB_RETURN_IF_ERROR(checkEnv(env).withContext("cannot join the run"));
  const Deadline deadline = deadlineAfter(timeout);
  std::unique_ptr<RendezvousSession> session(new RendezvousSession(env));
  LaunchEnv& own = session->m_env;
  if (own.worldSize == 1) {
    // A single rank shares no port with anyone: any free port on loopback.
    own.masterAddr = "127.0.0.1";
    own.masterPort = 0;
  }
  const std::string who = "rank " + std::to_string(own.rank) + " of " +
                          std::to_string(own.worldSize) + " (" + own.source + ")";
  if (own.rank == 0) {
    auto server = TcpStoreServer::start(own.masterPort, own.worldSize);
    if (!server.isOk()) return server.status().withContext(who + " cannot host the store");
    session->m_server = std::move(server).value();
    own.masterPort = session->m_server->port();
  }
  auto client =
      TcpStoreClient::connect(own.masterAddr, own.masterPort, own.rank, timeLeft(deadline));
  if (!client.isOk()) return client.status().withContext(who + " cannot join the run");
  session->m_client = std::move(client).value();
  Status met = session->m_client->barrier("rendezvous", own.worldSize, timeLeft(deadline));
  if (!met.isOk()) {
    std::string hint;
    if (own.source == "slurm") {
      hint =
          " (under Slurm, start one task per rank with srun; a batch script that runs moewb "
          "directly starts only rank 0)";
    }
    return Status(met.code(), who + " did not meet the other ranks: " + met.message() + hint);
  }
  return session;
}

}  // namespace moewb::engine
