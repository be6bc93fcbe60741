#include "runtime/cuda/pinned_host_pool.h"

#include <cuda_runtime.h>

#include <cstdio>
#include <string>

namespace moewb::engine::cuda {
namespace {

std::string gb(int64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3f GB", double(bytes) / 1e9);
  return text;
}

}  // namespace

std::atomic<int64_t> PinnedHostPool::s_processHostAllocs{0};

PinnedHostPool::~PinnedHostPool() { freeBlock(); }

void PinnedHostPool::freeBlock() {
  if (m_base != nullptr) cudaFreeHost(m_base);
  m_base = nullptr;
  m_stats.capacityBytes = 0;
  m_stats.budgetBytes = 0;
}

Status PinnedHostPool::reserve(int64_t budgetBytes) {
  if (budgetBytes <= 0) {
    return invalidArgument("swap.pinned_budget_gb = " + gb(budgetBytes) +
                           ": the pinned host pool needs a budget above 0");
  }
  if (budgetBytes <= m_stats.capacityBytes) {
    m_stats.budgetBytes = budgetBytes;
    return Status::ok();
  }
  freeBlock();
  beginStep();
  void* base = nullptr;
  ++m_stats.hostAllocs;
  ++s_processHostAllocs;
  const cudaError_t result = cudaHostAlloc(&base, size_t(budgetBytes), cudaHostAllocDefault);
  if (result != cudaSuccess) {
    cudaGetLastError();  // not sticky; clear it so later calls do not report it
    return resourceExhausted("swap.pinned_budget_gb = " + gb(budgetBytes) +
                             ": cudaHostAlloc of that much pinned host memory failed (" +
                             cudaGetErrorName(result) + ": " + cudaGetErrorString(result) +
                             "); lower swap.pinned_budget_gb or free host memory");
  }
  m_base = static_cast<char*>(base);
  m_stats.capacityBytes = budgetBytes;
  m_stats.budgetBytes = budgetBytes;
  return Status::ok();
}

void PinnedHostPool::beginStep() {
  m_stats.inUseBytes = 0;
  m_stats.peakInUseBytes = 0;
}

Result<void*> PinnedHostPool::take(int64_t bytes) {
  const int64_t slot = pinnedSlotBytes(bytes > 0 ? bytes : 1);
  if (m_base == nullptr || m_stats.inUseBytes + slot > m_stats.budgetBytes) {
    ++m_stats.refusals;
    return resourceExhausted("swap.pinned_budget_gb = " + gb(m_stats.budgetBytes) +
                             " is full: " + gb(m_stats.inUseBytes) + " in use, " + gb(slot) +
                             " more asked; the tensor stays on the device (raise "
                             "swap.pinned_budget_gb to swap it)");
  }
  void* pointer = m_base + m_stats.inUseBytes;
  m_stats.inUseBytes += slot;
  if (m_stats.inUseBytes > m_stats.peakInUseBytes) m_stats.peakInUseBytes = m_stats.inUseBytes;
  return pointer;
}

}  // namespace moewb::engine::cuda
