// NcclCommunicator (createNcclWorld): option checks; a world of one rank running every device
// collective, the staged host calls, split and abort; and, when the machine has n >= 2 GPUs
// (n = 2, 4, 8; one thread per GPU, as NCCL refuses two ranks on one GPU), the same checks on n
// ranks plus a rank that skips a collective (the peers fail with kCancelled within timeout + 2 s)
// and an abort from a watchdog thread.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "comm_test_util.h"
#include "runtime/cuda/cuda_context.h"

namespace moewb::engine::commtest {
namespace {

using std::chrono::seconds;
using Clock = std::chrono::steady_clock;

class NcclCommTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda::deviceCount() == 0) GTEST_SKIP() << "no CUDA device visible: GPU test skipped";
  }
};

#define MOEWB_REQUIRE_GPUS(n)                                                           \
  if (cuda::deviceCount() < (n))                                                        \
  GTEST_SKIP() << "needs " << (n) << " GPUs (one NCCL rank per GPU), this machine has " \
               << cuda::deviceCount()

// The option checks need no device.
TEST(NcclOptions, BadOptionsAreRejectedWithWhatIsAccepted) {
  NcclWorldOptions o;
  o.uniqueId = std::string(10, 'x');
  Result<std::unique_ptr<Communicator>> r = createNcclWorld(o);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("128"), std::string::npos) << r.status().toString();
  o.uniqueId = std::string(128, '\0');
  o.worldSize = 2;
  o.rank = 2;
  r = createNcclWorld(o);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("rank 2 is outside [0, 2)"), std::string::npos)
      << r.status().toString();
  o.rank = 0;
  o.worldSize = 0;
  EXPECT_EQ(createNcclWorld(o).status().code(), StatusCode::kInvalidArgument);
  o.worldSize = 1;
  o.timeout = milliseconds(0);
  EXPECT_EQ(createNcclWorld(o).status().code(), StatusCode::kInvalidArgument);
  o.timeout = milliseconds(1000);
  o.deviceOrdinal = cuda::deviceCount() + 3;
  EXPECT_EQ(createNcclWorld(o).status().code(), StatusCode::kNotFound);
}

// Host calls (staged through the device), barrier, split (with kNoColor) and device calls on the
// sub-groups, on n ranks of `run`.
void checkHostCallsAndSplit(const Runner& run, int32_t n) {
  SCOPED_TRACE("host calls and split, " + std::to_string(n) + " ranks");
  const Status status = run(n, [&](Communicator& comm, DeviceScope& dev) -> Status {
    const int32_t me = comm.rank();
    const uint64_t firstSeq = comm.lastSequence();  // the pool reuses one world
    EXPECT_TRUE(comm.supportsDevice());
    EXPECT_EQ(comm.worldSize(), n);
    std::vector<float> loss = {float(me + 1), 2.0f};
    MOEWB_RETURN_IF_ERROR(comm.allReduce(std::span<float>(loss)));
    EXPECT_EQ(loss, (std::vector<float>{float(n * (n + 1) / 2), float(2 * n)}));
    std::vector<int64_t> most = {me};
    MOEWB_RETURN_IF_ERROR(comm.allReduce(std::span<int64_t>(most), ReduceOp::kMax));
    EXPECT_EQ(most[0], n - 1);
    std::vector<int64_t> mine = {me, me * 10}, all(size_t(2 * n), -1);
    MOEWB_RETURN_IF_ERROR(comm.allGather(std::span<const int64_t>(mine), std::span<int64_t>(all)));
    for (int32_t i = 0; i < n; ++i) {
      EXPECT_EQ(all[size_t(2 * i)], i);
      EXPECT_EQ(all[size_t(2 * i + 1)], 10 * i);
    }
    std::vector<float> blocks, part(2, -1.0f);
    for (int32_t j = 0; j < n; ++j) blocks.insert(blocks.end(), {float(me + j), 1.0f});
    MOEWB_RETURN_IF_ERROR(comm.reduceScatter(blocks, part));
    EXPECT_EQ(part, (std::vector<float>{float(n * (n - 1) / 2 + n * me), float(n)}));
    std::vector<int64_t> root = {me, 7};
    MOEWB_RETURN_IF_ERROR(comm.broadcast(std::span<int64_t>(root), n - 1));
    EXPECT_EQ(root, (std::vector<int64_t>{n - 1, 7}));
    const VLayout l = vLayout(me, n);
    std::vector<float> send(size_t(l.sendSize), -5.0f), recv(size_t(l.recvSize), -9.0f);
    for (int32_t j = 0; j < n; ++j) {
      for (int64_t k = 0; k < l.sendCounts[size_t(j)]; ++k) {
        send[size_t(l.sendDispls[size_t(j)] + k)] = Elem<float>::pattern(copyId(me, j, k));
      }
    }
    MOEWB_RETURN_IF_ERROR(comm.allToAllV(std::span<const float>(send), l.sendCounts, l.sendDispls,
                                         std::span<float>(recv), l.recvCounts, l.recvDispls));
    for (int32_t i = 0; i < n; ++i) {
      for (int64_t k = 0; k < l.recvCounts[size_t(i)]; ++k) {
        EXPECT_EQ(recv[size_t(l.recvDispls[size_t(i)] + k)],
                  Elem<float>::pattern(copyId(i, me, k)));
      }
    }
    MOEWB_RETURN_IF_ERROR(comm.barrier());
    EXPECT_EQ(comm.lastSequence() - firstSeq, 7u);
    // Halves by parity; rank 0 joins no group in the second split.
    MOEWB_ASSIGN_OR_RETURN(auto half, comm.split(me % 2, me));
    std::vector<int32_t> members;
    for (int32_t r = me % 2; r < n; r += 2) members.push_back(r);
    EXPECT_EQ(half->groupGlobalRanks(), members);
    EXPECT_EQ(half->globalRank(), me);
    std::vector<float> one = {1.0f};
    MOEWB_RETURN_IF_ERROR(half->allReduce(std::span<float>(one)));
    EXPECT_EQ(one[0], float(members.size()));
    MOEWB_ASSIGN_OR_RETURN(float* buf, dev.upload(std::vector<float>(3, float(me))));
    MOEWB_RETURN_IF_ERROR(
        half->allReduceDevice(buf, 3, CommDataType::kFloat32, ReduceOp::kMax, dev.stream()));
    MOEWB_RETURN_IF_ERROR(half->synchronizeDevice(dev.stream()));
    MOEWB_ASSIGN_OR_RETURN(std::vector<float> top, dev.download(buf, 3));
    EXPECT_EQ(top, std::vector<float>(3, float(members.back())));
    MOEWB_ASSIGN_OR_RETURN(auto rest, comm.split(me == 0 ? Communicator::kNoColor : 0, me));
    if (me == 0) {
      EXPECT_TRUE(rest == nullptr);
    } else {
      EXPECT_EQ(rest->worldSize(), n - 1);
      MOEWB_RETURN_IF_ERROR(rest->barrier());
    }
    return comm.barrier();
  });
  EXPECT_TRUE(status.isOk()) << status.toString();
}

TEST_F(NcclCommTest, WorldOfOneRunsEveryCollective) {
  Result<std::unique_ptr<NcclRankPool>> pool = NcclRankPool::create(1, milliseconds(30000));
  ASSERT_TRUE(pool.isOk()) << pool.status().toString();
  const Runner run = poolRunner(**pool);
  checkEveryDeviceCollective(run, 1, /*exactSums=*/true);
  checkHostCallsAndSplit(run, 1);
}

TEST_F(NcclCommTest, AbortMakesEveryLaterCallFailWithTheReason) {
  Result<std::string> id = ncclNewUniqueId();
  ASSERT_TRUE(id.isOk()) << id.status().toString();
  NcclWorldOptions o;
  o.uniqueId = *id;
  o.timeout = milliseconds(10000);
  auto comm = createNcclWorld(o);
  ASSERT_TRUE(comm.isOk()) << comm.status().toString();
  Communicator& c = **comm;
  auto child = c.split(0, 0);
  ASSERT_TRUE(child.isOk()) << child.status().toString();
  DeviceScope dev;
  ASSERT_TRUE(dev.init(0).isOk());
  auto buf = dev.alloc<float>(4);
  ASSERT_TRUE(buf.isOk());
  c.abort("watchdog: rank 3 stopped sending heartbeats");
  for (const Status& s :
       {c.barrier(),
        c.allReduceDevice(*buf, 4, CommDataType::kFloat32, ReduceOp::kSum, dev.stream()),
        c.synchronizeDevice(dev.stream()), (*child)->barrier()}) {
    EXPECT_EQ(s.code(), StatusCode::kCancelled) << s.toString();
    EXPECT_EQ(s.message(), "watchdog: rank 3 stopped sending heartbeats");
  }
}

TEST_F(NcclCommTest, RanksOnSeparateGpusMatchTheHost) {
  MOEWB_REQUIRE_GPUS(2);
  for (int32_t n : {2, 4, 8}) {
    if (cuda::deviceCount() < n) continue;
    SCOPED_TRACE(std::to_string(n) + " NCCL ranks");
    Result<std::unique_ptr<NcclRankPool>> pool = NcclRankPool::create(n, milliseconds(60000));
    ASSERT_TRUE(pool.isOk()) << pool.status().toString();
    const Runner run = poolRunner(**pool);
    checkEveryDeviceCollective(run, n, /*exactSums=*/false);
    checkHostCallsAndSplit(run, n);
  }
}

// The last rank skips the second all-reduce; the others fail in synchronizeDevice (or at the
// enqueue) with kCancelled naming the call and the missing peers, within timeout + 2 s, and
// their later calls fail at once with the same message.
TEST_F(NcclCommTest, SkippedCollectiveTimesOutOnThePeers) {
  MOEWB_REQUIRE_GPUS(2);
  const int32_t n = std::min(cuda::deviceCount(), 4);
  const milliseconds timeout(1000);
  std::vector<Status> failed(static_cast<size_t>(n)), later(static_cast<size_t>(n));
  std::vector<Clock::duration> waited(static_cast<size_t>(n));
  Result<std::unique_ptr<NcclRankPool>> pool = NcclRankPool::create(n, timeout);
  ASSERT_TRUE(pool.isOk()) << pool.status().toString();
  const Status status = (*pool)->run([&](Communicator& comm, DeviceScope& dev) -> Status {
    const int32_t me = comm.rank();
    MOEWB_ASSIGN_OR_RETURN(float* buf, dev.upload(std::vector<float>(1024, 1.0f)));
    MOEWB_RETURN_IF_ERROR(
        comm.allReduceDevice(buf, 1024, CommDataType::kFloat32, ReduceOp::kSum, dev.stream()));
    MOEWB_RETURN_IF_ERROR(comm.synchronizeDevice(dev.stream()));
    if (me == n - 1) {
      std::this_thread::sleep_for(timeout + seconds(1));
      comm.abort("test: the skipping rank leaves");
      return Status::ok();
    }
    const auto start = Clock::now();
    Status s =
        comm.allReduceDevice(buf, 1024, CommDataType::kFloat32, ReduceOp::kSum, dev.stream());
    if (s.isOk()) s = comm.synchronizeDevice(dev.stream());
    waited[size_t(me)] = Clock::now() - start;
    failed[size_t(me)] = s;
    const auto laterStart = Clock::now();
    later[size_t(me)] = comm.barrier();
    EXPECT_LT(Clock::now() - laterStart, milliseconds(200));
    return Status::ok();
  });
  EXPECT_TRUE(status.isOk()) << status.toString();
  for (int32_t r = 0; r + 1 < n; ++r) {
    const Status& s = failed[size_t(r)];
    EXPECT_EQ(s.code(), StatusCode::kCancelled) << "rank " << r << ": " << s.toString();
    EXPECT_NE(s.message().find("all_reduce seq 2 on rank " + std::to_string(r)), std::string::npos)
        << s.toString();
    EXPECT_NE(s.message().find("peers did not finish within 1000 ms; a peer did not arrive"),
              std::string::npos)
        << s.toString();
    EXPECT_LT(waited[size_t(r)], timeout + seconds(2)) << "rank " << r;
    EXPECT_EQ(later[size_t(r)].code(), StatusCode::kCancelled);
    EXPECT_EQ(later[size_t(r)].message(), s.message());
  }
}

// A watchdog thread that learned a peer died aborts rank 0 while it waits in synchronizeDevice
// with a long timeout; describeMissingPeers is not consulted for an abort.
TEST_F(NcclCommTest, AbortFromAWatchdogThreadStopsAWaitingRank) {
  MOEWB_REQUIRE_GPUS(2);
  Result<std::string> id = ncclNewUniqueId();
  ASSERT_TRUE(id.isOk()) << id.status().toString();
  Status waiting;
  Clock::duration waited{};
  std::vector<std::thread> threads;
  for (int32_t r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      NcclWorldOptions o;
      o.rank = r;
      o.worldSize = 2;
      o.deviceOrdinal = r;
      o.uniqueId = *id;
      o.timeout = milliseconds(30000);
      auto comm = createNcclWorld(o);
      ASSERT_TRUE(comm.isOk()) << comm.status().toString();
      DeviceScope dev;
      ASSERT_TRUE(dev.init(r).isOk());
      auto buf = dev.upload(std::vector<float>(256, 1.0f));
      ASSERT_TRUE(buf.isOk());
      Communicator& c = **comm;
      ASSERT_TRUE(c.allReduceDevice(*buf, 256, CommDataType::kFloat32, ReduceOp::kSum, dev.stream())
                      .isOk());
      ASSERT_TRUE(c.synchronizeDevice(dev.stream()).isOk());
      if (r == 1) {  // dies (leaves without the second call)
        std::this_thread::sleep_for(seconds(2));
        c.abort("test: rank 1 leaves");
        return;
      }
      std::thread watchdog([&c] {
        std::this_thread::sleep_for(milliseconds(300));
        c.abort("watchdog: rank 1 died");
      });
      const auto start = Clock::now();
      waiting = c.allReduceDevice(*buf, 256, CommDataType::kFloat32, ReduceOp::kSum, dev.stream());
      if (waiting.isOk()) waiting = c.synchronizeDevice(dev.stream());
      waited = Clock::now() - start;
      watchdog.join();
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(waiting.code(), StatusCode::kCancelled) << waiting.toString();
  EXPECT_EQ(waiting.message(), "watchdog: rank 1 died");
  EXPECT_LT(waited, seconds(5));
}

// describeMissingPeers names the ranks the launcher's store saw stop.
TEST_F(NcclCommTest, TimeoutMessageNamesTheMissingPeersWhenTold) {
  MOEWB_REQUIRE_GPUS(2);
  Result<std::string> id = ncclNewUniqueId();
  ASSERT_TRUE(id.isOk()) << id.status().toString();
  Status timedOut;
  std::vector<std::thread> threads;
  for (int32_t r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      NcclWorldOptions o;
      o.rank = r;
      o.worldSize = 2;
      o.deviceOrdinal = r;
      o.uniqueId = *id;
      o.timeout = milliseconds(800);
      o.describeMissingPeers = [] {
        return std::string("rank 1 (host b, pid 42) sent no heartbeat for 3 s");
      };
      auto comm = createNcclWorld(o);
      ASSERT_TRUE(comm.isOk()) << comm.status().toString();
      Communicator& c = **comm;
      std::vector<float> v = {1.0f};
      ASSERT_TRUE(c.allReduce(std::span<float>(v)).isOk());
      if (r == 1) {
        std::this_thread::sleep_for(seconds(2));
        c.abort("test: rank 1 leaves");
        return;
      }
      timedOut = c.barrier();  // host call: staged, then waits with the timeout
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(timedOut.code(), StatusCode::kCancelled) << timedOut.toString();
  EXPECT_NE(timedOut.message().find("barrier seq 2 on rank 0: peers did not finish within 800 ms; "
                                    "rank 1 (host b, pid 42) sent no heartbeat for 3 s"),
            std::string::npos)
      << timedOut.toString();
}

}  // namespace
}  // namespace moewb::engine::commtest
