#include "model/cuda/cuda_parameters.h"

#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda/elementwise.h"
#include "runtime/cuda/transfer.h"

namespace moewb::engine::cuda {
namespace {

// `plan` for `refs`, rebuilt only when they changed.
Result<MultiTensorPlan*> currentPlan(CudaContext& context, MultiTensorPlan& plan,
                                     const std::vector<MultiTensorRef>& refs) {
  if (!plan.matches(refs)) {
    MOEWB_ASSIGN_OR_RETURN(plan, MultiTensorPlan::create(context, refs));
  }
  return &plan;
}

}  // namespace

Result<CudaParameters> CudaParameters::upload(CudaContext& context,
                                              const std::vector<Parameter<float>>& host) {
  CudaParameters params;
  params.m_params.reserve(host.size());
  for (const Parameter<float>& p : host) {
    CudaParameter d;
    d.name = p.name;
    d.shape = p.value.shape();
    d.decay = p.decay;
    d.trainable = p.trainable;
    MOEWB_ASSIGN_OR_RETURN(d.master, toDevice(context, p.value, MemoryCategory::kWeights));
    MOEWB_ASSIGN_OR_RETURN(d.compute, context.newTensor<bf16>(d.shape, MemoryCategory::kWeights));
    MOEWB_ASSIGN_OR_RETURN(d.grad, context.newTensor<float>(d.shape, MemoryCategory::kGrads));
    if (p.trainable) {
      MOEWB_ASSIGN_OR_RETURN(d.adamM, toDevice(context, p.adamM, MemoryCategory::kOptimizer));
      MOEWB_ASSIGN_OR_RETURN(d.adamV, toDevice(context, p.adamV, MemoryCategory::kOptimizer));
    }
    params.m_index.emplace(d.name, int(params.m_params.size()));
    params.m_params.push_back(std::move(d));
  }
  MOEWB_RETURN_IF_ERROR(params.refreshComputeCopies(context));
  MOEWB_RETURN_IF_ERROR(params.zeroGrads(context));
  // The optimizer's plan too, so that the persistent memory is all in place before the first step.
  MOEWB_RETURN_IF_ERROR(params.trainablePlan(context).status());
  return params;
}

Status CudaParameters::reload(CudaContext& context, const std::vector<Parameter<float>>& host) {
  MOEWB_CHECK_EQ(host.size(), m_params.size());
  for (size_t i = 0; i < host.size(); ++i) {
    CudaParameter& d = m_params[i];
    MOEWB_CHECK(host[i].name == d.name);
    MOEWB_RETURN_IF_ERROR(copyToDevice(context, host[i].value, d.master));
    if (d.trainable) {
      MOEWB_RETURN_IF_ERROR(copyToDevice(context, host[i].adamM, d.adamM));
      MOEWB_RETURN_IF_ERROR(copyToDevice(context, host[i].adamV, d.adamV));
    }
  }
  return refreshComputeCopies(context);
}

Status CudaParameters::download(CudaContext& context, std::vector<Parameter<float>>& host) const {
  MOEWB_CHECK_EQ(host.size(), m_params.size());
  for (size_t i = 0; i < host.size(); ++i) {
    const CudaParameter& d = m_params[i];
    MOEWB_ASSIGN_OR_RETURN(host[i].value, toHost(context, d.master));
    if (d.trainable) {
      MOEWB_ASSIGN_OR_RETURN(host[i].adamM, toHost(context, d.adamM));
      MOEWB_ASSIGN_OR_RETURN(host[i].adamV, toHost(context, d.adamV));
    }
  }
  return Status::ok();
}

Status CudaParameters::downloadGrads(CudaContext& context,
                                     std::vector<Parameter<float>>& host) const {
  MOEWB_CHECK_EQ(host.size(), m_params.size());
  for (size_t i = 0; i < host.size(); ++i) {
    MOEWB_ASSIGN_OR_RETURN(host[i].grad, toHost(context, m_params[i].grad));
  }
  return Status::ok();
}

CudaParameters CudaParameters::adopt(std::vector<CudaParameter> params) {
  CudaParameters set;
  set.m_params = std::move(params);
  for (size_t i = 0; i < set.m_params.size(); ++i) set.m_index.emplace(set.m_params[i].name, int(i));
  return set;
}

int CudaParameters::find(const std::string& name) const {
  auto it = m_index.find(name);
  return it == m_index.end() ? -1 : it->second;
}

CudaParameter& CudaParameters::at(const std::string& name) {
  const int index = find(name);
  MOEWB_CHECK_MSG(index >= 0, "no parameter called " << name);
  return m_params[size_t(index)];
}

const CudaParameter& CudaParameters::at(const std::string& name) const {
  const int index = find(name);
  MOEWB_CHECK_MSG(index >= 0, "no parameter called " << name);
  return m_params[size_t(index)];
}

Status CudaParameters::zeroGrads(CudaContext& context) {
  std::vector<MultiTensorRef> refs;
  for (CudaParameter& p : m_params) {
    if (p.grad.empty()) continue;
    MultiTensorRef ref;
    ref.grad = p.grad.data();
    ref.n = p.grad.numel();
    refs.push_back(ref);
  }
  MOEWB_ASSIGN_OR_RETURN(MultiTensorPlan * plan, currentPlan(context, m_gradsPlan, refs));
  return multiTensorZeroGradsCuda(context.stream(), *plan);
}

Result<MultiTensorPlan*> CudaParameters::trainablePlan(CudaContext& context) {
  std::vector<MultiTensorRef> refs;
  for (CudaParameter& p : m_params) {
    if (!p.trainable || p.grad.empty()) continue;
    MOEWB_CHECK_EQ(p.master.numel(), p.grad.numel());
    refs.push_back({p.master.data(), p.grad.data(), p.adamM.data(), p.adamV.data(),
                    p.compute.data(), p.grad.numel(), p.decay});
  }
  return currentPlan(context, m_trainablePlan, refs);
}

Status CudaParameters::refreshComputeCopies(CudaContext& context) {
  for (CudaParameter& p : m_params) {
    MOEWB_RETURN_IF_ERROR(
        castFloatToBf16(context.stream(), p.master.data(), p.compute.data(), p.master.numel()));
  }
  return Status::ok();
}

}  // namespace moewb::engine::cuda
