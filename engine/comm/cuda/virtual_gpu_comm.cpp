// Virtual ranks on one GPU: the in-process rendezvous plus stream-ordered device collectives
// (virtual_gpu_comm.h).
#include "comm/cuda/virtual_gpu_comm.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <numeric>
#include <string>
#include <utility>

#include "comm/in_process_comm.h"
#include "comm/cuda/peer_reduce.h"
#include "comm/cuda/stream_poll.h"
#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/cuda_context.h"
#include "moewb/base/check.h"

namespace moewb::engine {
namespace {

// Each rank's "ready" and "done" events, shared by the group so that peers can wait on them and
// so that they outlive every member's last wait. Rank r creates its own pair on its first device
// call (before it arrives; peers read the slots only after the rendezvous).
struct VirtualGpuEvents final : detail::GroupExtension {
  explicit VirtualGpuEvents(int32_t n) : ready(size_t(n), nullptr), done(size_t(n), nullptr) {}
  ~VirtualGpuEvents() override {
    for (cudaEvent_t e : ready) {
      if (e) cudaEventDestroy(e);
    }
    for (cudaEvent_t e : done) {
      if (e) cudaEventDestroy(e);
    }
  }
  std::vector<cudaEvent_t> ready;  // per group rank
  std::vector<cudaEvent_t> done;   // per group rank
};

class VirtualGpuComm final : public InProcessComm {
 public:
  VirtualGpuComm(std::shared_ptr<detail::InProcessGroup> group, int32_t rank, int deviceOrdinal)
      : InProcessComm(std::move(group), rank), m_device(deviceOrdinal) {}

  bool supportsDevice() const override { return true; }
  Status synchronizeDevice(void* stream) override;

 protected:
  Status runDeviceCollective(const CollectiveCall& call) override;
  std::shared_ptr<detail::GroupExtension> newGroupExtension(int32_t groupSize) const override {
    return std::make_shared<VirtualGpuEvents>(groupSize);
  }
  std::unique_ptr<Communicator> newMember(std::shared_ptr<detail::InProcessGroup> group,
                                          int32_t rank) const override {
    return std::make_unique<VirtualGpuComm>(std::move(group), rank, m_device);
  }

 private:
  VirtualGpuEvents& events() const { return *static_cast<VirtualGpuEvents*>(groupExtension()); }
  Status markReady(cudaStream_t stream);
  Status checkGroupLimit(const CollectiveCall& call) const;
  Status waitForPeers(cudaStream_t stream, const std::vector<cudaEvent_t>& peerEvents) const;
  Status enqueueReads(const CollectiveCall& call, cudaStream_t stream, void*& temp) const;
  Status enqueueReduce(const CollectiveCall& call, cudaStream_t stream, void* out) const;
  Status finish(const CollectiveCall& call, cudaStream_t stream, void*& temp) const;
  std::string callName(const CollectiveCall& call) const {
    return std::string(collectiveOpName(call.op)) + " #" + std::to_string(call.seq);
  }

  int m_device;
  std::string m_lastDeviceCall;  // "all_reduce #5": the last device collective queued
};

// Makes the device current, creates this rank's events on first use and records "ready" on the
// call's stream (everything queued before the collective has written its inputs).
Status VirtualGpuComm::markReady(cudaStream_t stream) {
  MOEWB_CUDA_RETURN_IF_ERROR(cudaSetDevice(m_device));
  VirtualGpuEvents& ev = events();
  const size_t me = size_t(rank());
  if (!ev.ready[me]) {
    MOEWB_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&ev.ready[me], cudaEventDisableTiming));
  }
  if (!ev.done[me]) {
    MOEWB_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&ev.done[me], cudaEventDisableTiming));
  }
  MOEWB_CUDA_RETURN_IF_ERROR(cudaEventRecord(ev.ready[me], stream));
  return Status::ok();
}

// Every rank computes the same answer (the group size), so all ranks fail together.
Status VirtualGpuComm::checkGroupLimit(const CollectiveCall& call) const {
  const bool reduces =
      call.op == CollectiveOp::kAllReduce || call.op == CollectiveOp::kReduceScatter;
  if (reduces && worldSize() > kMaxReducePeers) {
    return invalidArgument(
        callName(call) + ": device reductions on virtual ranks accept groups of at most " +
        std::to_string(kMaxReducePeers) + " ranks, this group has " + std::to_string(worldSize()));
  }
  return Status::ok();
}

Status VirtualGpuComm::waitForPeers(cudaStream_t stream,
                                    const std::vector<cudaEvent_t>& peerEvents) const {
  for (int32_t r = 0; r < worldSize(); ++r) {
    if (r == rank()) continue;
    MOEWB_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(stream, peerEvents[size_t(r)], 0));
  }
  return Status::ok();
}

Status VirtualGpuComm::enqueueReduce(const CollectiveCall& call, cudaStream_t stream,
                                     void* out) const {
  std::vector<const void*> peers(static_cast<size_t>(worldSize()));
  for (int32_t r = 0; r < worldSize(); ++r) peers[size_t(r)] = peerCall(r).send;
  const int64_t offset = call.op == CollectiveOp::kReduceScatter ? rank() * call.recvCount : 0;
  return reducePeerBlocks(stream, peers.data(), worldSize(), offset, call.recvCount, call.dtype,
                          call.reduce, out);
}

// Between the rendezvous: waits for the peers' inputs, queues this rank's copies or reduction
// (allReduce into `temp`, allocated here) and records "done".
Status VirtualGpuComm::enqueueReads(const CollectiveCall& call, cudaStream_t stream,
                                    void*& temp) const {
  MOEWB_RETURN_IF_ERROR(waitForPeers(stream, events().ready));
  const int64_t n = worldSize();
  const int64_t me = rank();
  const int64_t e = commDataTypeBytes(call.dtype);
  auto* recv = static_cast<char*>(call.recv);
  auto peerSend = [&](int64_t r) { return static_cast<const char*>(peerCall(int32_t(r)).send); };
  auto copy = [&](char* dst, const char* src, int64_t bytes) -> Status {
    if (bytes == 0 || dst == src) return Status::ok();
    MOEWB_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(dst, src, size_t(bytes), cudaMemcpyDeviceToDevice, stream));
    return Status::ok();
  };
  switch (call.op) {
    case CollectiveOp::kAllToAll: {
      const int64_t block = call.sendCount / n * e;
      for (int64_t r = 0; r < n; ++r) {
        MOEWB_RETURN_IF_ERROR(copy(recv + r * block, peerSend(r) + me * block, block));
      }
      break;
    }
    case CollectiveOp::kAllToAllV:
      for (int64_t r = 0; r < n; ++r) {
        const CollectiveCall& peer = peerCall(int32_t(r));
        MOEWB_RETURN_IF_ERROR(copy(recv + call.recvDispls[size_t(r)] * e,
                                   peerSend(r) + peer.sendDispls[size_t(me)] * e,
                                   call.recvCounts[size_t(r)] * e));
      }
      break;
    case CollectiveOp::kAllGather: {
      const int64_t block = call.sendCount * e;
      for (int64_t r = 0; r < n; ++r)
        MOEWB_RETURN_IF_ERROR(copy(recv + r * block, peerSend(r), block));
      break;
    }
    case CollectiveOp::kReduceScatter:
      MOEWB_RETURN_IF_ERROR(enqueueReduce(call, stream, call.recv));
      break;
    case CollectiveOp::kAllReduce:
      if (call.recvCount > 0) {
        MOEWB_CUDA_RETURN_IF_ERROR(cudaMallocAsync(&temp, size_t(call.recvCount * e), stream));
        MOEWB_RETURN_IF_ERROR(enqueueReduce(call, stream, temp));
      }
      break;
    case CollectiveOp::kBroadcast:
      if (me != call.root) {
        MOEWB_RETURN_IF_ERROR(copy(recv, peerSend(call.root), call.sendCount * e));
      }
      break;
    case CollectiveOp::kBarrier:
    case CollectiveOp::kSplit:
      break;
  }
  MOEWB_CUDA_RETURN_IF_ERROR(cudaEventRecord(events().done[size_t(me)], stream));
  return Status::ok();
}

// After the second rendezvous: later work on this stream waits until every peer has read what it
// needed; then the in-place allReduce result replaces the buffer.
Status VirtualGpuComm::finish(const CollectiveCall& call, cudaStream_t stream, void*& temp) const {
  MOEWB_RETURN_IF_ERROR(waitForPeers(stream, events().done));
  if (temp) {
    MOEWB_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(call.recv, temp, size_t(call.recvCount * commDataTypeBytes(call.dtype)),
                        cudaMemcpyDeviceToDevice, stream));
    void* done = temp;
    temp = nullptr;
    MOEWB_CUDA_RETURN_IF_ERROR(cudaFreeAsync(done, stream));
  }
  return Status::ok();
}

Status VirtualGpuComm::runDeviceCollective(const CollectiveCall& call) {
  auto stream = static_cast<cudaStream_t>(call.stream);
  m_lastDeviceCall = callName(call);
  const std::string where = callName(call) + " on " + describeRank(rank()) + " (virtual GPU ranks)";
  Status local = markReady(stream);
  if (!local.isOk()) {
    // Peers fail at once instead of waiting for the timeout.
    local = local.withContext(where);
    abort(local.toString());
    return local;
  }
  detail::InProcessPost post;
  post.call = &call;
  MOEWB_RETURN_IF_ERROR(arrive(post, call));
  Status status = checkAll(call);
  if (status.isOk()) status = checkGroupLimit(call);
  const bool agreed = status.isOk();  // the same on every rank
  void* temp = nullptr;
  if (agreed) status = enqueueReads(call, stream, temp);
  drain();
  if (!agreed) return status;
  if (status.isOk()) status = finish(call, stream, temp);
  if (!status.isOk()) {
    if (temp) cudaFreeAsync(temp, stream);
    status = status.withContext(where);
    abort(status.toString());
  }
  return status;
}

Status VirtualGpuComm::synchronizeDevice(void* stream) {
  MOEWB_RETURN_IF_ERROR(checkNotAborted());
  MOEWB_CUDA_RETURN_IF_ERROR(cudaSetDevice(m_device));
  const auto deadline = std::chrono::steady_clock::now() + timeout();
  MOEWB_ASSIGN_OR_RETURN(StreamPoll state, pollStream(static_cast<cudaStream_t>(stream), deadline));
  if (state == StreamPoll::kDone) return Status::ok();
  const std::string reason =
      "synchronize_device on " + describeRank(rank()) +
      " (virtual GPU ranks): the stream did not finish within " +
      std::to_string(timeout().count()) + " ms" +
      (m_lastDeviceCall.empty() ? std::string()
                                : " (last device collective " + m_lastDeviceCall + ")");
  abort(reason);
  return cancelled(reason);
}

}  // namespace

VirtualGpuWorld::VirtualGpuWorld(int32_t worldSize, int deviceOrdinal,
                                 std::chrono::milliseconds timeout)
    : m_deviceOrdinal(deviceOrdinal) {
  const int32_t n = std::max(worldSize, 0);
  std::vector<int32_t> ranks(static_cast<size_t>(n));
  std::iota(ranks.begin(), ranks.end(), 0);
  auto group = InProcessComm::newGroup(std::move(ranks), std::make_shared<VirtualGpuEvents>(n));
  for (int32_t r = 0; r < n; ++r) {
    m_comms.push_back(std::make_unique<VirtualGpuComm>(group, r, deviceOrdinal));
    m_comms.back()->setTimeout(timeout);
  }
}

VirtualGpuWorld::~VirtualGpuWorld() = default;

Communicator& VirtualGpuWorld::comm(int32_t rank) {
  MOEWB_CHECK_MSG(rank >= 0 && rank < worldSize(),
                  "rank " << rank << " is outside the virtual GPU world of " << worldSize());
  return *m_comms[size_t(rank)];
}

Status runVirtualRanks(int32_t worldSize, int deviceOrdinal,
                       const std::function<Status(Communicator&)>& fn,
                       std::chrono::milliseconds timeout) {
  if (worldSize < 1) {
    return invalidArgument("runVirtualRanks: world size " + std::to_string(worldSize) +
                           " must be >= 1");
  }
  MOEWB_RETURN_IF_ERROR(cuda::deviceInfo(deviceOrdinal).status());
  VirtualGpuWorld world(worldSize, deviceOrdinal, timeout);
  std::vector<Communicator*> comms;
  for (int32_t r = 0; r < worldSize; ++r) comms.push_back(&world.comm(r));
  return runOnRankThreads(comms, [&](Communicator& comm) -> Status {
    MOEWB_CUDA_RETURN_IF_ERROR(cudaSetDevice(deviceOrdinal));
    return fn(comm);
  });
}

}  // namespace moewb::engine
