// Virtual ranks on one GPU: N ranks as threads of one process sharing one device, each rank with
// its own streams and buffers, so the whole parallel path (EP all-to-all, FSDP gathers and
// scatters) runs and is traced on a single GPU.
//
// VirtualGpuWorld creates the N communicators of one world; rank r's thread uses comm(r). Host
// calls behave exactly as the in-process ranks (comm/in_process_comm.h: same rendezvous, checks,
// timeouts, aborts, split). Device calls ("...Device", stream-ordered) do the same host rendezvous
// of the ranks' pointers and streams, then each rank fills its own output from the peers' device
// buffers on its own stream, ordered by CUDA events: at arrival each rank records a "ready" event
// on its stream (its inputs are written once it fires); readers make their stream wait for the
// peers' ready events; after queueing its reads each rank records a "done" event, and after the
// second rendezvous every rank's stream waits for all peers' done events, so no later work on any
// stream overwrites a buffer a peer still reads. Reductions (reduceScatter, allReduce; sum or max)
// run one kernel per rank that reads the n peers' blocks and adds them in group-rank order, with
// fp32 accumulation for bf16, so every rank's result is bitwise identical; in-place allReduce
// reduces into a temporary (cudaMallocAsync on the call's stream) copied back after the done
// waits. Copies are cudaMemcpyAsync device-to-device, one per peer block (zero counts skipped).
//
// Costs per device collective: two condition-variable rendezvous on the host, n-1 event waits
// twice, one event record twice; the data each rank receives is copied once (reductions: read n
// times). The host call returns once the work is queued.
//
// Ordering: a rank may pass a different stream to every call; the events follow. Device calls
// make deviceOrdinal current on the calling thread. Timeouts: a rank that never calls a collective
// makes the others fail at the host rendezvous with kCancelled naming it (as the in-process ranks);
// synchronizeDevice(stream) polls the stream up to timeout() and aborts the group when it does not
// finish. Device reductions accept groups of at most 64 ranks.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "moewb/base/status.h"

namespace moewb::engine {

class VirtualGpuWorld {
 public:
  // Creates worldSize >= 1 communicators (ranks 0..worldSize-1) on device `deviceOrdinal`, each
  // with `timeout`. Nothing touches the device until the first device call (so the world may be
  // made on any thread); CUDA errors surface from the calls.
  VirtualGpuWorld(int32_t worldSize, int deviceOrdinal,
                  std::chrono::milliseconds timeout = Communicator::kDefaultTimeout);
  ~VirtualGpuWorld();
  VirtualGpuWorld(const VirtualGpuWorld&) = delete;
  VirtualGpuWorld& operator=(const VirtualGpuWorld&) = delete;

  int32_t worldSize() const { return int32_t(m_comms.size()); }
  int deviceOrdinal() const { return m_deviceOrdinal; }
  // Rank r's communicator (supportsDevice() is true); use it from one thread at a time. Lives as
  // long as the world.
  Communicator& comm(int32_t rank);

 private:
  int m_deviceOrdinal;
  std::vector<std::unique_ptr<Communicator>> m_comms;
};

// Runs fn(comm) on worldSize threads, one per rank of a fresh VirtualGpuWorld on `deviceOrdinal`,
// and joins them; each thread makes the device current (cudaSetDevice) before fn. A rank that
// returns an error (or throws) aborts the world, so peers blocked in a collective return at once.
// Returns ok when every rank returned ok, otherwise the first error in time, prefixed with
// "rank r". Errors before any thread starts: kInvalidArgument for worldSize < 1, kNotFound for a
// device this process does not see.
Status runVirtualRanks(int32_t worldSize, int deviceOrdinal,
                       const std::function<Status(Communicator&)>& fn,
                       std::chrono::milliseconds timeout = Communicator::kDefaultTimeout);

}  // namespace moewb::engine
