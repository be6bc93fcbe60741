// CachingAllocator on a real device: reuse, per-category accounting, observer events, recorded
// events taken in batches, and out-of-memory as a clear, recoverable Status.
#include "runtime/cuda/caching_allocator.h"

#include <gtest/gtest.h>

#include <vector>

#include "cuda_test_util.h"

namespace moewb::engine::cuda {
namespace {

using CachingAllocatorTest = CudaTest;

TEST_F(CachingAllocatorTest, ReusesFreedBlocksAndCountsPerCategory) {
  CachingAllocator allocator;
  std::vector<DeviceMemoryEvent> events;
  allocator.setObserver([&](const DeviceMemoryEvent& e) { events.push_back(e); });
  MOEWB_ASSIGN_OR_FAIL(void* a, allocator.allocate(1000, MemoryCategory::kActivations));
  MOEWB_ASSIGN_OR_FAIL(void* w, allocator.allocate(3 << 20, MemoryCategory::kWeights));
  AllocatorStats stats = allocator.stats();
  EXPECT_EQ(stats.inUseBytes[size_t(MemoryCategory::kActivations)], 1024);
  EXPECT_EQ(stats.inUseBytes[size_t(MemoryCategory::kWeights)], 4 << 20);
  EXPECT_EQ(stats.deviceMallocs, 2);
  allocator.release(a);
  MOEWB_ASSIGN_OR_FAIL(void* b, allocator.allocate(900, MemoryCategory::kWorkspace));
  EXPECT_EQ(b, a) << "a freed block of the same size class is reused";
  stats = allocator.stats();
  EXPECT_EQ(stats.cacheHits, 1);
  EXPECT_EQ(stats.deviceMallocs, 2);
  EXPECT_EQ(stats.inUseBytes[size_t(MemoryCategory::kActivations)], 0);
  EXPECT_EQ(stats.inUseBytes[size_t(MemoryCategory::kWorkspace)], 1024);
  EXPECT_EQ(stats.peakInUseBytes[size_t(MemoryCategory::kActivations)], 1024);
  allocator.release(b);
  allocator.release(w);
  ASSERT_EQ(events.size(), 6u);
  EXPECT_TRUE(events[0].isAllocation);
  EXPECT_FALSE(events[2].isAllocation);
  EXPECT_EQ(events[2].categoryInUseBytes, 0);
  EXPECT_EQ(allocator.stats().totalInUseBytes, 0);
  EXPECT_EQ(allocator.stats().reservedBytes, (4 << 20) + 1024);
  allocator.emptyCache();
  EXPECT_EQ(allocator.stats().reservedBytes, 0);
}

TEST_F(CachingAllocatorTest, RecordsEventsInOrderUntilTakenAndReusesTheCallersStorage) {
  CachingAllocator allocator;
  std::vector<DeviceMemoryEvent> events;
  MOEWB_ASSIGN_OR_FAIL(void* before, allocator.allocate(512, MemoryCategory::kWeights));
  allocator.setRecording(true);
  MOEWB_ASSIGN_OR_FAIL(void* a, allocator.allocate(1000, MemoryCategory::kActivations));
  MOEWB_ASSIGN_OR_FAIL(void* b, allocator.allocate(3000, MemoryCategory::kWorkspace));
  allocator.release(a);
  allocator.takeEvents(events);
  ASSERT_EQ(events.size(), 3u) << "only events after setRecording(true)";
  EXPECT_TRUE(events[0].isAllocation);
  EXPECT_EQ(events[0].address, reinterpret_cast<uintptr_t>(a));
  EXPECT_EQ(events[0].category, MemoryCategory::kActivations);
  EXPECT_EQ(events[1].bytes, 3072);
  EXPECT_EQ(events[1].categoryInUseBytes, 3072);
  EXPECT_FALSE(events[2].isAllocation);
  EXPECT_EQ(events[2].categoryInUseBytes, 0);
  EXPECT_LE(events[0].tsNs, events[1].tsNs);
  EXPECT_LE(events[1].tsNs, events[2].tsNs);
  const DeviceMemoryEvent* storage = events.data();
  allocator.release(b);
  std::vector<DeviceMemoryEvent> next;
  allocator.takeEvents(next);
  ASSERT_EQ(next.size(), 1u) << "taking empties the buffer";
  EXPECT_FALSE(next[0].isAllocation);
  EXPECT_EQ(next[0].address, reinterpret_cast<uintptr_t>(b));
  allocator.takeEvents(events);
  EXPECT_TRUE(events.empty());
  allocator.release(before);
  allocator.takeEvents(events);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events.data(), storage) << "the allocator recorded into the storage it was handed";
  allocator.setRecording(false);
  MOEWB_ASSIGN_OR_FAIL(void* c, allocator.allocate(100, MemoryCategory::kWorkspace));
  allocator.release(c);
  allocator.takeEvents(events);
  EXPECT_TRUE(events.empty()) << "nothing is recorded once recording is off";
}

TEST_F(CachingAllocatorTest, OutOfMemoryIsAClearStatusAndTheAllocatorStaysUsable) {
  CachingAllocator allocator(int64_t(64) << 20);
  MOEWB_ASSIGN_OR_FAIL(void* held, allocator.allocate(int64_t(40) << 20, MemoryCategory::kWeights));
  auto tooMuch = allocator.allocate(int64_t(40) << 20, MemoryCategory::kActivations);
  ASSERT_FALSE(tooMuch.isOk());
  EXPECT_EQ(tooMuch.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(tooMuch.status().message().find("activations"), std::string::npos)
      << tooMuch.status().message();
  EXPECT_NE(tooMuch.status().message().find("weights 40.0 MiB"), std::string::npos)
      << tooMuch.status().message();
  EXPECT_EQ(allocator.stats().outOfMemoryErrors, 1);
  // Nothing already allocated was touched and smaller requests still work.
  MOEWB_ASSIGN_OR_FAIL(void* small, allocator.allocate(int64_t(8) << 20, MemoryCategory::kActivations));
  EXPECT_NE(small, nullptr);
  allocator.release(small);
  allocator.release(held);
}

TEST_F(CachingAllocatorTest, RealDeviceExhaustionIsReportedNotFatal) {
  CachingAllocator allocator;
  // More than any device has: cudaMalloc fails, the allocator reports it and stays usable.
  auto huge = allocator.allocate(int64_t(1) << 50, MemoryCategory::kActivations);
  ASSERT_FALSE(huge.isOk());
  EXPECT_EQ(huge.status().code(), StatusCode::kResourceExhausted) << huge.status().toString();
  MOEWB_ASSIGN_OR_FAIL(void* ok, allocator.allocate(4096, MemoryCategory::kActivations));
  allocator.release(ok);
  MOEWB_ASSERT_OK(context().synchronize());
}

}  // namespace
}  // namespace moewb::engine::cuda
