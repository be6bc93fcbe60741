// Device optimizer step (see cuda_optimizer.h) over the multi-tensor AdamW / norm launches of
// ops/adamw/multi_tensor_adamw.h; the CPU twin is optim/optimizer.cpp.
#include "train/cuda/cuda_optimizer.h"

#include <cstring>
#include <vector>

#include "runtime/cuda/transfer.h"
#include "ops/adamw/multi_tensor_adamw.h"

namespace moewb::engine::cuda {
namespace {

// The fp32 norm lives in a device double; read it as raw bytes (transfer.h moves float / int).
Result<double> readDeviceDouble(CudaContext& context, const DeviceTensor<uint8_t>& bytes) {
  MOEWB_ASSIGN_OR_RETURN(Tensor<uint8_t> host, toHost(context, bytes));
  double value = 0;
  std::memcpy(&value, host.data(), sizeof value);
  return value;
}

}  // namespace

Result<double> parameterGradNormCuda(CudaContext& context, CudaParameters& params) {
  MOEWB_ASSIGN_OR_RETURN(MultiTensorPlan * plan, params.trainablePlan(context));
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<uint8_t> norm,
                         context.newTensor<uint8_t>({int64_t(sizeof(double))},
                                                    MemoryCategory::kWorkspace));
  MOEWB_RETURN_IF_ERROR(
      multiTensorGradNormCuda(context.stream(), *plan, reinterpret_cast<double*>(norm.data())));
  return readDeviceDouble(context, norm);
}

Result<OptimizerStepResult> optimizerStepCuda(CudaContext& context, CudaParameters& params,
                                              const OptimSection& optim, int64_t step,
                                              double gradNorm) {
  OptimizerStepResult result;
  result.gradNorm = gradNorm;
  result.lr = learningRate(optim, step);
  if (optim.gradClip > 0 && gradNorm > optim.gradClip) {
    result.clipScale = optim.gradClip / (gradNorm + 1e-6);
  }
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<float> scale,
                         context.newTensor<float>({1}, MemoryCategory::kWorkspace));
  Tensor<float> scaleHost({1});
  scaleHost[0] = float(result.clipScale);
  MOEWB_RETURN_IF_ERROR(copyToDevice(context, scaleHost, scale));
  AdamWHyper hyper;
  hyper.lr = result.lr;
  hyper.beta1 = optim.beta1;
  hyper.beta2 = optim.beta2;
  hyper.eps = optim.eps;
  hyper.weightDecay = optim.weightDecay;
  hyper.step = step + 1;
  MOEWB_ASSIGN_OR_RETURN(MultiTensorPlan * plan, params.trainablePlan(context));
  MOEWB_RETURN_IF_ERROR(multiTensorAdamWCuda(context.stream(), *plan, hyper, scale.data()));
  return result;
}

}  // namespace moewb::engine::cuda
