// Device optimizer step (see cuda_optimizer.h) over the AdamW / norm kernels of
// ops/adamw/adamw_cuda.h; the CPU twin is optim/optimizer.cpp.
#include "cuda_model/cuda_optimizer.h"

#include <cstring>
#include <vector>

#include "cuda/transfer.h"
#include "ops/adamw/adamw_cuda.h"

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

Result<double> parameterGradNormCuda(CudaContext& context, const CudaParameters& params) {
  std::vector<const float*> grads;
  std::vector<int64_t> sizes;
  for (const CudaParameter& p : params.all()) {
    if (!p.trainable) continue;
    grads.push_back(p.grad.data());
    sizes.push_back(p.grad.numel());
  }
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<uint8_t> norm,
                         context.newTensor<uint8_t>({int64_t(sizeof(double))},
                                                    MemoryCategory::kWorkspace));
  MOEWB_RETURN_IF_ERROR(globalGradNormCuda(context, grads, sizes,
                                           reinterpret_cast<double*>(norm.data())));
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
  for (CudaParameter& p : params.all()) {
    if (!p.trainable) continue;
    MOEWB_RETURN_IF_ERROR(adamwUpdateCuda(context.stream(), p.master.data(), p.grad.data(),
                                          p.adamM.data(), p.adamV.data(), p.compute.data(),
                                          p.master.numel(), hyper, p.decay, scale.data()));
  }
  return result;
}

}  // namespace moewb::engine::cuda
