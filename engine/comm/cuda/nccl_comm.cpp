// NCCL communicator (nccl_comm.h): non-blocking NCCL calls with deadline polls, device and staged
// host collectives, split, abort and teardown.
#include "comm/cuda/nccl_comm.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <numeric>
#include <span>
#include <utility>
#include <vector>

#include "comm/cuda/nccl_check.h"
#include "comm/cuda/stream_poll.h"
#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/cuda_context.h"

namespace moewb::engine {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int64_t kScratchAlignBytes = 256;
constexpr int64_t kMinScratchBytes = 64 << 10;

int64_t alignUp(int64_t bytes) {
  return (bytes + kScratchAlignBytes - 1) / kScratchAlignBytes * kScratchAlignBytes;
}

ncclDataType_t ncclType(CommDataType type) {
  switch (type) {
    case CommDataType::kFloat32:
      return ncclFloat32;
    case CommDataType::kInt64:
      return ncclInt64;
    case CommDataType::kBf16:
      return ncclBfloat16;
  }
  return ncclFloat32;
}

ncclRedOp_t ncclOp(ReduceOp op) {
  return op == ReduceOp::kMax ? ncclMax : ncclSum;
}

ncclConfig_t nonBlockingConfig() {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  return config;
}

// The NCCL handle of one communicator and its abort state, shared with the communicators split
// from it (aborting a parent reaches its children). Every NCCL call on the handle runs under the
// mutex, so an abort() from another thread never races a call on the owner's thread.
struct NcclCommState {
  std::mutex mutex;
  ncclComm_t comm = nullptr;  // null once aborted or destroyed
  bool aborted = false;
  std::string abortReason;
  std::vector<std::weak_ptr<NcclCommState>> children;
};

// Aborts `state` (ncclCommAbort stops its kernels and frees it) and every state split from it.
// Keeps the first reason.
void abortState(const std::shared_ptr<NcclCommState>& state, const std::string& reason) {
  std::vector<std::weak_ptr<NcclCommState>> children;
  {
    std::lock_guard<std::mutex> lock(state->mutex);
    if (!state->aborted) {
      state->aborted = true;
      state->abortReason = reason;
    }
    if (state->comm) {
      (void)ncclCommAbort(state->comm);
      state->comm = nullptr;
    }
    children = state->children;
  }
  for (const auto& weak : children) {
    if (auto child = weak.lock()) abortState(child, reason);
  }
}

// One NCCL call on the locked handle; a macro so that failures name the expression and line.
#define MOEWB_NCCL_CALL(label, expr) \
  callNccl((label), #expr, __FILE__, __LINE__, [&](ncclComm_t comm) { return (expr); })

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(std::shared_ptr<NcclCommState> state, int device, int32_t rank, int32_t size,
                   std::function<std::string()> describeMissing)
      : m_state(std::move(state)),
        m_device(device),
        m_rank(rank),
        m_size(size),
        m_globals(size_t(size), -1),
        m_describeMissing(std::move(describeMissing)) {}
  ~NcclCommunicator() override;

  // Creates the internal stream and records the members' global ranks.
  Status init(std::vector<int32_t> globals);
  // Polls the handle until no operation is in progress, up to timeout(); on timeout aborts and
  // fails with kCancelled.
  Status waitUntilReady(const std::string& label);

  int32_t rank() const override { return m_rank; }
  int32_t worldSize() const override { return m_size; }
  int32_t globalRank() const override { return m_globals[size_t(m_rank)]; }
  std::vector<int32_t> groupGlobalRanks() const override { return m_globals; }
  bool supportsDevice() const override { return true; }
  void abort(const std::string& reason) override { abortState(m_state, reason); }
  Status synchronizeDevice(void* stream) override;

 protected:
  Status runCollective(const CollectiveCall& call) override;
  Result<std::unique_ptr<Communicator>> runSplit(const CollectiveCall& call) override;

 private:
  std::string describeRank(int32_t r) const;
  std::string label(const CollectiveCall& call) const {
    return std::string(collectiveOpName(call.op)) + " seq " + std::to_string(call.seq);
  }
  Status checkNotAborted();
  Status callNccl(const std::string& label, const char* text, const char* file, int line,
                  const std::function<ncclResult_t(ncclComm_t)>& fn);
  Status queryAsync(const std::string& label, bool* inProgress);
  Status failed(const std::string& label, const Status& error);
  Status timedOut(const std::string& label);
  Status waitStream(cudaStream_t stream, const std::string& label);
  Status runDevice(const CollectiveCall& call, cudaStream_t stream, const std::string& label);
  Status allToAllV(const CollectiveCall& call, cudaStream_t stream, const std::string& label);
  Status runHost(const CollectiveCall& call, const std::string& label);
  Status ensureScratch(int64_t bytes);
  Result<std::unique_ptr<Communicator>> adoptChild(ncclComm_t child, const std::string& label);
  void destroyHandle();

  std::shared_ptr<NcclCommState> m_state;
  int m_device;
  int32_t m_rank;
  int32_t m_size;
  std::vector<int32_t> m_globals;  // global rank of each group rank
  std::function<std::string()> m_describeMissing;
  cudaStream_t m_stream = nullptr;  // host calls' staging stream
  void* m_scratch = nullptr;        // device staging buffer of host calls
  int64_t m_scratchBytes = 0;
  std::string m_lastDeviceLabel;  // "all_reduce seq 5": the last device collective queued
  ncclComm_t m_splitChild =
      nullptr;  // written by NCCL's split job, possibly after the call returns
};

std::string NcclCommunicator::describeRank(int32_t r) const {
  std::string s = "rank " + std::to_string(r);
  const int32_t g = m_globals[size_t(r)];
  if (g >= 0 && g != r) s += " (global rank " + std::to_string(g) + ")";
  return s;
}

Status NcclCommunicator::init(std::vector<int32_t> globals) {
  m_globals = std::move(globals);
  MOEWB_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&m_stream, cudaStreamNonBlocking));
  return Status::ok();
}

Status NcclCommunicator::checkNotAborted() {
  std::lock_guard<std::mutex> lock(m_state->mutex);
  if (m_state->aborted) return cancelled(m_state->abortReason);
  return Status::ok();
}

Status NcclCommunicator::callNccl(const std::string& label, const char* text, const char* file,
                                  int line, const std::function<ncclResult_t(ncclComm_t)>& fn) {
  ncclResult_t result = ncclSuccess;
  {
    std::lock_guard<std::mutex> lock(m_state->mutex);
    if (m_state->aborted) return cancelled(m_state->abortReason);
    result = fn(m_state->comm);
  }
  if (result == ncclInProgress) return waitUntilReady(label);
  if (result != ncclSuccess) {
    return failed(label, ncclStatus(result, text, file, line, describeRank(m_rank)));
  }
  return Status::ok();
}

// One look at the handle's asynchronous state: *inProgress while an operation is under way; an
// asynchronous error aborts.
Status NcclCommunicator::queryAsync(const std::string& label, bool* inProgress) {
  ncclResult_t state = ncclSuccess;
  ncclResult_t result = ncclSuccess;
  {
    std::lock_guard<std::mutex> lock(m_state->mutex);
    if (m_state->aborted) return cancelled(m_state->abortReason);
    result = ncclCommGetAsyncError(m_state->comm, &state);
  }
  const std::string who = describeRank(m_rank);
  if (result != ncclSuccess) {
    return failed(label, ncclStatus(result, "ncclCommGetAsyncError", __FILE__, __LINE__, who));
  }
  if (state != ncclSuccess && state != ncclInProgress) {
    return failed(label,
                  ncclStatus(state, "an asynchronous NCCL operation", __FILE__, __LINE__, who));
  }
  *inProgress = state == ncclInProgress;
  return Status::ok();
}

Status NcclCommunicator::waitUntilReady(const std::string& label) {
  const auto deadline = Clock::now() + timeout();
  for (int attempt = 0;; ++attempt) {
    bool busy = false;
    MOEWB_RETURN_IF_ERROR(queryAsync(label, &busy));
    if (!busy) return Status::ok();
    if (Clock::now() >= deadline) return timedOut(label);
    pollPause(attempt);
  }
}

// After an NCCL error nothing can be assumed about enqueued work: abort (NCCL's rule).
Status NcclCommunicator::failed(const std::string& label, const Status& error) {
  const Status status = error.withContext(label);
  abortState(m_state, status.toString());
  return status;
}

Status NcclCommunicator::timedOut(const std::string& label) {
  std::string missing = m_describeMissing ? m_describeMissing() : std::string();
  if (missing.empty()) missing = "a peer did not arrive";
  const std::string reason = label + " on " + describeRank(m_rank) +
                             ": peers did not finish within " + std::to_string(timeout().count()) +
                             " ms; " + missing;
  abortState(m_state, reason);
  return cancelled(reason);
}

Status NcclCommunicator::waitStream(cudaStream_t stream, const std::string& label) {
  const auto deadline = Clock::now() + timeout();
  Status stopped;  // an abort or asynchronous NCCL error seen while polling (already handled)
  auto stop = [&]() -> Status {
    bool busy = false;
    stopped = queryAsync(label, &busy);
    return stopped;
  };
  Result<StreamPoll> state = pollStream(stream, deadline, stop);
  if (!state.isOk()) return stopped.isOk() ? failed(label, state.status()) : stopped;
  if (*state == StreamPoll::kTimedOut) return timedOut(label);
  return stop();  // the stream finished: a last look for an asynchronous error
}

Status NcclCommunicator::synchronizeDevice(void* stream) {
  MOEWB_RETURN_IF_ERROR(checkNotAborted());
  MOEWB_CUDA_RETURN_IF_ERROR(cudaSetDevice(m_device));
  const std::string label = m_lastDeviceLabel.empty() ? "synchronize_device" : m_lastDeviceLabel;
  return waitStream(static_cast<cudaStream_t>(stream), label);
}

Status NcclCommunicator::allToAllV(const CollectiveCall& c, cudaStream_t stream,
                                   const std::string& label) {
  const int32_t n = m_size;
  const int32_t me = m_rank;
  const int64_t e = commDataTypeBytes(c.dtype);
  std::vector<int64_t> equalCounts, equalDispls;
  std::span<const int64_t> sc = c.sendCounts, sd = c.sendDispls, rc = c.recvCounts,
                           rd = c.recvDispls;
  if (c.op == CollectiveOp::kAllToAll) {
    const int64_t block = c.sendCount / n;
    equalCounts.assign(size_t(n), block);
    for (int32_t j = 0; j < n; ++j) equalDispls.push_back(j * block);
    sc = rc = equalCounts;
    sd = rd = equalDispls;
  }
  if (sc[size_t(me)] != rc[size_t(me)]) {
    return invalidArgument(label + " on " + describeRank(me) + ": sends " +
                           std::to_string(sc[size_t(me)]) + " elements to itself but expects " +
                           std::to_string(rc[size_t(me)]));
  }
  const auto* send = static_cast<const char*>(c.send);
  auto* recv = static_cast<char*>(c.recv);
  const int64_t selfBytes = rc[size_t(me)] * e;
  const char* selfSrc = send + sd[size_t(me)] * e;
  char* selfDst = recv + rd[size_t(me)] * e;
  if (selfBytes > 0 && selfSrc != selfDst) {
    MOEWB_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(selfDst, selfSrc, size_t(selfBytes), cudaMemcpyDeviceToDevice, stream));
  }
  const ncclDataType_t type = ncclType(c.dtype);
  auto group = [&](ncclComm_t comm) -> ncclResult_t {
    ncclResult_t first = ncclGroupStart();
    if (first != ncclSuccess) return first;
    auto keep = [&](ncclResult_t r) {
      if (first == ncclSuccess && r != ncclSuccess && r != ncclInProgress) first = r;
    };
    for (int32_t j = 0; j < n; ++j) {
      if (j == me) continue;
      if (sc[size_t(j)] > 0) {
        keep(ncclSend(send + sd[size_t(j)] * e, size_t(sc[size_t(j)]), type, j, comm, stream));
      }
      if (rc[size_t(j)] > 0) {
        keep(ncclRecv(recv + rd[size_t(j)] * e, size_t(rc[size_t(j)]), type, j, comm, stream));
      }
    }
    const ncclResult_t end = ncclGroupEnd();
    return first != ncclSuccess ? first : end;
  };
  return callNccl(label, "ncclGroupStart; ncclSend/ncclRecv per peer; ncclGroupEnd", __FILE__,
                  __LINE__, group);
}

Status NcclCommunicator::runDevice(const CollectiveCall& c, cudaStream_t stream,
                                   const std::string& label) {
  const ncclDataType_t type = ncclType(c.dtype);
  switch (c.op) {
    case CollectiveOp::kAllToAll:
    case CollectiveOp::kAllToAllV:
      return allToAllV(c, stream, label);
    case CollectiveOp::kAllGather:
      if (c.sendCount == 0) return Status::ok();
      return MOEWB_NCCL_CALL(
          label, ncclAllGather(c.send, c.recv, size_t(c.sendCount), type, comm, stream));
    case CollectiveOp::kReduceScatter:
      if (c.recvCount == 0) return Status::ok();
      return MOEWB_NCCL_CALL(label, ncclReduceScatter(c.send, c.recv, size_t(c.recvCount), type,
                                                      ncclOp(c.reduce), comm, stream));
    case CollectiveOp::kAllReduce:
      if (c.sendCount == 0) return Status::ok();
      return MOEWB_NCCL_CALL(label, ncclAllReduce(c.send, c.recv, size_t(c.sendCount), type,
                                                  ncclOp(c.reduce), comm, stream));
    case CollectiveOp::kBroadcast:
      if (c.sendCount == 0) return Status::ok();
      return MOEWB_NCCL_CALL(
          label, ncclBroadcast(c.send, c.recv, size_t(c.sendCount), type, c.root, comm, stream));
    case CollectiveOp::kBarrier:
    case CollectiveOp::kSplit:
      break;
  }
  return internalError(label + ": not a device collective of the NCCL communicator");
}

Status NcclCommunicator::ensureScratch(int64_t bytes) {
  if (bytes <= m_scratchBytes) return Status::ok();
  const int64_t grown = std::max({bytes, 2 * m_scratchBytes, kMinScratchBytes});
  if (m_scratch) {
    void* old = m_scratch;
    m_scratch = nullptr;
    m_scratchBytes = 0;
    MOEWB_CUDA_RETURN_IF_ERROR(cudaFreeAsync(old, m_stream));
  }
  MOEWB_CUDA_RETURN_IF_ERROR(cudaMallocAsync(&m_scratch, size_t(grown), m_stream));
  m_scratchBytes = grown;
  return Status::ok();
}

// Host buffers: copy in on the staging stream, run the device collective there, wait with the
// timeout, copy out. barrier is a one-element float all-reduce.
Status NcclCommunicator::runHost(const CollectiveCall& call, const std::string& label) {
  CollectiveCall d = call;
  d.space = MemorySpace::kDevice;
  d.stream = m_stream;
  const bool barrier = call.op == CollectiveOp::kBarrier;
  if (barrier) {
    d.op = CollectiveOp::kAllReduce;
    d.dtype = CommDataType::kFloat32;
    d.reduce = ReduceOp::kSum;
    d.sendCount = d.recvCount = 1;
  }
  const int64_t e = commDataTypeBytes(d.dtype);
  const bool inPlace = d.op == CollectiveOp::kAllReduce || d.op == CollectiveOp::kBroadcast;
  const int64_t sendBytes = d.sendCount * e;
  const int64_t recvBytes = d.recvCount * e;
  MOEWB_RETURN_IF_ERROR(ensureScratch(alignUp(sendBytes) + (inPlace ? 0 : recvBytes)));
  char* base = static_cast<char*>(m_scratch);
  d.send = base;
  d.recv = inPlace ? base : base + alignUp(sendBytes);
  if (barrier) {
    MOEWB_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(base, 0, size_t(sendBytes), m_stream));
  } else if (sendBytes > 0) {
    MOEWB_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(base, call.send, size_t(sendBytes), cudaMemcpyHostToDevice, m_stream));
  }
  MOEWB_RETURN_IF_ERROR(runDevice(d, m_stream, label));
  // Wait with the timeout before the copy out: a copy to pageable memory would block without one.
  MOEWB_RETURN_IF_ERROR(waitStream(m_stream, label));
  if (!barrier && recvBytes > 0) {
    MOEWB_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(call.recv, d.recv, size_t(recvBytes), cudaMemcpyDeviceToHost, m_stream));
    MOEWB_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(m_stream));
  }
  return Status::ok();
}

Status NcclCommunicator::runCollective(const CollectiveCall& call) {
  const std::string name = label(call);
  MOEWB_RETURN_IF_ERROR(checkNotAborted());
  if (!call.argError.isOk()) {
    return Status(call.argError.code(),
                  name + " on " + describeRank(m_rank) + ": " + call.argError.message());
  }
  MOEWB_CUDA_RETURN_IF_ERROR(cudaSetDevice(m_device));
  if (call.space == MemorySpace::kDevice) {
    m_lastDeviceLabel = name;
    return runDevice(call, static_cast<cudaStream_t>(call.stream), name);
  }
  return runHost(call, name);
}

Result<std::unique_ptr<Communicator>> NcclCommunicator::runSplit(const CollectiveCall& call) {
  const std::string name = label(call);
  MOEWB_RETURN_IF_ERROR(checkNotAborted());
  if (!call.argError.isOk()) {
    return Status(call.argError.code(),
                  name + " on " + describeRank(m_rank) + ": " + call.argError.message());
  }
  MOEWB_CUDA_RETURN_IF_ERROR(cudaSetDevice(m_device));
  ncclConfig_t config = nonBlockingConfig();
  const int color = call.color == kNoColor ? NCCL_SPLIT_NOCOLOR : call.color;
  m_splitChild = nullptr;
  const Status split =
      MOEWB_NCCL_CALL(name, ncclCommSplit(comm, color, call.key, &m_splitChild, &config));
  // NCCL's split job stores the new handle when it completes (also after an abort); on a
  // non-blocking parent that can be after the parent reports ready again, so wait for it.
  ncclComm_t child = __atomic_load_n(&m_splitChild, __ATOMIC_ACQUIRE);
  const auto deadline = Clock::now() + timeout();
  for (int attempt = 0; split.isOk() && call.color != kNoColor && child == nullptr &&
                        Clock::now() < deadline;
       ++attempt) {
    pollPause(attempt);
    child = __atomic_load_n(&m_splitChild, __ATOMIC_ACQUIRE);
  }
  m_splitChild = nullptr;
  // The parent stays busy with the split job until it finishes; later calls on it must wait.
  if (split.isOk()) MOEWB_RETURN_IF_ERROR(waitUntilReady(name));
  if (!split.isOk()) {
    if (child) (void)ncclCommAbort(child);
    return split;
  }
  if (call.color == kNoColor) {
    if (child) (void)ncclCommAbort(child);
    return std::unique_ptr<Communicator>();
  }
  if (!child) {
    return internalError(name + " on " + describeRank(m_rank) + ": NCCL made no communicator "
                         "within " + std::to_string(timeout().count()) + " ms");
  }
  return adoptChild(child, name);
}

// Wraps a new handle from ncclCommSplit: waits for its init, links it to this communicator's
// abort, learns its rank and size and gathers the members' global ranks over it.
Result<std::unique_ptr<Communicator>> NcclCommunicator::adoptChild(ncclComm_t child,
                                                                   const std::string& name) {
  auto state = std::make_shared<NcclCommState>();
  state->comm = child;
  // Rank and size are known once the new handle is ready (placeholders until then).
  auto comm = std::make_unique<NcclCommunicator>(state, m_device, 0, 1, m_describeMissing);
  comm->setTimeout(timeout());
  Status status;
  {
    std::lock_guard<std::mutex> lock(m_state->mutex);
    m_state->children.push_back(state);
    if (m_state->aborted) status = cancelled(m_state->abortReason);
  }
  if (!status.isOk()) {
    abortState(state, status.message());
    return status;
  }
  MOEWB_RETURN_IF_ERROR(comm->waitUntilReady(name + " (new communicator)"));
  int childRank = 0;
  int childSize = 0;
  const std::string who = describeRank(m_rank);
  {
    std::lock_guard<std::mutex> lock(state->mutex);  // a parent's abort may free the handle
    if (!state->comm) return cancelled(state->abortReason);
    status = ncclStatus(ncclCommUserRank(state->comm, &childRank), "ncclCommUserRank", __FILE__,
                        __LINE__, who);
    if (status.isOk()) {
      status = ncclStatus(ncclCommCount(state->comm, &childSize), "ncclCommCount", __FILE__,
                          __LINE__, who);
    }
  }
  if (!status.isOk()) {
    status = status.withContext(name);
    abortState(state, status.toString());
    return status;
  }
  comm->m_rank = childRank;
  comm->m_size = childSize;
  MOEWB_RETURN_IF_ERROR(comm->init(std::vector<int32_t>(size_t(childSize), -1)));
  const int64_t mine = globalRank();
  std::vector<int64_t> all(size_t(childSize), -1);
  CollectiveCall gather;
  gather.op = CollectiveOp::kAllGather;
  gather.dtype = CommDataType::kInt64;
  gather.send = &mine;
  gather.sendCount = 1;
  gather.recv = all.data();
  gather.recvCount = childSize;
  MOEWB_RETURN_IF_ERROR(comm->runHost(gather, name + " (exchange of global ranks)"));
  std::vector<int32_t> globals(all.begin(), all.end());
  comm->m_globals = std::move(globals);
  return std::unique_ptr<Communicator>(std::move(comm));
}

// Finalizes (flushing queued work, up to timeout()) and destroys the handle, or aborts it when
// finalizing fails or times out. Nothing to do after an abort.
void NcclCommunicator::destroyHandle() {
  ncclResult_t result = ncclSuccess;
  {
    std::lock_guard<std::mutex> lock(m_state->mutex);
    if (!m_state->comm) return;
    result = ncclCommFinalize(m_state->comm);
  }
  bool finalized = result == ncclSuccess || result == ncclInProgress;
  const auto deadline = Clock::now() + timeout();
  for (int attempt = 0; finalized; ++attempt) {
    ncclResult_t state = ncclSuccess;
    {
      std::lock_guard<std::mutex> lock(m_state->mutex);
      if (!m_state->comm) return;  // aborted meanwhile
      if (ncclCommGetAsyncError(m_state->comm, &state) != ncclSuccess) state = ncclInternalError;
    }
    if (state == ncclSuccess) break;
    if (state != ncclInProgress || Clock::now() >= deadline) finalized = false;
    pollPause(attempt);
  }
  std::lock_guard<std::mutex> lock(m_state->mutex);
  if (!m_state->comm) return;
  if (finalized) {
    (void)ncclCommDestroy(m_state->comm);
  } else {
    (void)ncclCommAbort(m_state->comm);
  }
  m_state->comm = nullptr;
}

NcclCommunicator::~NcclCommunicator() {
  (void)cudaSetDevice(m_device);
  destroyHandle();
  if (m_scratch) (void)cudaFreeAsync(m_scratch, m_stream);
  if (m_stream) {
    (void)cudaStreamSynchronize(m_stream);
    (void)cudaStreamDestroy(m_stream);
  }
}

#undef MOEWB_NCCL_CALL

Status checkOptions(const NcclWorldOptions& o) {
  if (o.worldSize < 1) {
    return invalidArgument("createNcclWorld: world size " + std::to_string(o.worldSize) +
                           " must be >= 1");
  }
  if (o.rank < 0 || o.rank >= o.worldSize) {
    return invalidArgument("createNcclWorld: rank " + std::to_string(o.rank) + " is outside [0, " +
                           std::to_string(o.worldSize) + ")");
  }
  if (o.uniqueId.size() != NCCL_UNIQUE_ID_BYTES) {
    return invalidArgument("createNcclWorld: the NCCL unique id has " +
                           std::to_string(o.uniqueId.size()) + " bytes; ncclNewUniqueId() makes " +
                           std::to_string(NCCL_UNIQUE_ID_BYTES));
  }
  if (o.timeout.count() <= 0) {
    return invalidArgument("createNcclWorld: timeout " + std::to_string(o.timeout.count()) +
                           " ms must be > 0");
  }
  return Status::ok();
}

}  // namespace

Result<std::string> ncclNewUniqueId() {
  ncclUniqueId id;
  MOEWB_RETURN_IF_ERROR(
      ncclStatus(ncclGetUniqueId(&id), "ncclGetUniqueId(&id)", __FILE__, __LINE__, "this process"));
  return std::string(id.internal, NCCL_UNIQUE_ID_BYTES);
}

Result<std::unique_ptr<Communicator>> createNcclWorld(const NcclWorldOptions& options) {
  MOEWB_RETURN_IF_ERROR(checkOptions(options));
  MOEWB_RETURN_IF_ERROR(cuda::deviceInfo(options.deviceOrdinal).status());
  MOEWB_CUDA_RETURN_IF_ERROR(cudaSetDevice(options.deviceOrdinal));
  ncclUniqueId id;
  std::memcpy(id.internal, options.uniqueId.data(), NCCL_UNIQUE_ID_BYTES);
  ncclConfig_t config = nonBlockingConfig();
  ncclComm_t handle = nullptr;
  const std::string who =
      "rank " + std::to_string(options.rank) + " of " + std::to_string(options.worldSize);
  const ncclResult_t result =
      ncclCommInitRankConfig(&handle, options.worldSize, id, options.rank, &config);
  const Status started = ncclStatus(result, "ncclCommInitRankConfig", __FILE__, __LINE__, who);
  if (!started.isOk()) {
    if (handle) (void)ncclCommAbort(handle);
    return started;
  }
  auto state = std::make_shared<NcclCommState>();
  state->comm = handle;
  auto comm = std::make_unique<NcclCommunicator>(state, options.deviceOrdinal, options.rank,
                                                 options.worldSize, options.describeMissingPeers);
  comm->setTimeout(options.timeout);
  std::vector<int32_t> globals(static_cast<size_t>(options.worldSize));
  std::iota(globals.begin(), globals.end(), 0);
  MOEWB_RETURN_IF_ERROR(comm->init(std::move(globals)));
  MOEWB_RETURN_IF_ERROR(comm->waitUntilReady("ncclCommInitRankConfig"));
  return std::unique_ptr<Communicator>(std::move(comm));
}

}  // namespace moewb::engine
