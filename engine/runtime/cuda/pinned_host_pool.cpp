#include "runtime/cuda/pinned_host_pool.h"

#include <cuda_runtime.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>

#include "runtime/host_slices.h"

namespace moewb::engine::cuda {
namespace {

std::string gb(int64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3f GB", double(bytes) / 1e9);
  return text;
}

// Writes one byte of every page of [base, base + bytes) on up to kTouchThreads threads, so the
// kernel faults the pages in (and zeroes them) in parallel before cudaHostRegister pins them.
constexpr unsigned kTouchThreads = 8;

void touchPages(char* base, int64_t bytes) {
  const int64_t page = std::max<int64_t>(4096, int64_t(sysconf(_SC_PAGESIZE)));
  const int64_t pages = (bytes + page - 1) / page;
  const unsigned threads =
      std::max(1u, std::min(kTouchThreads, std::thread::hardware_concurrency()));
  forEachSliceOnThreads(pages, 1, threads, [&](int64_t first, int64_t last) {
    for (int64_t p = first; p < last; ++p) base[p * page] = 0;
  });
}

}  // namespace

std::atomic<int64_t> PinnedHostPool::s_processHostAllocs{0};

PinnedHostPool::~PinnedHostPool() { freeBlock(); }

void PinnedHostPool::freeBlock() {
  if (m_base != nullptr) {
    cudaHostUnregister(m_base);
    munmap(m_base, size_t(m_stats.capacityBytes));
  }
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
  ++m_stats.hostAllocs;
  ++s_processHostAllocs;
  void* base = mmap(nullptr, size_t(budgetBytes), PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED) {
    return resourceExhausted("swap.pinned_budget_gb = " + gb(budgetBytes) +
                             ": mapping that much host memory for the pinned pool failed (" +
                             std::strerror(errno) +
                             "); lower swap.pinned_budget_gb or free host memory");
  }
  touchPages(static_cast<char*>(base), budgetBytes);
  const cudaError_t result = cudaHostRegister(base, size_t(budgetBytes), cudaHostRegisterDefault);
  if (result != cudaSuccess) {
    cudaGetLastError();  // not sticky; clear it so later calls do not report it
    munmap(base, size_t(budgetBytes));
    return resourceExhausted("swap.pinned_budget_gb = " + gb(budgetBytes) +
                             ": pinning that much host memory failed (cudaHostRegister: " +
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
