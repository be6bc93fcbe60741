#include "runtime/cuda/host_readback.h"

#include <cstring>

#include "runtime/cuda/cuda_check.h"

namespace moewb::engine::cuda {
namespace {

constexpr size_t kBlockBytes = 4096;
constexpr size_t kAlignBytes = 16;

}  // namespace

HostReadback::~HostReadback() {
  for (Block& block : m_blocks) cudaFreeHost(block.data);
}

void HostReadback::reset() {
  for (Block& block : m_blocks) block.used = 0;
  m_entries.clear();
}

Result<HostReadback::Entry> HostReadback::reserve(size_t bytes) {
  for (size_t b = 0; b < m_blocks.size(); ++b) {
    Block& block = m_blocks[b];
    const size_t offset = (block.used + kAlignBytes - 1) / kAlignBytes * kAlignBytes;
    if (offset + bytes <= block.bytes) {
      block.used = offset + bytes;
      return Entry{b, offset, bytes, {}};
    }
  }
  Block block;
  block.bytes = bytes > kBlockBytes ? bytes : kBlockBytes;
  if (cudaHostAlloc(&block.data, block.bytes, cudaHostAllocDefault) != cudaSuccess) {
    (void)cudaGetLastError();
    return resourceExhausted("pinned host memory for " + std::to_string(block.bytes) +
                             " bytes of device readback");
  }
  block.used = bytes;
  m_blocks.push_back(block);
  return Entry{m_blocks.size() - 1, 0, bytes, {}};
}

template <typename T>
Result<size_t> HostReadback::add(CudaContext& context, const DeviceTensor<T>& device) {
  const size_t bytes = size_t(device.bytes());
  MOEWB_ASSIGN_OR_RETURN(Entry entry, reserve(bytes));
  entry.shape = device.shape();
  if (bytes > 0) {
    char* destination = static_cast<char*>(m_blocks[entry.block].data) + entry.offset;
    MOEWB_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(destination, device.data(), bytes,
                                               cudaMemcpyDeviceToHost, context.stream()));
  }
  m_waited = false;
  m_entries.push_back(std::move(entry));
  return m_entries.size() - 1;
}

Status HostReadback::wait(CudaContext& context) {
  MOEWB_RETURN_IF_ERROR(context.synchronize());
  m_waited = true;
  return Status::ok();
}

template <typename T>
Tensor<T> HostReadback::take(size_t index) const {
  MOEWB_CHECK(m_waited);
  MOEWB_CHECK_LT(index, m_entries.size());
  const Entry& entry = m_entries[index];
  Tensor<T> host(entry.shape);
  MOEWB_CHECK_EQ(size_t(host.bytes()), entry.bytes);
  if (entry.bytes > 0) {
    std::memcpy(host.data(), static_cast<const char*>(m_blocks[entry.block].data) + entry.offset,
                entry.bytes);
  }
  return host;
}

template Result<size_t> HostReadback::add<float>(CudaContext&, const DeviceTensor<float>&);
template Result<size_t> HostReadback::add<int32_t>(CudaContext&, const DeviceTensor<int32_t>&);
template Tensor<float> HostReadback::take<float>(size_t) const;
template Tensor<int32_t> HostReadback::take<int32_t>(size_t) const;

}  // namespace moewb::engine::cuda
