// Communicator: one rank's handle on a group of ranks and the collectives they run together.
//
// Every parallel part of the engine (expert-parallel dispatch, FSDP all-gather/reduce-scatter,
// loss and router-statistic reductions) talks to its peers only through this interface, so the
// same code runs on in-process ranks (threads; CPU and tests), virtual ranks on one GPU and NCCL.
//
// Operations: allToAll (equal splits), allToAllV (per-peer counts and displacements), allGather,
// reduceScatter (sum), allReduce (sum or max), broadcast, barrier, and split (a sub-group, like
// MPI_Comm_split / ncclCommSplit). Buffers are host spans of float or int64 elements; every count
// and displacement is in elements. Block order is always group-rank order.
//
// Device memory: communicators whose supportsDevice() is true (virtual ranks on one GPU, NCCL;
// engine/comm/cuda/) also run the same collectives on device pointers ("...Device" calls),
// enqueued on a CUDA stream in stream order: the call returns once the collective is enqueued; the
// stream's later work sees its result; the send buffer may be reused by later work on the same
// stream. synchronizeDevice(stream) waits for a stream with the communicator's timeout. Host and
// device calls share one sequence of sequence numbers.
//
// Ordering rules: a collective is a rendezvous of every rank of the group; all ranks must call the
// same collectives in the same order with matching sizes (mismatches are reported as errors on all
// ranks, not undefined behaviour). Each call takes the next per-communicator sequence number
// (1, 2, ...), also for failed calls, so sequence numbers line up across ranks for tracing.
// Send and receive spans must not overlap, except where a call is documented as in place.
//
// Errors: every call returns Status. A peer that does not arrive within timeout() makes the call
// fail with StatusCode::kCancelled and a message naming the collective, its sequence number and the
// missing rank(s); the group is then aborted: every later call on it (and on communicators split
// from it) fails at once with the same message, as after ncclCommAbort. Bad arguments on any rank
// fail the call on every rank with kInvalidArgument naming that rank.
//
// Determinism: reductions add in group-rank order, so results are bitwise identical on every rank
// and for any thread timing.
//
// Thread-safety: a Communicator belongs to one thread (its rank) at a time; distinct ranks' objects
// are used concurrently. abort() may be called from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "moewb/base/status.h"

namespace moewb::engine {

enum class ReduceOp { kSum, kMax };

// One finished collective, as a tracer records it. Bytes are the logical payload, independent of
// the algorithm: bytesSent = bytes of this rank's input delivered to other ranks, bytesReceived =
// bytes of this rank's output that came from other ranks (self-copies count in neither), so the
// sums over all ranks of both agree. Per op, with n ranks and c elements of e bytes:
// allToAll(c per peer): (n-1)c e both; allGather(c in): (n-1)c e both; reduceScatter(c out):
// (n-1)c e both; allReduce(c): (n-1)c e both; broadcast: root sends (n-1)c e, others receive c e;
// allToAllV: sums of the counts to / from other ranks; barrier, split: 0.
struct CollectiveRecord {
  std::string op;                      // "all_to_all_v", "all_gather", ... (collectiveOpName)
  uint64_t seq = 0;                    // per-communicator sequence number, from 1
  int64_t bytesSent = 0;               // bytes, see above
  int64_t bytesReceived = 0;           // bytes, see above
  std::vector<int32_t> peers;          // global ranks of the group, in group-rank order
  std::vector<int64_t> sendBytesByPeer;  // bytes to each group rank (incl. self); all-to-all only
  int64_t startNs = 0;                 // steady_clock ns when the call began
  int64_t endNs = 0;                   // steady_clock ns when it returned (device calls: enqueued)
  bool ok = true;                      // false when the call returned an error
  bool device = false;                 // device-memory call (times are the host's enqueue times)
};

// Called on the rank's own thread after every collective (also failed ones).
using CollectiveObserver = std::function<void(const CollectiveRecord&)>;

enum class CollectiveOp { kAllToAll, kAllToAllV, kAllGather, kReduceScatter, kAllReduce, kBroadcast,
                          kBarrier, kSplit };
enum class CommDataType { kFloat32, kInt64, kBf16 };  // kBf16: device calls only
enum class MemorySpace { kHost, kDevice };

// "all_to_all", "all_to_all_v", "all_gather", "reduce_scatter", "all_reduce", "broadcast",
// "barrier", "split".
const char* collectiveOpName(CollectiveOp op);
// 4, 8 or 2 bytes per element.
int64_t commDataTypeBytes(CommDataType type);
// "float32", "int64", "bf16".
const char* commDataTypeName(CommDataType type);

// The arguments of one collective in type-erased form; implementations receive this.
struct CollectiveCall {
  CollectiveOp op = CollectiveOp::kBarrier;
  CommDataType dtype = CommDataType::kFloat32;
  ReduceOp reduce = ReduceOp::kSum;
  uint64_t seq = 0;
  const void* send = nullptr;
  int64_t sendCount = 0;  // elements in send
  void* recv = nullptr;
  int64_t recvCount = 0;  // elements in recv
  std::span<const int64_t> sendCounts;  // allToAllV: elements to each group rank
  std::span<const int64_t> sendDispls;  // allToAllV: offset in send of each block, elements
  std::span<const int64_t> recvCounts;  // allToAllV: elements from each group rank
  std::span<const int64_t> recvDispls;  // allToAllV: offset in recv of each block, elements
  int32_t root = 0;                     // broadcast
  int32_t color = 0;                    // split
  int32_t key = 0;                      // split
  MemorySpace space = MemorySpace::kHost;  // where send / recv live
  void* stream = nullptr;               // device calls: the cudaStream_t they are enqueued on
  Status argError;                      // this rank's argument check; reported on all ranks
};

class Communicator {
 public:
  // Color for split() of a rank that joins no sub-group (MPI_UNDEFINED).
  static constexpr int32_t kNoColor = -1;
  static constexpr std::chrono::milliseconds kDefaultTimeout{10000};

  virtual ~Communicator() = default;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  // This rank's index in the group, in [0, worldSize()).
  virtual int32_t rank() const = 0;
  // Ranks in the group.
  virtual int32_t worldSize() const = 0;
  // This rank's index in the root world this group was split from (== rank() for the world).
  virtual int32_t globalRank() const = 0;
  // Global ranks of the group's members in group-rank order.
  virtual std::vector<int32_t> groupGlobalRanks() const = 0;

  // Sequence number of the most recent collective on this communicator; 0 before the first.
  uint64_t lastSequence() const { return m_seq; }
  // How long a call waits for a missing peer before it fails (default kDefaultTimeout).
  std::chrono::milliseconds timeout() const { return m_timeout; }
  void setTimeout(std::chrono::milliseconds timeout) { m_timeout = timeout; }
  // Installs (or with {} removes) the observer called after every collective of this rank.
  void setObserver(CollectiveObserver observer) { m_observer = std::move(observer); }

  // Equal-split all-to-all: send holds worldSize() blocks of c = send.size()/worldSize()
  // elements, block j goes to rank j; recv (same size) receives block i from rank i.
  Status allToAll(std::span<const float> send, std::span<float> recv);
  Status allToAll(std::span<const int64_t> send, std::span<int64_t> recv);

  // Variable all-to-all: sendCounts[j] elements at send[sendDispls[j]] go to rank j, and
  // recvCounts[i] elements from rank i land at recv[recvDispls[i]]. Every span of counts or
  // displacements has worldSize() entries; counts may be 0; recvCounts[i] on rank j must equal
  // sendCounts[j] on rank i (checked on all ranks). Blocks must lie inside their buffers.
  Status allToAllV(std::span<const float> send, std::span<const int64_t> sendCounts,
                   std::span<const int64_t> sendDispls, std::span<float> recv,
                   std::span<const int64_t> recvCounts, std::span<const int64_t> recvDispls);
  Status allToAllV(std::span<const int64_t> send, std::span<const int64_t> sendCounts,
                   std::span<const int64_t> sendDispls, std::span<int64_t> recv,
                   std::span<const int64_t> recvCounts, std::span<const int64_t> recvDispls);

  // recv = concatenation of every rank's send, in rank order; recv.size() = worldSize()*send.size().
  Status allGather(std::span<const float> send, std::span<float> recv);
  Status allGather(std::span<const int64_t> send, std::span<int64_t> recv);

  // send holds worldSize() blocks of recv.size() elements; recv = sum over ranks of block rank().
  Status reduceScatter(std::span<const float> send, std::span<float> recv);

  // In place: buf = elementwise sum (or max) of every rank's buf.
  Status allReduce(std::span<float> buf, ReduceOp op = ReduceOp::kSum);
  Status allReduce(std::span<int64_t> buf, ReduceOp op = ReduceOp::kSum);

  // In place: every rank's buf = root's buf (sizes must match).
  Status broadcast(std::span<float> buf, int32_t root);
  Status broadcast(std::span<int64_t> buf, int32_t root);

  // Returns when every rank has called it.
  Status barrier();

  // Collective: ranks with the same color form a new group, ordered by (key, rank()). Returns the
  // new communicator, or nullptr for color == kNoColor. The child inherits timeout() and has its
  // own sequence numbers and no observer.
  Result<std::unique_ptr<Communicator>> split(int32_t color, int32_t key);

  // Aborts the group: calls in progress and every later call on it fail with `reason`.
  virtual void abort(const std::string& reason) = 0;

  // --- Device memory (see the header comment). Pointers are device memory of this rank's GPU
  // holding elements of `dtype`; counts and displacements are in elements; `stream` is the
  // cudaStream_t the collective is enqueued on. Argument rules are those of the host calls.
  // A communicator without device support fails them with kFailedPrecondition (no sequence
  // number is taken).

  // True when the ...Device calls are supported.
  virtual bool supportsDevice() const { return false; }

  Status allToAllVDevice(const void* send, std::span<const int64_t> sendCounts,
                         std::span<const int64_t> sendDispls, int64_t sendCount, void* recv,
                         std::span<const int64_t> recvCounts, std::span<const int64_t> recvDispls,
                         int64_t recvCount, CommDataType dtype, void* stream);
  // recv [worldSize() * sendCount] = every rank's send [sendCount], in rank order.
  Status allGatherDevice(const void* send, int64_t sendCount, void* recv, CommDataType dtype,
                         void* stream);
  // send [worldSize() * recvCount]; recv [recvCount] = sum over ranks of block rank().
  // kFloat32 or kBf16 (bf16 sums accumulate in fp32, in group-rank order where the
  // implementation controls the order).
  Status reduceScatterDevice(const void* send, void* recv, int64_t recvCount, CommDataType dtype,
                             void* stream);
  // In place over buf [count].
  Status allReduceDevice(void* buf, int64_t count, CommDataType dtype, ReduceOp op, void* stream);
  // In place over buf [count]: every rank's buf = root's.
  Status broadcastDevice(void* buf, int64_t count, CommDataType dtype, int32_t root, void* stream);

  // Waits until every piece of work enqueued on `stream` so far is complete, at most timeout().
  // On timeout (a peer that never joined a collective) the group is aborted and the call fails
  // with kCancelled naming the missing rank(s) where known. Default: kFailedPrecondition.
  virtual Status synchronizeDevice(void* stream);

 protected:
  Communicator() = default;

  // Runs one collective (not split) whose arguments the base class has filled and checked locally.
  virtual Status runCollective(const CollectiveCall& call) = 0;
  // Runs split; call.op == kSplit.
  virtual Result<std::unique_ptr<Communicator>> runSplit(const CollectiveCall& call) = 0;

 private:
  Status run(CollectiveCall call);
  CollectiveRecord makeRecord(const CollectiveCall& call) const;

  uint64_t m_seq = 0;
  std::chrono::milliseconds m_timeout = kDefaultTimeout;
  CollectiveObserver m_observer;
};

}  // namespace moewb::engine
