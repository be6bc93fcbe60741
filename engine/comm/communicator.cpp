// Communicator's shared part: argument checks, sequence numbers and collective records.
#include "comm/communicator.h"

#include <chrono>
#include <string>

namespace moewb::engine {
namespace {

int64_t nowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::string opPrefix(CollectiveOp op) { return std::string(collectiveOpName(op)) + ": "; }

// Checks the four per-peer spans of an all-to-all-v against the group size and buffer sizes.
Status checkVSpans(const CollectiveCall& c, int32_t n) {
  const std::string p = opPrefix(c.op);
  if (int64_t(c.sendCounts.size()) != n || int64_t(c.sendDispls.size()) != n ||
      int64_t(c.recvCounts.size()) != n || int64_t(c.recvDispls.size()) != n) {
    return invalidArgument(p + "counts and displacements need " + std::to_string(n) +
                           " entries each (one per rank), got send " +
                           std::to_string(c.sendCounts.size()) + "/" +
                           std::to_string(c.sendDispls.size()) + ", recv " +
                           std::to_string(c.recvCounts.size()) + "/" +
                           std::to_string(c.recvDispls.size()));
  }
  for (int32_t j = 0; j < n; ++j) {
    if (c.sendCounts[j] < 0 || c.sendDispls[j] < 0 ||
        c.sendDispls[j] + c.sendCounts[j] > c.sendCount) {
      return invalidArgument(p + "send block for rank " + std::to_string(j) + " (displacement " +
                             std::to_string(c.sendDispls[j]) + ", count " +
                             std::to_string(c.sendCounts[j]) + ") is outside the send buffer of " +
                             std::to_string(c.sendCount) + " elements");
    }
    if (c.recvCounts[j] < 0 || c.recvDispls[j] < 0 ||
        c.recvDispls[j] + c.recvCounts[j] > c.recvCount) {
      return invalidArgument(p + "recv block from rank " + std::to_string(j) + " (displacement " +
                             std::to_string(c.recvDispls[j]) + ", count " +
                             std::to_string(c.recvCounts[j]) + ") is outside the recv buffer of " +
                             std::to_string(c.recvCount) + " elements");
    }
  }
  return Status::ok();
}

// The checks one rank can make alone; cross-rank consistency is the implementation's job.
Status checkLocal(const CollectiveCall& c, int32_t n) {
  const std::string p = opPrefix(c.op);
  const std::string sizes =
      " (send " + std::to_string(c.sendCount) + ", recv " + std::to_string(c.recvCount) +
      " elements, " + std::to_string(n) + " ranks)";
  switch (c.op) {
    case CollectiveOp::kAllToAll:
      if (c.sendCount % n != 0 || c.recvCount != c.sendCount) {
        return invalidArgument(p + "send and recv need the same size, a multiple of the group size" +
                               sizes);
      }
      return Status::ok();
    case CollectiveOp::kAllToAllV:
      return checkVSpans(c, n);
    case CollectiveOp::kAllGather:
      if (c.recvCount != c.sendCount * n) {
        return invalidArgument(p + "recv needs group size x send elements" + sizes);
      }
      return Status::ok();
    case CollectiveOp::kReduceScatter:
      if (c.sendCount != c.recvCount * n) {
        return invalidArgument(p + "send needs group size x recv elements" + sizes);
      }
      return Status::ok();
    case CollectiveOp::kBroadcast:
      if (c.root < 0 || c.root >= n) {
        return invalidArgument(p + "root " + std::to_string(c.root) + " is not a rank of the group of " +
                               std::to_string(n));
      }
      return Status::ok();
    case CollectiveOp::kSplit:
      if (c.color < 0 && c.color != Communicator::kNoColor) {
        return invalidArgument(p + "color " + std::to_string(c.color) +
                               " must be >= 0 or Communicator::kNoColor");
      }
      return Status::ok();
    case CollectiveOp::kAllReduce:
    case CollectiveOp::kBarrier:
      return Status::ok();
  }
  return Status::ok();
}

template <typename T>
CollectiveCall pairCall(CollectiveOp op, std::span<const T> send, std::span<T> recv,
                        CommDataType dtype) {
  CollectiveCall c;
  c.op = op;
  c.dtype = dtype;
  c.send = send.data();
  c.sendCount = int64_t(send.size());
  c.recv = recv.data();
  c.recvCount = int64_t(recv.size());
  return c;
}

template <typename T>
CollectiveCall vCall(std::span<const T> send, std::span<const int64_t> sendCounts,
                     std::span<const int64_t> sendDispls, std::span<T> recv,
                     std::span<const int64_t> recvCounts, std::span<const int64_t> recvDispls,
                     CommDataType dtype) {
  CollectiveCall c = pairCall(CollectiveOp::kAllToAllV, send, recv, dtype);
  c.sendCounts = sendCounts;
  c.sendDispls = sendDispls;
  c.recvCounts = recvCounts;
  c.recvDispls = recvDispls;
  return c;
}

template <typename T>
CollectiveCall inPlaceCall(CollectiveOp op, std::span<T> buf, CommDataType dtype) {
  CollectiveCall c;
  c.op = op;
  c.dtype = dtype;
  c.send = buf.data();
  c.sendCount = int64_t(buf.size());
  c.recv = buf.data();
  c.recvCount = int64_t(buf.size());
  return c;
}

}  // namespace

const char* collectiveOpName(CollectiveOp op) {
  switch (op) {
    case CollectiveOp::kAllToAll: return "all_to_all";
    case CollectiveOp::kAllToAllV: return "all_to_all_v";
    case CollectiveOp::kAllGather: return "all_gather";
    case CollectiveOp::kReduceScatter: return "reduce_scatter";
    case CollectiveOp::kAllReduce: return "all_reduce";
    case CollectiveOp::kBroadcast: return "broadcast";
    case CollectiveOp::kBarrier: return "barrier";
    case CollectiveOp::kSplit: return "split";
  }
  return "unknown";
}

int64_t commDataTypeBytes(CommDataType type) {
  switch (type) {
    case CommDataType::kFloat32: return 4;
    case CommDataType::kInt64: return 8;
    case CommDataType::kBf16: return 2;
  }
  return 4;
}

const char* commDataTypeName(CommDataType type) {
  switch (type) {
    case CommDataType::kFloat32: return "float32";
    case CommDataType::kInt64: return "int64";
    case CommDataType::kBf16: return "bf16";
  }
  return "unknown";
}

namespace {

CollectiveCall deviceCall(CollectiveOp op, const void* send, int64_t sendCount, void* recv,
                          int64_t recvCount, CommDataType dtype, void* stream) {
  CollectiveCall c;
  c.op = op;
  c.dtype = dtype;
  c.send = send;
  c.sendCount = sendCount;
  c.recv = recv;
  c.recvCount = recvCount;
  c.space = MemorySpace::kDevice;
  c.stream = stream;
  return c;
}

}  // namespace

Status Communicator::allToAllVDevice(const void* send, std::span<const int64_t> sendCounts,
                                     std::span<const int64_t> sendDispls, int64_t sendCount,
                                     void* recv, std::span<const int64_t> recvCounts,
                                     std::span<const int64_t> recvDispls, int64_t recvCount,
                                     CommDataType dtype, void* stream) {
  CollectiveCall c =
      deviceCall(CollectiveOp::kAllToAllV, send, sendCount, recv, recvCount, dtype, stream);
  c.sendCounts = sendCounts;
  c.sendDispls = sendDispls;
  c.recvCounts = recvCounts;
  c.recvDispls = recvDispls;
  return run(c);
}

Status Communicator::allGatherDevice(const void* send, int64_t sendCount, void* recv,
                                     CommDataType dtype, void* stream) {
  return run(deviceCall(CollectiveOp::kAllGather, send, sendCount, recv, sendCount * worldSize(),
                        dtype, stream));
}

Status Communicator::reduceScatterDevice(const void* send, void* recv, int64_t recvCount,
                                         CommDataType dtype, void* stream) {
  return run(deviceCall(CollectiveOp::kReduceScatter, send, recvCount * worldSize(), recv,
                        recvCount, dtype, stream));
}

Status Communicator::allReduceDevice(void* buf, int64_t count, CommDataType dtype, ReduceOp op,
                                     void* stream) {
  CollectiveCall c = deviceCall(CollectiveOp::kAllReduce, buf, count, buf, count, dtype, stream);
  c.reduce = op;
  return run(c);
}

Status Communicator::broadcastDevice(void* buf, int64_t count, CommDataType dtype, int32_t root,
                                     void* stream) {
  CollectiveCall c = deviceCall(CollectiveOp::kBroadcast, buf, count, buf, count, dtype, stream);
  c.root = root;
  return run(c);
}

Status Communicator::synchronizeDevice(void* /*stream*/) {
  return failedPrecondition("synchronizeDevice: this communicator has no device support");
}

Status Communicator::allToAll(std::span<const float> send, std::span<float> recv) {
  return run(pairCall(CollectiveOp::kAllToAll, send, recv, CommDataType::kFloat32));
}
Status Communicator::allToAll(std::span<const int64_t> send, std::span<int64_t> recv) {
  return run(pairCall(CollectiveOp::kAllToAll, send, recv, CommDataType::kInt64));
}

Status Communicator::allToAllV(std::span<const float> send, std::span<const int64_t> sendCounts,
                               std::span<const int64_t> sendDispls, std::span<float> recv,
                               std::span<const int64_t> recvCounts,
                               std::span<const int64_t> recvDispls) {
  return run(vCall(send, sendCounts, sendDispls, recv, recvCounts, recvDispls,
                   CommDataType::kFloat32));
}
Status Communicator::allToAllV(std::span<const int64_t> send, std::span<const int64_t> sendCounts,
                               std::span<const int64_t> sendDispls, std::span<int64_t> recv,
                               std::span<const int64_t> recvCounts,
                               std::span<const int64_t> recvDispls) {
  return run(vCall(send, sendCounts, sendDispls, recv, recvCounts, recvDispls,
                   CommDataType::kInt64));
}

Status Communicator::allGather(std::span<const float> send, std::span<float> recv) {
  return run(pairCall(CollectiveOp::kAllGather, send, recv, CommDataType::kFloat32));
}
Status Communicator::allGather(std::span<const int64_t> send, std::span<int64_t> recv) {
  return run(pairCall(CollectiveOp::kAllGather, send, recv, CommDataType::kInt64));
}

Status Communicator::reduceScatter(std::span<const float> send, std::span<float> recv) {
  return run(pairCall(CollectiveOp::kReduceScatter, send, recv, CommDataType::kFloat32));
}

Status Communicator::allReduce(std::span<float> buf, ReduceOp op) {
  CollectiveCall c = inPlaceCall(CollectiveOp::kAllReduce, buf, CommDataType::kFloat32);
  c.reduce = op;
  return run(c);
}
Status Communicator::allReduce(std::span<int64_t> buf, ReduceOp op) {
  CollectiveCall c = inPlaceCall(CollectiveOp::kAllReduce, buf, CommDataType::kInt64);
  c.reduce = op;
  return run(c);
}

Status Communicator::broadcast(std::span<float> buf, int32_t root) {
  CollectiveCall c = inPlaceCall(CollectiveOp::kBroadcast, buf, CommDataType::kFloat32);
  c.root = root;
  return run(c);
}
Status Communicator::broadcast(std::span<int64_t> buf, int32_t root) {
  CollectiveCall c = inPlaceCall(CollectiveOp::kBroadcast, buf, CommDataType::kInt64);
  c.root = root;
  return run(c);
}

Status Communicator::barrier() {
  CollectiveCall c;
  c.op = CollectiveOp::kBarrier;
  return run(c);
}

Result<std::unique_ptr<Communicator>> Communicator::split(int32_t color, int32_t key) {
  CollectiveCall c;
  c.op = CollectiveOp::kSplit;
  c.color = color;
  c.key = key;
  c.seq = ++m_seq;
  c.argError = checkLocal(c, worldSize());
  CollectiveRecord record = makeRecord(c);
  record.startNs = nowNs();
  Result<std::unique_ptr<Communicator>> result = runSplit(c);
  record.endNs = nowNs();
  record.ok = result.isOk();
  if (result.isOk() && *result) (*result)->setTimeout(m_timeout);
  if (m_observer) m_observer(record);
  return result;
}

Status Communicator::run(CollectiveCall call) {
  if (call.space == MemorySpace::kDevice && !supportsDevice()) {
    return failedPrecondition(std::string(collectiveOpName(call.op)) +
                              ": device-memory collectives need a GPU communicator (virtual "
                              "ranks or NCCL); this one runs on host memory only");
  }
  if (call.space == MemorySpace::kHost && call.dtype == CommDataType::kBf16) {
    return invalidArgument(std::string(collectiveOpName(call.op)) +
                           ": bf16 is accepted for device-memory collectives only");
  }
  call.seq = ++m_seq;
  call.argError = checkLocal(call, worldSize());
  CollectiveRecord record = makeRecord(call);
  record.startNs = nowNs();
  Status status = runCollective(call);
  record.endNs = nowNs();
  record.ok = status.isOk();
  if (m_observer) m_observer(record);
  return status;
}

CollectiveRecord Communicator::makeRecord(const CollectiveCall& c) const {
  CollectiveRecord r;
  r.op = collectiveOpName(c.op);
  r.seq = c.seq;
  r.device = c.space == MemorySpace::kDevice;
  r.peers = groupGlobalRanks();
  const int64_t n = worldSize();
  const int64_t e = commDataTypeBytes(c.dtype);
  if (!c.argError.isOk()) return r;
  switch (c.op) {
    case CollectiveOp::kAllToAll:
      r.bytesSent = r.bytesReceived = (n - 1) * (c.sendCount / n) * e;
      r.sendBytesByPeer.assign(size_t(n), (c.sendCount / n) * e);
      break;
    case CollectiveOp::kAllToAllV:
      r.sendBytesByPeer.resize(size_t(n));
      for (int64_t j = 0; j < n; ++j) {
        r.sendBytesByPeer[size_t(j)] = c.sendCounts[size_t(j)] * e;
        if (j == rank()) continue;
        r.bytesSent += c.sendCounts[size_t(j)] * e;
        r.bytesReceived += c.recvCounts[size_t(j)] * e;
      }
      break;
    case CollectiveOp::kAllGather:
    case CollectiveOp::kAllReduce:
      r.bytesSent = r.bytesReceived = (n - 1) * c.sendCount * e;
      break;
    case CollectiveOp::kReduceScatter:
      r.bytesSent = r.bytesReceived = (n - 1) * c.recvCount * e;
      break;
    case CollectiveOp::kBroadcast:
      if (rank() == c.root) {
        r.bytesSent = (n - 1) * c.sendCount * e;
      } else {
        r.bytesReceived = c.sendCount * e;
      }
      break;
    case CollectiveOp::kBarrier:
    case CollectiveOp::kSplit:
      break;
  }
  return r;
}

}  // namespace moewb::engine
