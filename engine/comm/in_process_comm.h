// In-process ranks: a Communicator whose ranks are threads of one process sharing memory.
//
// InProcessWorld creates the N communicators of one world; rank r's thread uses comm(r). Each
// collective is a rendezvous of the group's ranks on a mutex and condition variable: every rank
// posts a pointer to its arguments, waits until all have posted (with the rank's timeout), copies
// or reduces straight from the peers' buffers into its own output, then waits again until every
// rank has finished reading so that no buffer is released while a peer still reads it. Reductions
// add in group-rank order, so every rank gets bitwise identical results whatever the thread timing.
// Costs: two condition-variable rendezvous per collective (split: three) plus one copy of the
// data each rank receives; allReduce and reduceScatter use one temporary buffer of the output size.
// split() builds sub-groups (EP, FSDP groups); aborting a group also aborts every group split from
// it. This is the CPU backend's and the tests' communicator, and the oracle for the GPU ones.
//
// InProcessComm is also the base of the virtual ranks on one GPU (engine/comm/cuda/): they
// reuse its rendezvous, checks, timeouts, aborts and split, run host calls exactly as here, and
// add device-memory collectives through runDeviceCollective().
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "moewb/base/status.h"

namespace moewb::engine {

namespace detail {

struct InProcessGroup;

// What one rank posts for the collective in progress; lives on that rank's stack until the last
// rendezvous of the collective has completed.
struct InProcessPost {
  const CollectiveCall* call = nullptr;
  std::shared_ptr<InProcessGroup> created;  // split: the new group, set by its leader
};

// State a derived communicator shares among the members of one group (for example one CUDA event
// per rank); created with the group, destroyed with its last member.
struct GroupExtension {
  virtual ~GroupExtension() = default;
};

}  // namespace detail

// One rank of an in-process group. Use InProcessWorld / runRanks to make them; the constructor and
// the protected members are for derived communicators.
class InProcessComm : public Communicator {
 public:
  // The shared state of a new group whose group rank i is global rank globalRanks[i].
  static std::shared_ptr<detail::InProcessGroup> newGroup(
      std::vector<int32_t> globalRanks,
      std::shared_ptr<detail::GroupExtension> extension = nullptr);

  // Rank `rank` of `group` (0 <= rank < group size).
  InProcessComm(std::shared_ptr<detail::InProcessGroup> group, int32_t rank);

  int32_t rank() const override { return m_rank; }
  int32_t worldSize() const override;
  int32_t globalRank() const override;
  std::vector<int32_t> groupGlobalRanks() const override;
  // Aborts this group and every group split from it (any thread).
  void abort(const std::string& reason) override;

 protected:
  // Host calls run here; device calls (call.space == kDevice) go to runDeviceCollective.
  Status runCollective(const CollectiveCall& call) override;
  Result<std::unique_ptr<Communicator>> runSplit(const CollectiveCall& call) override;

  // --- Hooks for derived communicators.
  // Runs one device-memory collective. It must take part in exactly the rendezvous a host call
  // takes (arrive, then drain once when arrive succeeded) so that mixed-up calls are reported
  // instead of deadlocking. Default: kFailedPrecondition (unreached: supportsDevice() is false).
  virtual Status runDeviceCollective(const CollectiveCall& call);
  // The extension of a group split from this one, made by the new group's leader; default none.
  virtual std::shared_ptr<detail::GroupExtension> newGroupExtension(int32_t groupSize) const;
  // The communicator of rank `rank` of a group split from this one; default an InProcessComm.
  virtual std::unique_ptr<Communicator> newMember(std::shared_ptr<detail::InProcessGroup> group,
                                                  int32_t rank) const;

  // --- The rendezvous, for derived communicators.
  // First rendezvous: posts this rank's arguments and waits (up to timeout()) for every peer. On
  // timeout it aborts the group with kCancelled naming the missing ranks; an aborted group fails
  // at once. After an error nobody reads the posts, so the caller may return at once.
  Status arrive(const detail::InProcessPost& post, const CollectiveCall& call);
  // Later rendezvous: waits, without timeout and ignoring aborts, until every rank has arrived.
  // Every rank that passed arrive() reaches it without blocking, so it always completes; it keeps
  // posted buffers alive while peers still read them.
  void drain();
  // Cross-rank checks on the posted arguments (same op, sequence number, element type, memory
  // space, sizes; each rank's local argument error); every rank computes the same answer.
  // Call between arrive() and drain().
  Status checkAll(const CollectiveCall& call) const;
  // The arguments group rank r posted; valid between arrive() and drain().
  const CollectiveCall& peerCall(int32_t r) const;
  // kCancelled with the abort reason when this group has been aborted, else ok.
  Status checkNotAborted() const;
  // This group's extension (nullptr when it has none).
  detail::GroupExtension* groupExtension() const;
  // "rank r" or "rank r (global rank g)".
  std::string describeRank(int32_t r) const;

 private:
  void compute(const CollectiveCall& call, std::vector<char>& scratch) const;
  Result<std::unique_ptr<Communicator>> finishSplit(const CollectiveCall& call,
                                                    detail::InProcessPost& post);

  std::shared_ptr<detail::InProcessGroup> m_group;
  int32_t m_rank;
};

class InProcessWorld {
 public:
  // Creates worldSize >= 1 communicators (ranks 0..worldSize-1), each with `timeout`.
  explicit InProcessWorld(int32_t worldSize,
                          std::chrono::milliseconds timeout = Communicator::kDefaultTimeout);
  ~InProcessWorld();
  InProcessWorld(const InProcessWorld&) = delete;
  InProcessWorld& operator=(const InProcessWorld&) = delete;

  int32_t worldSize() const { return int32_t(m_comms.size()); }
  // Rank r's communicator; use it from one thread at a time. Lives as long as the world.
  Communicator& comm(int32_t rank);

 private:
  std::vector<std::unique_ptr<Communicator>> m_comms;
};

// Runs fn(comm) on worldSize threads, one per rank of a fresh InProcessWorld, and joins them.
// A rank that returns an error (or throws) aborts the world, so peers blocked in a collective
// return at once instead of waiting for the timeout. Returns ok when every rank returned ok,
// otherwise the first error in time, prefixed with "rank r". worldSize < 1 is kInvalidArgument.
Status runRanks(int32_t worldSize, const std::function<Status(Communicator&)>& fn,
                std::chrono::milliseconds timeout = Communicator::kDefaultTimeout);

// The thread runner behind runRanks, for other communicators of one world: runs fn(*comms[r]) on
// one thread per entry and joins them; a rank that returns an error (or throws) calls abort() on
// its communicator. Returns ok or the first error in time, prefixed with "rank r".
Status runOnRankThreads(std::span<Communicator* const> comms,
                        const std::function<Status(Communicator&)>& fn);

}  // namespace moewb::engine
