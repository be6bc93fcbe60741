// VirtualGpuWorld / runVirtualRanks: every device collective on 1-4 virtual ranks of one GPU in
// float32, bf16 and int64 against host values and the in-process ranks (bitwise, sums included),
// send buffers overwritten right after a call, in-place all-reduce chains, sub-groups from split,
// a rank that never calls (kCancelled naming it within the timeout), aborts from another thread,
// a stalled stream in synchronizeDevice, mixed-up and bad calls, and the collective records.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <random>
#include <thread>

#include "comm_test_util.h"
#include "runtime/cuda/cuda_context.h"

namespace moewb::engine::commtest {
namespace {

using std::chrono::seconds;

class VirtualGpuCommTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda::deviceCount() == 0) GTEST_SKIP() << "no CUDA device visible: GPU test skipped";
  }
};

void expectCode(const Status& s, StatusCode code, const std::string& needle) {
  EXPECT_EQ(s.code(), code) << s.toString();
  EXPECT_NE(s.message().find(needle), std::string::npos) << s.toString();
}

TEST_F(VirtualGpuCommTest, EveryDeviceCollectiveMatchesHostOnOneToFourRanks) {
  const Runner run = virtualRunner(milliseconds(20000));
  for (int32_t n = 1; n <= 4; ++n) checkEveryDeviceCollective(run, n, /*exactSums=*/true);
}

// Each rank overwrites its send buffer on its stream right after the call returns and sleeps a
// random time before the next call; the done events must keep peers' reads first. In-place
// all-reduce chains check that no rank copies its result back while a peer still reads it.
TEST_F(VirtualGpuCommTest, BuffersAreReusedSafelyRightAfterEachCall) {
  const int32_t n = 4;
  const int64_t block = int64_t(1) << 20;  // elements per peer: 4 MiB of float
  const int iterations = 6;
  const Status status = runVirtualRanks(n, 0, [&](Communicator& comm) -> Status {
    DeviceScope dev;
    MOEWB_RETURN_IF_ERROR(dev.init(0));
    const int32_t me = comm.rank();
    std::mt19937 rng(uint32_t(me) + 7);
    std::vector<int64_t> counts(size_t(n), block), displs;
    for (int32_t j = 0; j < n; ++j) displs.push_back(j * block);
    MOEWB_ASSIGN_OR_RETURN(float* send, dev.alloc<float>(n * block));
    MOEWB_ASSIGN_OR_RETURN(float* recv, dev.alloc<float>(n * block));
    for (int it = 0; it < iterations; ++it) {
      std::vector<float> host(size_t(n * block));
      for (int32_t j = 0; j < n; ++j) {
        for (int64_t k = 0; k < block; k += 4099)
          host[size_t(j * block + k)] = float(it * 100 + me * 10 + j);
      }
      MOEWB_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(send, host.data(), host.size() * sizeof(float),
                                                 cudaMemcpyHostToDevice, dev.stream()));
      MOEWB_RETURN_IF_ERROR(comm.allToAllVDevice(send, counts, displs, n * block, recv, counts,
                                                 displs, n * block, CommDataType::kFloat32,
                                                 dev.stream()));
      MOEWB_CUDA_RETURN_IF_ERROR(
          cudaMemsetAsync(send, 0xFF, size_t(n * block) * sizeof(float), dev.stream()));
      std::this_thread::sleep_for(std::chrono::microseconds(rng() % 3000));
      MOEWB_ASSIGN_OR_RETURN(std::vector<float> out, dev.download(recv, n * block));
      for (int32_t i = 0; i < n; ++i) {
        for (int64_t k = 0; k < block; k += 4099) {
          const float want = float(it * 100 + i * 10 + me);
          if (out[size_t(i * block + k)] != want) {
            return internalError(
                "iteration " + std::to_string(it) + " rank " + std::to_string(me) + " block from " +
                std::to_string(i) + " element " + std::to_string(k) + ": " +
                std::to_string(out[size_t(i * block + k)]) + " != " + std::to_string(want));
          }
        }
      }
    }
    // In place: buf <- sum over ranks, repeated; element k starts as (rank + 1) * (k + 1).
    const int64_t count = int64_t(1) << 21;
    std::vector<int64_t> start(static_cast<size_t>(count));
    for (int64_t k = 0; k < count; ++k) start[size_t(k)] = (me + 1) * (k + 1);
    MOEWB_ASSIGN_OR_RETURN(int64_t * buf, dev.upload(start));
    const int rounds = 8;
    for (int t = 0; t < rounds; ++t) {
      MOEWB_RETURN_IF_ERROR(
          comm.allReduceDevice(buf, count, CommDataType::kInt64, ReduceOp::kSum, dev.stream()));
      std::this_thread::sleep_for(std::chrono::microseconds(rng() % 2000));
    }
    MOEWB_RETURN_IF_ERROR(comm.synchronizeDevice(dev.stream()));
    MOEWB_ASSIGN_OR_RETURN(std::vector<int64_t> out, dev.download(buf, count));
    int64_t factor = n * (n + 1) / 2;
    for (int t = 1; t < rounds; ++t) factor *= n;
    for (int64_t k = 0; k < count; k += 997) {
      if (out[size_t(k)] != factor * (k + 1)) {
        return internalError("all-reduce chain: element " + std::to_string(k) + " = " +
                             std::to_string(out[size_t(k)]) + ", want " +
                             std::to_string(factor * (k + 1)));
      }
    }
    return Status::ok();
  });
  EXPECT_TRUE(status.isOk()) << status.toString();
}

TEST_F(VirtualGpuCommTest, SplitGivesDeviceSubGroups) {
  const Status status = runVirtualRanks(4, 0, [&](Communicator& world) -> Status {
    DeviceScope dev;
    MOEWB_RETURN_IF_ERROR(dev.init(0));
    const int32_t me = world.rank();
    // {0, 2} and {1, 3}, ordered by descending rank through the key.
    MOEWB_ASSIGN_OR_RETURN(auto pair, world.split(me % 2, -me));
    EXPECT_TRUE(pair->supportsDevice());
    EXPECT_EQ(pair->worldSize(), 2);
    EXPECT_EQ(pair->groupGlobalRanks(),
              (me % 2 == 0 ? std::vector<int32_t>{2, 0} : std::vector<int32_t>{3, 1}));
    std::vector<float> values(5, float(me + 1));
    MOEWB_ASSIGN_OR_RETURN(float* buf, dev.upload(values));
    MOEWB_RETURN_IF_ERROR(
        pair->allReduceDevice(buf, 5, CommDataType::kFloat32, ReduceOp::kSum, dev.stream()));
    MOEWB_RETURN_IF_ERROR(pair->synchronizeDevice(dev.stream()));
    MOEWB_ASSIGN_OR_RETURN(std::vector<float> sum, dev.download(buf, 5));
    const float want = me % 2 == 0 ? 1.0f + 3.0f : 2.0f + 4.0f;
    for (float v : sum) EXPECT_EQ(v, want) << "rank " << me;
    // Rank 0 joins no group; the other three gather their global ranks on the device.
    MOEWB_ASSIGN_OR_RETURN(auto three, world.split(me == 0 ? Communicator::kNoColor : 0, me));
    if (me == 0) {
      EXPECT_TRUE(three == nullptr);
    } else {
      EXPECT_EQ(three->groupGlobalRanks(), (std::vector<int32_t>{1, 2, 3}));
      MOEWB_ASSIGN_OR_RETURN(int64_t * mine, dev.upload(std::vector<int64_t>{me}));
      MOEWB_ASSIGN_OR_RETURN(int64_t * all, dev.poisoned<int64_t>(3));
      MOEWB_RETURN_IF_ERROR(
          three->allGatherDevice(mine, 1, all, CommDataType::kInt64, dev.stream()));
      MOEWB_RETURN_IF_ERROR(three->synchronizeDevice(dev.stream()));
      MOEWB_ASSIGN_OR_RETURN(std::vector<int64_t> got, dev.download(all, 3));
      EXPECT_EQ(got, (std::vector<int64_t>{1, 2, 3}));
    }
    // The parent still works after the children.
    return world.barrier();
  });
  EXPECT_TRUE(status.isOk()) << status.toString();
}

TEST_F(VirtualGpuCommTest, MissingRankTimesOutWithItsName) {
  const auto start = std::chrono::steady_clock::now();
  const Status result = runVirtualRanks(
      3, 0,
      [&](Communicator& comm) -> Status {
        if (comm.rank() == 2) return Status::ok();  // never arrives
        DeviceScope dev;
        MOEWB_RETURN_IF_ERROR(dev.init(0));
        MOEWB_ASSIGN_OR_RETURN(float* buf, dev.alloc<float>(16));
        return comm.allReduceDevice(buf, 16, CommDataType::kFloat32, ReduceOp::kSum, dev.stream());
      },
      milliseconds(300));
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(300) + seconds(2));
  EXPECT_EQ(result.code(), StatusCode::kCancelled) << result.toString();
  EXPECT_NE(result.message().find("all_reduce #1"), std::string::npos) << result.message();
  EXPECT_NE(result.message().find("waiting for rank 2 of 3"), std::string::npos)
      << result.message();
  EXPECT_NE(result.message().find("300 ms"), std::string::npos) << result.message();
}

TEST_F(VirtualGpuCommTest, AbortFromAnotherThreadFailsWaitingAndLaterCalls) {
  VirtualGpuWorld world(3, 0, milliseconds(30000));
  std::vector<Status> first(2), later(2);
  std::vector<std::thread> threads;
  const auto start = std::chrono::steady_clock::now();
  for (int32_t r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      DeviceScope dev;
      first[size_t(r)] = dev.init(0);
      if (!first[size_t(r)].isOk()) return;
      auto buf = dev.alloc<bf16>(8);
      first[size_t(r)] = buf.status();
      if (!buf.isOk()) return;
      Communicator& comm = world.comm(r);
      first[size_t(r)] =
          comm.allReduceDevice(*buf, 8, CommDataType::kBf16, ReduceOp::kSum, dev.stream());
      later[size_t(r)] = comm.broadcastDevice(*buf, 8, CommDataType::kBf16, 0, dev.stream());
    });
  }
  std::this_thread::sleep_for(milliseconds(100));
  world.comm(2).abort("watchdog: rank 2 died");  // rank 2 never calls
  for (auto& t : threads) t.join();
  EXPECT_LT(std::chrono::steady_clock::now() - start, seconds(10));
  for (int32_t r = 0; r < 2; ++r) {
    expectCode(first[size_t(r)], StatusCode::kCancelled, "watchdog: rank 2 died");
    expectCode(later[size_t(r)], StatusCode::kCancelled, "watchdog: rank 2 died");
  }
}

void CUDART_CB waitForRelease(void* flag) {
  auto* released = static_cast<std::atomic<bool>*>(flag);
  const auto limit = std::chrono::steady_clock::now() + seconds(10);
  while (!released->load() && std::chrono::steady_clock::now() < limit) {
    std::this_thread::sleep_for(milliseconds(1));
  }
}

TEST_F(VirtualGpuCommTest, SynchronizeDeviceTimesOutOnAStalledStreamAndAbortsTheGroup) {
  VirtualGpuWorld world(2, 0, milliseconds(300));
  DeviceScope dev;
  ASSERT_TRUE(dev.init(0).isOk());
  std::atomic<bool> released{false};
  ASSERT_EQ(cudaLaunchHostFunc(dev.stream(), waitForRelease, &released), cudaSuccess);
  const auto start = std::chrono::steady_clock::now();
  const Status stalled = world.comm(0).synchronizeDevice(dev.stream());
  EXPECT_LT(std::chrono::steady_clock::now() - start, milliseconds(300) + seconds(2));
  released = true;
  ASSERT_EQ(cudaStreamSynchronize(dev.stream()), cudaSuccess);
  expectCode(stalled, StatusCode::kCancelled, "did not finish within 300 ms");
  // The group is aborted: the other rank fails at once with the same reason.
  const Status later = world.comm(1).barrier();
  EXPECT_EQ(later.code(), StatusCode::kCancelled);
  EXPECT_EQ(later.message(), stalled.message());
}

TEST_F(VirtualGpuCommTest, MixedHostAndDeviceCallsAreReportedOnEveryRank) {
  std::vector<Status> statuses(2);
  const Status result = runVirtualRanks(2, 0, [&](Communicator& comm) -> Status {
    DeviceScope dev;
    MOEWB_RETURN_IF_ERROR(dev.init(0));
    std::vector<float> host(4, 1.0f);
    MOEWB_ASSIGN_OR_RETURN(float* buf, dev.upload(host));
    statuses[size_t(comm.rank())] =
        comm.rank() == 0
            ? comm.allReduce(std::span<float>(host))
            : comm.allReduceDevice(buf, 4, CommDataType::kFloat32, ReduceOp::kSum, dev.stream());
    return Status::ok();
  });
  EXPECT_TRUE(result.isOk()) << result.toString();
  for (const Status& s : statuses) {
    expectCode(s, StatusCode::kFailedPrecondition, "another memory space");
  }
}

TEST_F(VirtualGpuCommTest, BadArgumentsOnOneRankFailEveryRankNamingIt) {
  std::vector<Status> statuses(3);
  const Status result = runVirtualRanks(3, 0, [&](Communicator& comm) -> Status {
    DeviceScope dev;
    MOEWB_RETURN_IF_ERROR(dev.init(0));
    MOEWB_ASSIGN_OR_RETURN(int64_t * buf, dev.alloc<int64_t>(4));
    const int32_t root = comm.rank() == 1 ? 7 : 0;
    statuses[size_t(comm.rank())] =
        comm.broadcastDevice(buf, 4, CommDataType::kInt64, root, dev.stream());
    // The group is still usable afterwards.
    return comm.barrier();
  });
  EXPECT_TRUE(result.isOk()) << result.toString();
  for (const Status& s : statuses) {
    expectCode(s, StatusCode::kInvalidArgument, "broadcast #1 on rank 1");
  }
}

TEST_F(VirtualGpuCommTest, DeviceCallsAreRecordedWithTheirBytes) {
  std::vector<CollectiveRecord> records(2);
  const Status result = runVirtualRanks(2, 0, [&](Communicator& comm) -> Status {
    DeviceScope dev;
    MOEWB_RETURN_IF_ERROR(dev.init(0));
    comm.setObserver(
        [&, r = comm.rank()](const CollectiveRecord& rec) { records[size_t(r)] = rec; });
    MOEWB_ASSIGN_OR_RETURN(bf16 * send, dev.alloc<bf16>(10));
    MOEWB_ASSIGN_OR_RETURN(bf16 * recv, dev.alloc<bf16>(20));
    MOEWB_RETURN_IF_ERROR(comm.allGatherDevice(send, 10, recv, CommDataType::kBf16, dev.stream()));
    return comm.synchronizeDevice(dev.stream());
  });
  ASSERT_TRUE(result.isOk()) << result.toString();
  for (const CollectiveRecord& rec : records) {
    EXPECT_EQ(rec.op, "all_gather");
    EXPECT_TRUE(rec.device);
    EXPECT_TRUE(rec.ok);
    EXPECT_EQ(rec.seq, 1u);
    EXPECT_EQ(rec.bytesSent, 20);  // (n - 1) * 10 elements * 2 bytes
    EXPECT_EQ(rec.bytesReceived, 20);
  }
}

TEST_F(VirtualGpuCommTest, HostCallsBehaveAsInProcessRanks) {
  const Status result = runVirtualRanks(3, 0, [&](Communicator& comm) -> Status {
    std::vector<float> loss = {float(comm.rank()) + 0.5f, 1.0f};
    MOEWB_RETURN_IF_ERROR(comm.allReduce(std::span<float>(loss)));
    EXPECT_EQ(loss, (std::vector<float>{0.5f + 1.5f + 2.5f, 3.0f}));
    std::vector<int64_t> tokens = {comm.rank() * 10};
    MOEWB_RETURN_IF_ERROR(comm.allReduce(std::span<int64_t>(tokens), ReduceOp::kMax));
    EXPECT_EQ(tokens[0], 20);
    return comm.barrier();
  });
  EXPECT_TRUE(result.isOk()) << result.toString();
}

TEST_F(VirtualGpuCommTest, RunVirtualRanksRejectsBadWorlds) {
  const auto noop = [](Communicator&) { return Status::ok(); };
  EXPECT_EQ(runVirtualRanks(0, 0, noop).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(runVirtualRanks(2, cuda::deviceCount(), noop).code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace moewb::engine::commtest
