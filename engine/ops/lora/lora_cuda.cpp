// LoRA merge and gradient conversion on the GPU (see lora_cuda.h): fp32 strided batched GEMMs
// through cuda/gemm.h plus the runtime's copy and cast.
#include "ops/lora/lora_cuda.h"

#include <algorithm>
#include <string>

#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/gemm.h"

namespace moewb::engine::cuda {
namespace {

// W viewed as [groups, rows, cols] with adapters of rank `rank`.
struct LoraShape {
  int64_t groups = 1, rows = 0, cols = 0, rank = 0;
};

Result<LoraShape> loraShape(const std::vector<int64_t>& w, const std::vector<int64_t>& a,
                            const std::vector<int64_t>& b) {
  LoraShape s;
  bool ok = false;
  if (w.size() == 2 && a.size() == 2 && b.size() == 2) {
    s = {1, w[0], w[1], a[0]};
    ok = a[1] == w[1] && b[0] == w[0] && b[1] == a[0];
  } else if (w.size() == 3 && a.size() == 3 && b.size() == 3) {
    s = {w[0], w[1], w[2], a[1]};
    ok = a[0] == w[0] && a[2] == w[2] && b[0] == w[0] && b[1] == w[1] && b[2] == a[1];
  }
  if (!ok || s.rank < 1) {
    auto text = [](const std::vector<int64_t>& shape) {
      std::string out = "[";
      for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
      return out + "]";
    };
    return invalidArgument("lora: adapter shapes A " + text(a) + ", B " + text(b) +
                           " do not fit weight " + text(w) +
                           " (want A [r, n], B [m, r] or A [E, r, n], B [E, m, r])");
  }
  return s;
}

}  // namespace

Status loraMergeCuda(CudaContext& context, const DeviceTensor<float>& w,
                     const DeviceTensor<float>& a, const DeviceTensor<float>& b, double scale,
                     DeviceTensor<bf16>& out, int64_t workspaceElements) {
  MOEWB_ASSIGN_OR_RETURN(const LoraShape s, loraShape(w.shape(), a.shape(), b.shape()));
  if (out.numel() != w.numel()) {
    return invalidArgument("lora merge: output " + out.shapeString() + " for weight " +
                           w.shapeString());
  }
  const int64_t matrix = s.rows * s.cols;
  if (matrix == 0 || s.groups == 0) return Status::ok();
  const int64_t chunk = std::clamp<int64_t>(workspaceElements / matrix, 1, s.groups);
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<float> merged,
                         context.newTensor<float>({chunk * matrix}, MemoryCategory::kWorkspace));
  for (int64_t e0 = 0; e0 < s.groups; e0 += chunk) {
    const int64_t count = std::min(chunk, s.groups - e0);
    MOEWB_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(merged.data(), w.data() + e0 * matrix,
                                               size_t(count * matrix) * sizeof(float),
                                               cudaMemcpyDeviceToDevice, context.stream()));
    // merged[e][rows, cols] += scale * B[e][rows, r] A[e][r, cols].
    const GemmOperand lhs{b.data() + e0 * s.rows * s.rank, DType::kF32, s.rank, false,
                          s.rows * s.rank};
    const GemmOperand rhs{a.data() + e0 * s.rank * s.cols, DType::kF32, s.cols, false,
                          s.rank * s.cols};
    MOEWB_RETURN_IF_ERROR(gemm(context, s.rows, s.cols, s.rank, float(scale), lhs, rhs, 1.0f,
                               GemmOutput{merged.data(), DType::kF32, s.cols, matrix}, count));
    MOEWB_RETURN_IF_ERROR(
        castFloatToBf16(context.stream(), merged.data(), out.data() + e0 * matrix, count * matrix));
  }
  return Status::ok();
}

Status loraBackwardCuda(CudaContext& context, const DeviceTensor<float>& dW,
                        const DeviceTensor<float>& a, const DeviceTensor<float>& b, double scale,
                        DeviceTensor<float>& dA, DeviceTensor<float>& dB) {
  MOEWB_ASSIGN_OR_RETURN(const LoraShape s, loraShape(dW.shape(), a.shape(), b.shape()));
  if (dA.numel() != a.numel() || dB.numel() != b.numel()) {
    return invalidArgument("lora backward: gradients " + dA.shapeString() + ", " +
                           dB.shapeString() + " for adapters " + a.shapeString() + ", " +
                           b.shapeString());
  }
  const int64_t matrix = s.rows * s.cols;
  // dB[e][rows, r] += scale * dW[e][rows, cols] (A[e][r, cols])^T.
  MOEWB_RETURN_IF_ERROR(gemm(context, s.rows, s.rank, s.cols, float(scale),
                             GemmOperand{dW.data(), DType::kF32, s.cols, false, matrix},
                             GemmOperand{a.data(), DType::kF32, s.cols, true, s.rank * s.cols},
                             1.0f, GemmOutput{dB.data(), DType::kF32, s.rank, s.rows * s.rank},
                             s.groups));
  // dA[e][r, cols] += scale * (B[e][rows, r])^T dW[e][rows, cols].
  MOEWB_RETURN_IF_ERROR(gemm(context, s.rank, s.cols, s.rows, float(scale),
                             GemmOperand{b.data(), DType::kF32, s.rank, true, s.rows * s.rank},
                             GemmOperand{dW.data(), DType::kF32, s.cols, false, matrix}, 1.0f,
                             GemmOutput{dA.data(), DType::kF32, s.cols, s.rank * s.cols},
                             s.groups));
  return Status::ok();
}

}  // namespace moewb::engine::cuda
