// Row gather / scatter of the expert-parallel sorts (see cuda_ep.h): one warp per row, 16-byte
// vector copies when the row width allows, else bf16 element copies.
#include "runtime/cuda/cuda_check.h"
#include "model/cuda/cuda_ep.h"

namespace moewb::engine::cuda {
namespace {

constexpr int kRowsPerBlock = 8;  // warps per block, one row each

// dst row dstRow[r] (or r) = src row srcRow[r] (or r); `scatter` picks which side is indexed.
__global__ void ep_move_rows_kernel(const bf16* in, const int32_t* index, bf16* out, int64_t rows,
                                    int64_t width, bool scatter) {
  const int64_t r = int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
  if (r >= rows) return;
  const int lane = threadIdx.x % 32;
  const int64_t srcRow = scatter ? r : index[r];
  const int64_t dstRow = scatter ? index[r] : r;
  const bf16* src = in + srcRow * width;
  bf16* dst = out + dstRow * width;
  if (width % 8 == 0) {
    const int4* s = reinterpret_cast<const int4*>(src);
    int4* d = reinterpret_cast<int4*>(dst);
    for (int64_t i = lane; i < width / 8; i += 32) d[i] = s[i];
  } else {
    for (int64_t i = lane; i < width; i += 32) dst[i] = src[i];
  }
}

Status moveRows(cudaStream_t stream, const bf16* in, const int32_t* index, bf16* out, int64_t rows,
                int64_t width, bool scatter) {
  if (rows == 0 || width == 0) return Status::ok();
  const unsigned blocks = unsigned((rows + kRowsPerBlock - 1) / kRowsPerBlock);
  ep_move_rows_kernel<<<blocks, kRowsPerBlock * 32, 0, stream>>>(in, index, out, rows, width,
                                                                  scatter);
  MOEWB_CUDA_RETURN_IF_LAUNCH_ERROR();
  return Status::ok();
}

}  // namespace

Status gatherRowsBf16(cudaStream_t stream, const bf16* in, const int32_t* index, bf16* out,
                      int64_t rows, int64_t width) {
  return moveRows(stream, in, index, out, rows, width, false);
}

Status scatterRowsBf16(cudaStream_t stream, const bf16* in, const int32_t* index, bf16* out,
                       int64_t rows, int64_t width) {
  return moveRows(stream, in, index, out, rows, width, true);
}

}  // namespace moewb::engine::cuda
