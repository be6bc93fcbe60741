// In-process communicator: rendezvous, cross-rank checks, copy/reduce loops and rank threads.
#include "comm/in_process_comm.h"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <mutex>
#include <numeric>
#include <string>
#include <thread>
#include <utility>

#include "moewb/base/check.h"

namespace moewb::engine {
namespace detail {

// State shared by the ranks of one group.
struct InProcessGroup {
  InProcessGroup(std::vector<int32_t> ranks, std::shared_ptr<GroupExtension> ext)
      : globalRanks(std::move(ranks)),
        extension(std::move(ext)),
        posts(globalRanks.size(), nullptr),
        arrived(globalRanks.size(), 0) {}

  const std::vector<int32_t> globalRanks;  // global rank of each group rank
  const std::shared_ptr<GroupExtension> extension;  // a derived communicator's state, or null
  std::mutex mutex;
  std::condition_variable cv;
  std::vector<const InProcessPost*> posts;  // per group rank, valid during one collective
  std::vector<char> arrived;                // per group rank, in the current rendezvous
  int32_t arrivedCount = 0;
  uint64_t generation = 0;  // completed rendezvous
  bool aborted = false;
  std::string abortReason;
  std::vector<std::weak_ptr<InProcessGroup>> children;  // groups split from this one
};

}  // namespace detail

using detail::InProcessGroup;
using detail::InProcessPost;

namespace {

// Marks `group` and all groups split from it aborted and wakes their waiters. Keeps the first reason.
void abortGroup(const std::shared_ptr<InProcessGroup>& group, const std::string& reason) {
  std::vector<std::weak_ptr<InProcessGroup>> children;
  {
    std::lock_guard<std::mutex> lock(group->mutex);
    if (!group->aborted) {
      group->aborted = true;
      group->abortReason = reason;
    }
    children = group->children;
  }
  group->cv.notify_all();
  for (const auto& weak : children) {
    if (auto child = weak.lock()) abortGroup(child, reason);
  }
}

}  // namespace

std::shared_ptr<InProcessGroup> InProcessComm::newGroup(
    std::vector<int32_t> globalRanks, std::shared_ptr<detail::GroupExtension> extension) {
  return std::make_shared<InProcessGroup>(std::move(globalRanks), std::move(extension));
}

InProcessComm::InProcessComm(std::shared_ptr<InProcessGroup> group, int32_t rank)
    : m_group(std::move(group)), m_rank(rank) {}

int32_t InProcessComm::worldSize() const { return int32_t(m_group->globalRanks.size()); }

int32_t InProcessComm::globalRank() const { return m_group->globalRanks[size_t(m_rank)]; }

std::vector<int32_t> InProcessComm::groupGlobalRanks() const { return m_group->globalRanks; }

void InProcessComm::abort(const std::string& reason) { abortGroup(m_group, reason); }

Status InProcessComm::runDeviceCollective(const CollectiveCall& call) {
  return failedPrecondition(std::string(collectiveOpName(call.op)) +
                            ": in-process ranks run collectives on host memory only");
}

std::shared_ptr<detail::GroupExtension> InProcessComm::newGroupExtension(int32_t) const {
  return nullptr;
}

std::unique_ptr<Communicator> InProcessComm::newMember(std::shared_ptr<InProcessGroup> group,
                                                       int32_t rank) const {
  return std::make_unique<InProcessComm>(std::move(group), rank);
}

const CollectiveCall& InProcessComm::peerCall(int32_t r) const {
  return *m_group->posts[size_t(r)]->call;
}

Status InProcessComm::checkNotAborted() const {
  std::lock_guard<std::mutex> lock(m_group->mutex);
  if (m_group->aborted) return cancelled(m_group->abortReason);
  return Status::ok();
}

detail::GroupExtension* InProcessComm::groupExtension() const { return m_group->extension.get(); }

std::string InProcessComm::describeRank(int32_t r) const {
  const InProcessGroup& g = *m_group;
  std::string s = "rank " + std::to_string(r);
  if (g.globalRanks[size_t(r)] != r) {
    s += " (global rank " + std::to_string(g.globalRanks[size_t(r)]) + ")";
  }
  return s;
}

Status InProcessComm::arrive(const InProcessPost& post, const CollectiveCall& call) {
  InProcessGroup& g = *m_group;
  std::unique_lock<std::mutex> lock(g.mutex);
  if (g.aborted) return cancelled(g.abortReason);
  const uint64_t generation = g.generation;
  g.posts[size_t(m_rank)] = &post;
  g.arrived[size_t(m_rank)] = 1;
  if (++g.arrivedCount == worldSize()) {
    std::fill(g.arrived.begin(), g.arrived.end(), 0);
    g.arrivedCount = 0;
    ++g.generation;
    lock.unlock();
    g.cv.notify_all();
    return Status::ok();
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout();
  g.cv.wait_until(lock, deadline, [&] { return g.generation != generation || g.aborted; });
  if (g.generation != generation) return Status::ok();
  if (g.aborted) return cancelled(g.abortReason);
  std::string missing;
  for (int32_t r = 0; r < worldSize(); ++r) {
    if (g.arrived[size_t(r)]) continue;
    missing += (missing.empty() ? "" : ", ") + describeRank(r);
  }
  const std::string reason = std::string(collectiveOpName(call.op)) + " #" +
                             std::to_string(call.seq) + " timed out after " +
                             std::to_string(timeout().count()) + " ms on " +
                             describeRank(m_rank) + " waiting for " + missing + " of " +
                             std::to_string(worldSize()) + " ranks";
  lock.unlock();
  abortGroup(m_group, reason);
  return cancelled(reason);
}

void InProcessComm::drain() {
  InProcessGroup& g = *m_group;
  std::unique_lock<std::mutex> lock(g.mutex);
  const uint64_t generation = g.generation;
  if (++g.arrivedCount == worldSize()) {
    g.arrivedCount = 0;
    ++g.generation;
    lock.unlock();
    g.cv.notify_all();
    return;
  }
  g.cv.wait(lock, [&] { return g.generation != generation; });
}

Status InProcessComm::checkAll(const CollectiveCall& call) const {
  const InProcessGroup& g = *m_group;
  const int32_t n = worldSize();
  const std::string name = std::string(collectiveOpName(call.op)) + " #" + std::to_string(call.seq);
  const CollectiveCall& c0 = *g.posts[0]->call;
  for (int32_t r = 0; r < n; ++r) {
    const CollectiveCall& c = *g.posts[size_t(r)]->call;
    if (c.op != c0.op || c.seq != c0.seq || c.dtype != c0.dtype || c.space != c0.space) {
      return failedPrecondition(
          std::string("collective mismatch: ") + describeRank(0) + " called " +
          collectiveOpName(c0.op) + " #" + std::to_string(c0.seq) + ", " + describeRank(r) +
          " called " + collectiveOpName(c.op) + " #" + std::to_string(c.seq) +
          (c.dtype != c0.dtype ? " with another element type" : "") +
          (c.space != c0.space ? " on another memory space (host vs device)" : ""));
    }
  }
  for (int32_t r = 0; r < n; ++r) {
    const Status& s = g.posts[size_t(r)]->call->argError;
    if (!s.isOk()) return Status(s.code(), name + " on " + describeRank(r) + ": " + s.message());
  }
  for (int32_t r = 0; r < n; ++r) {
    const CollectiveCall& c = *g.posts[size_t(r)]->call;
    bool same = true;
    switch (call.op) {
      case CollectiveOp::kAllToAll:
      case CollectiveOp::kAllGather:
        same = c.sendCount == c0.sendCount;
        break;
      case CollectiveOp::kReduceScatter:
        same = c.recvCount == c0.recvCount;
        break;
      case CollectiveOp::kAllReduce:
        same = c.sendCount == c0.sendCount && c.reduce == c0.reduce;
        break;
      case CollectiveOp::kBroadcast:
        same = c.sendCount == c0.sendCount && c.root == c0.root;
        break;
      case CollectiveOp::kAllToAllV:
        for (int32_t j = 0; j < n; ++j) {
          const int64_t sent = g.posts[size_t(j)]->call->sendCounts[size_t(r)];
          if (c.recvCounts[size_t(j)] != sent) {
            return invalidArgument(name + ": " + describeRank(r) + " expects " +
                                   std::to_string(c.recvCounts[size_t(j)]) + " elements from " +
                                   describeRank(j) + ", which sends " + std::to_string(sent));
          }
        }
        break;
      case CollectiveOp::kBarrier:
      case CollectiveOp::kSplit:
        break;
    }
    if (!same) {
      return invalidArgument(name + ": " + describeRank(r) +
                             " disagrees with rank 0 on the size, root or reduction (send " +
                             std::to_string(c.sendCount) + " vs " + std::to_string(c0.sendCount) +
                             ", recv " + std::to_string(c.recvCount) + " vs " +
                             std::to_string(c0.recvCount) + " elements)");
    }
  }
  return Status::ok();
}

namespace {

template <typename T>
void reduceInto(T* out, const InProcessGroup& g, int64_t offset, int64_t count, ReduceOp op) {
  const auto* first = static_cast<const T*>(g.posts[0]->call->send) + offset;
  std::copy(first, first + count, out);
  for (size_t r = 1; r < g.posts.size(); ++r) {
    const auto* in = static_cast<const T*>(g.posts[r]->call->send) + offset;
    if (op == ReduceOp::kSum) {
      for (int64_t k = 0; k < count; ++k) out[k] += in[k];
    } else {
      for (int64_t k = 0; k < count; ++k) out[k] = std::max(out[k], in[k]);
    }
  }
}

}  // namespace

// Reads the peers' posted buffers and writes this rank's output, or for the in-place reductions
// into `scratch` (copied to the output after the last rendezvous).
void InProcessComm::compute(const CollectiveCall& call, std::vector<char>& scratch) const {
  const InProcessGroup& g = *m_group;
  const int64_t n = worldSize();
  const int64_t e = commDataTypeBytes(call.dtype);
  auto* recv = static_cast<char*>(call.recv);
  auto peerSend = [&](int64_t r) { return static_cast<const char*>(g.posts[size_t(r)]->call->send); };
  switch (call.op) {
    case CollectiveOp::kAllToAll: {
      const int64_t block = call.sendCount / n * e;
      for (int64_t r = 0; r < n; ++r) {
        std::memcpy(recv + r * block, peerSend(r) + m_rank * block, size_t(block));
      }
      break;
    }
    case CollectiveOp::kAllToAllV:
      for (int64_t r = 0; r < n; ++r) {
        const CollectiveCall& peer = *g.posts[size_t(r)]->call;
        const int64_t bytes = call.recvCounts[size_t(r)] * e;
        if (bytes == 0) continue;
        std::memcpy(recv + call.recvDispls[size_t(r)] * e,
                    peerSend(r) + peer.sendDispls[size_t(m_rank)] * e, size_t(bytes));
      }
      break;
    case CollectiveOp::kAllGather: {
      const int64_t block = call.sendCount * e;
      for (int64_t r = 0; r < n; ++r) {
        if (block > 0) std::memcpy(recv + r * block, peerSend(r), size_t(block));
      }
      break;
    }
    case CollectiveOp::kReduceScatter:
    case CollectiveOp::kAllReduce: {
      const int64_t count = call.recvCount;
      const int64_t offset = call.op == CollectiveOp::kReduceScatter ? m_rank * count : 0;
      scratch.resize(size_t(count * e));
      if (call.dtype == CommDataType::kFloat32) {
        reduceInto(reinterpret_cast<float*>(scratch.data()), g, offset, count, call.reduce);
      } else {
        reduceInto(reinterpret_cast<int64_t*>(scratch.data()), g, offset, count, call.reduce);
      }
      break;
    }
    case CollectiveOp::kBroadcast:
      if (m_rank != call.root && call.sendCount > 0) {
        std::memcpy(recv, peerSend(call.root), size_t(call.sendCount * e));
      }
      break;
    case CollectiveOp::kBarrier:
    case CollectiveOp::kSplit:
      break;
  }
}

Status InProcessComm::runCollective(const CollectiveCall& call) {
  if (call.space == MemorySpace::kDevice) return runDeviceCollective(call);
  InProcessPost post;
  post.call = &call;
  MOEWB_RETURN_IF_ERROR(arrive(post, call));
  Status status = checkAll(call);
  std::vector<char> scratch;
  if (status.isOk()) compute(call, scratch);
  drain();
  if (status.isOk() && !scratch.empty()) std::memcpy(call.recv, scratch.data(), scratch.size());
  return status;
}

Result<std::unique_ptr<Communicator>> InProcessComm::runSplit(const CollectiveCall& call) {
  InProcessPost post;
  post.call = &call;
  MOEWB_RETURN_IF_ERROR(arrive(post, call));
  return finishSplit(call, post);
}

// After the first rendezvous of split: every rank computes the membership of its color; the
// group's leader (lowest parent rank) creates the shared state, the others pick it up from the
// leader's post after a rendezvous, and a last rendezvous keeps the posts alive until then.
Result<std::unique_ptr<Communicator>> InProcessComm::finishSplit(const CollectiveCall& call,
                                                                 InProcessPost& post) {
  InProcessGroup& g = *m_group;
  Status status = checkAll(call);
  std::vector<int32_t> members;  // parent ranks of my new group, in new-rank order
  if (status.isOk() && call.color != kNoColor) {
    for (int32_t r = 0; r < worldSize(); ++r) {
      if (g.posts[size_t(r)]->call->color == call.color) members.push_back(r);
    }
    std::stable_sort(members.begin(), members.end(), [&](int32_t a, int32_t b) {
      return g.posts[size_t(a)]->call->key < g.posts[size_t(b)]->call->key;
    });
    if (*std::min_element(members.begin(), members.end()) == m_rank) {
      std::vector<int32_t> globals;
      for (int32_t r : members) globals.push_back(g.globalRanks[size_t(r)]);
      const int32_t size = int32_t(globals.size());
      post.created = newGroup(std::move(globals), newGroupExtension(size));
      std::lock_guard<std::mutex> lock(g.mutex);
      g.children.push_back(post.created);
    }
  }
  drain();
  std::shared_ptr<InProcessGroup> created;
  int32_t newRank = 0;
  if (status.isOk() && call.color != kNoColor) {
    const int32_t leader = *std::min_element(members.begin(), members.end());
    created = g.posts[size_t(leader)]->created;
    newRank = int32_t(std::find(members.begin(), members.end(), m_rank) - members.begin());
  }
  drain();
  if (!status.isOk()) return status;
  if (!created) return std::unique_ptr<Communicator>();
  {
    // A group split from an aborted parent (aborted after the rendezvous) starts aborted.
    std::lock_guard<std::mutex> lock(g.mutex);
    if (g.aborted) {
      std::lock_guard<std::mutex> childLock(created->mutex);
      created->aborted = true;
      created->abortReason = g.abortReason;
    }
  }
  return newMember(created, newRank);
}

InProcessWorld::InProcessWorld(int32_t worldSize, std::chrono::milliseconds timeout) {
  std::vector<int32_t> ranks(size_t(std::max(worldSize, 0)));
  std::iota(ranks.begin(), ranks.end(), 0);
  auto group = InProcessComm::newGroup(std::move(ranks));
  for (int32_t r = 0; r < worldSize; ++r) {
    m_comms.push_back(std::make_unique<InProcessComm>(group, r));
    m_comms.back()->setTimeout(timeout);
  }
}

InProcessWorld::~InProcessWorld() = default;

Communicator& InProcessWorld::comm(int32_t rank) {
  MOEWB_CHECK_MSG(rank >= 0 && rank < worldSize(),
                  "rank " << rank << " is outside the world of " << worldSize());
  return *m_comms[size_t(rank)];
}

Status runRanks(int32_t worldSize, const std::function<Status(Communicator&)>& fn,
                std::chrono::milliseconds timeout) {
  if (worldSize < 1) {
    return invalidArgument("runRanks: world size " + std::to_string(worldSize) + " must be >= 1");
  }
  InProcessWorld world(worldSize, timeout);
  std::vector<Communicator*> comms;
  for (int32_t r = 0; r < worldSize; ++r) comms.push_back(&world.comm(r));
  return runOnRankThreads(comms, fn);
}

Status runOnRankThreads(std::span<Communicator* const> comms,
                        const std::function<Status(Communicator&)>& fn) {
  std::mutex errorMutex;
  Status firstError;
  std::vector<std::thread> threads;
  for (size_t r = 0; r < comms.size(); ++r) {
    threads.emplace_back([&, r] {
      Status status;
      try {
        status = fn(*comms[r]);
      } catch (const std::exception& e) {
        status = internalError(std::string("exception: ") + e.what());
      } catch (...) {
        status = internalError("unknown exception");
      }
      if (status.isOk()) return;
      status = status.withContext("rank " + std::to_string(r));
      {
        std::lock_guard<std::mutex> lock(errorMutex);
        if (firstError.isOk()) firstError = status;
      }
      comms[r]->abort(status.toString());
    });
  }
  for (auto& t : threads) t.join();
  return firstError;
}

}  // namespace moewb::engine
