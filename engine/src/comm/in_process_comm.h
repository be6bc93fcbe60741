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
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "moewb/base/status.h"

namespace moewb::engine {

namespace detail {
struct InProcessGroup;
}

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

}  // namespace moewb::engine
