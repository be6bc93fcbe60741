// Rendezvous: how the processes of a multi-process run find out who they are and meet.
//
// A rank learns its place from the environment its launcher set (launchEnvFromEnvironment):
// `moewb launch` and torchrun set RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR and
// MASTER_PORT; under Slurm, srun sets SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID and
// SLURM_NTASKS_PER_NODE (or SLURM_TASKS_PER_NODE) and the batch script exports MASTER_ADDR (the
// first host of the job). The torchrun names win when both are present (torchrun inside srun).
//
// The ranks then meet (joinRendezvous): rank 0 starts a TcpStoreServer on MASTER_PORT on all
// interfaces, every rank (rank 0 too) connects a TcpStoreClient to MASTER_ADDR:MASTER_PORT, and
// all pass the barrier "rendezvous". Nothing else is needed for several hosts.
//
// Through the session's store the ranks then share what a communicator needs. The NCCL unique id:
// rank 0 calls ncclGetUniqueId and shareFromRankZero("nccl/world", id bytes) (a set), the others
// shareFromRankZero("nccl/world", {}) (a get); every rank then calls ncclCommInitRank. The owner
// of the communicator calls client().watch(...) and aborts the communicator (Communicator::abort)
// from the callback, so a rank that dies makes the others stop with its rank named, and calls
// client().setProgress(seq) after each collective so a hang can name the rank that is behind.
//
// Ending: a rank that finishes normally calls close() after its last collective; a session
// destroyed without close() looks to the other ranks like a crashed rank (which is what they must
// see when this rank stops on an error).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "comm/launch/tcp_store.h"
#include "moewb/base/status.h"

namespace moewb::engine {

// Where this process sits in a multi-process run.
struct LaunchEnv {
  int32_t rank = 0;            // global rank, 0..worldSize-1
  int32_t worldSize = 1;       // processes in the run
  int32_t localRank = 0;       // rank on this host (picks the GPU), 0..localWorldSize-1
  int32_t localWorldSize = 1;  // processes on this host
  std::string masterAddr;      // host (name or IPv4 address) of rank 0, where the store listens
  uint16_t masterPort = 0;     // TCP port of the store
  std::string source;          // "torchrun-style env" or "slurm": where the values came from
};

inline constexpr uint16_t kDefaultMasterPort = 29500;  // torchrun's default
// How long rank 0's store outlives a session destroyed without close() (see ~RendezvousSession).
inline constexpr std::chrono::milliseconds kStoreLingerOnFailure{5000};

// Reads the launch environment through `lookup` (getenv-like: nullptr for an unset variable).
// torchrun names when RANK or WORLD_SIZE is set: RANK and WORLD_SIZE required, LOCAL_RANK /
// LOCAL_WORLD_SIZE default to RANK / WORLD_SIZE (all ranks on one host), MASTER_ADDR required when
// WORLD_SIZE > 1 (else 127.0.0.1), MASTER_PORT default 29500. Else Slurm names when SLURM_PROCID is
// set: SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID and (when SLURM_NTASKS > 1) MASTER_ADDR required,
// the local world size from SLURM_NTASKS_PER_NODE, else SLURM_TASKS_PER_NODE ("4(x2),3", the entry
// of node SLURM_NODEID), one of them required.
// Returns nullopt when neither set is present (a single-process run). Errors: kInvalidArgument
// naming the variable, its value and what is accepted (integers in range, rank < world size,
// local rank < local world size <= world size, port 1..65535).
Result<std::optional<LaunchEnv>> launchEnvFromVariables(
    const std::function<const char*(const char*)>& lookup);

// launchEnvFromVariables over the process environment (std::getenv).
Result<std::optional<LaunchEnv>> launchEnvFromEnvironment();

// One rank's membership in a run: its environment, its store client and, on rank 0, the store.
class RendezvousSession {
 public:
  // Without close(): closes the client without goodbye (peers see this rank as dead); on rank 0
  // then keeps the store up until every other rank has left or died, at most
  // kStoreLingerOnFailure, so their watches can name the rank that failed, and stops it.
  ~RendezvousSession();
  RendezvousSession(const RendezvousSession&) = delete;
  RendezvousSession& operator=(const RendezvousSession&) = delete;

  const LaunchEnv& env() const { return m_env; }
  TcpStoreClient& client() { return *m_client; }
  // The store server; non-null on rank 0 only.
  TcpStoreServer* server() { return m_server.get(); }

  // Rank 0 sets `key` to `value` and returns it; other ranks ignore `value` and return the value
  // rank 0 set, waiting up to `timeout` (errors as TcpStoreClient::get). Used for the NCCL id.
  Result<std::string> shareFromRankZero(const std::string& key, const std::string& value,
                                        std::chrono::milliseconds timeout);

  // Leaves cleanly: stops any watch and says goodbye; on rank 0 then waits up to `timeout` for
  // every other rank to leave or die before stopping the store (so ranks still finishing do not
  // see the store vanish). Error kCancelled naming the ranks still connected (the store is stopped
  // anyway). Idempotent.
  Status close(std::chrono::milliseconds timeout = std::chrono::milliseconds(30000));

 private:
  friend Result<std::unique_ptr<RendezvousSession>> joinRendezvous(const LaunchEnv& env,
                                                                   std::chrono::milliseconds);
  explicit RendezvousSession(LaunchEnv env) : m_env(std::move(env)) {}

  LaunchEnv m_env;
  std::unique_ptr<TcpStoreServer> m_server;  // declared first: destroyed after the client
  std::unique_ptr<TcpStoreClient> m_client;
  bool m_closed = false;
};

// Joins the run described by `env`: on rank 0 starts the store on env.masterPort, then connects
// this rank's client and waits at the barrier "rendezvous" for all env.worldSize ranks, all within
// `timeout`. Errors: kInvalidArgument for masterPort 0 with worldSize > 1 (the others could not
// find the store); kAlreadyExists when rank 0's port is taken; kCancelled when the store cannot
// be reached or ranks are missing at the barrier (naming them; under Slurm with a hint to start
// one task per rank with srun).
Result<std::unique_ptr<RendezvousSession>> joinRendezvous(const LaunchEnv& env,
                                                          std::chrono::milliseconds timeout);

}  // namespace moewb::engine
