// The peer-block reduction kernel of the virtual ranks (peer_reduce.h).
#include <cuda_bf16.h>

#include <string>

#include "comm/cuda/peer_reduce.h"
#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/elementwise.h"

namespace moewb::engine {
namespace {

// The peers' base pointers, passed by value in the launch (64 x 8 bytes).
struct PeerPointers {
  const void* ptr[kMaxReducePeers];
};

// How one element type is loaded into its accumulator type and stored back.
template <typename T>
struct Accumulate {
  using Acc = T;
  __device__ static Acc load(const T& v) { return v; }
  __device__ static T store(Acc v) { return v; }
};

template <>
struct Accumulate<__nv_bfloat16> {
  using Acc = float;
  __device__ static float load(const __nv_bfloat16& v) { return __bfloat162float(v); }
  __device__ static __nv_bfloat16 store(float v) { return __float2bfloat16_rn(v); }
};

// out[i] = peer0[offset+i] (+|max) peer1[offset+i] ... in peer order; grid-stride over count.
// Max keeps the running value unless the next is larger (std::max's rule, as the host loop).
template <typename T>
__global__ void peer_reduce_fwd_kernel(PeerPointers peers, int32_t peerCount, int64_t offset,
                                       int64_t count, bool isMax, T* out) {
  using A = Accumulate<T>;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += stride) {
    typename A::Acc acc = A::load(static_cast<const T*>(peers.ptr[0])[offset + i]);
    for (int32_t r = 1; r < peerCount; ++r) {
      const typename A::Acc v = A::load(static_cast<const T*>(peers.ptr[r])[offset + i]);
      if (isMax) {
        acc = acc < v ? v : acc;
      } else {
        acc = acc + v;
      }
    }
    out[i] = A::store(acc);
  }
}

template <typename T>
Status launch(cudaStream_t stream, const PeerPointers& peers, int32_t peerCount, int64_t offset,
              int64_t count, ReduceOp op, void* out) {
  peer_reduce_fwd_kernel<T><<<cuda::gridFor(count), 256, 0, stream>>>(
      peers, peerCount, offset, count, op == ReduceOp::kMax, static_cast<T*>(out));
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::ok();
}

}  // namespace

Status reducePeerBlocks(cudaStream_t stream, const void* const* peers, int32_t peerCount,
                        int64_t offset, int64_t count, CommDataType dtype, ReduceOp op, void* out) {
  if (peerCount < 1 || peerCount > kMaxReducePeers) {
    return invalidArgument("reducePeerBlocks: " + std::to_string(peerCount) +
                           " peers; accepted 1.." + std::to_string(kMaxReducePeers));
  }
  if (count < 0)
    return invalidArgument("reducePeerBlocks: negative count " + std::to_string(count));
  if (count == 0) return Status::ok();
  PeerPointers table{};
  for (int32_t r = 0; r < peerCount; ++r) table.ptr[r] = peers[r];
  switch (dtype) {
    case CommDataType::kFloat32:
      return launch<float>(stream, table, peerCount, offset, count, op, out);
    case CommDataType::kInt64:
      return launch<int64_t>(stream, table, peerCount, offset, count, op, out);
    case CommDataType::kBf16:
      return launch<__nv_bfloat16>(stream, table, peerCount, offset, count, op, out);
  }
  return invalidArgument("reducePeerBlocks: unknown element type");
}

}  // namespace moewb::engine
