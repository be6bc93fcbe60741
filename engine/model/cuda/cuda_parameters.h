// CudaParameters: the device copy of a model's parameters for mixed-precision training: per
// parameter an fp32 master value, its bf16 compute copy (what the ops read), an fp32 gradient
// and fp32 AdamW moments (trainable parameters only), in the host model's parameter order and
// under its names ("layers.0.attn.wq").
//
// Operations: upload from / download to a host Model<float>'s parameters (weights and moments,
// for checkpoints), look parameters up by name, zero the gradients, refresh the bf16 copies.
// Memory categories: weights (master + compute copy), grads, optimizer.
// Costs: upload/download O(parameters) over PCIe; zeroGrads, the norm and AdamW one launch each
// for the whole set (multi-tensor plans, built on first use and whenever a buffer moved).
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "runtime/cuda/cuda_context.h"
#include "model/cpu/parameter.h"
#include "ops/adamw/multi_tensor_adamw.h"

namespace moewb::engine::cuda {

struct CudaParameter {
  std::string name;
  std::vector<int64_t> shape;
  DeviceTensor<float> master;   // fp32 value
  DeviceTensor<bf16> compute;   // bf16 copy the ops read
  DeviceTensor<float> grad;     // fp32, accumulated by backward
  DeviceTensor<float> adamM;    // empty when frozen
  DeviceTensor<float> adamV;
  bool decay = true;
  bool trainable = true;
};

class CudaParameters {
 public:
  // Uploads every parameter of `host` (values and moments) to the device.
  // Errors: kResourceExhausted, kInternal.
  static Result<CudaParameters> upload(CudaContext& context,
                                       const std::vector<Parameter<float>>& host);

  // A set made of `params` (e.g. FSDP shards), looked up by their names.
  static CudaParameters adopt(std::vector<CudaParameter> params);

  // Copies values and moments back into `host` (same model). Waits for the stream.
  Status download(CudaContext& context, std::vector<Parameter<float>>& host) const;
  // Copies the gradients back into host grads (tests and alignment dumps). Waits.
  Status downloadGrads(CudaContext& context, std::vector<Parameter<float>>& host) const;
  // Overwrites values and moments from `host` (after a checkpoint load).
  Status reload(CudaContext& context, const std::vector<Parameter<float>>& host);

  // Index of the parameter called `name`, or -1.
  int find(const std::string& name) const;
  // The parameter called `name`; aborts when it does not exist (a bug in the model code).
  CudaParameter& at(const std::string& name);
  const CudaParameter& at(const std::string& name) const;
  std::vector<CudaParameter>& all() { return m_params; }
  const std::vector<CudaParameter>& all() const { return m_params; }

  // Zeroes every gradient (queued on the stream).
  Status zeroGrads(CudaContext& context);
  // compute = bf16(master) for every parameter (after the optimizer step or a reload).
  Status refreshComputeCopies(CudaContext& context);

  // The multi-tensor plan over the trainable parameters (master, grad, moments, compute copy,
  // decay flag), for the norm and AdamW; rebuilt (waits for the stream) when a buffer moved.
  // Errors: kResourceExhausted, kInternal.
  Result<MultiTensorPlan*> trainablePlan(CudaContext& context);

 private:
  std::vector<CudaParameter> m_params;
  MultiTensorPlan m_trainablePlan;
  MultiTensorPlan m_gradsPlan;  // every non-empty gradient, for zeroGrads
  std::unordered_map<std::string, int> m_index;
};

}  // namespace moewb::engine::cuda
