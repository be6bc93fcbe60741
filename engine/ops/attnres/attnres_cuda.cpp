// AttnRes on the GPU, host side (see attnres_cuda.h): argument checks, pointer tables, the
// backward's partial-sum workspace; the kernels are in attnres_cuda.cu.
#include "ops/attnres/attnres_cuda.h"

#include <string>

#include "ops/attnres/attnres_cuda_kernels.h"

namespace moewb::engine::cuda {
namespace {

static_assert(kAttnResMaxSources == kAttnResTableSize);

Status checkShapes(const std::vector<const bf16*>& sources, int64_t n, int64_t d, const bf16* query,
                   const bf16* keyGain) {
  if (sources.empty() || int64_t(sources.size()) > kAttnResMaxSources) {
    return invalidArgument("attnres: " + std::to_string(sources.size()) + " sources; 1.." +
                           std::to_string(kAttnResMaxSources) + " accepted");
  }
  if (n < 0 || d < 1 || d > kAttnResMaxWidth || n >= (int64_t(1) << 31)) {
    return invalidArgument("attnres: shape [" + std::to_string(n) + ", " + std::to_string(d) +
                           "] out of range (d in 1.." + std::to_string(kAttnResMaxWidth) + ")");
  }
  for (const bf16* source : sources) {
    if (source == nullptr) return invalidArgument("attnres: null source");
  }
  if (query == nullptr || keyGain == nullptr) return invalidArgument("attnres: null query/gain");
  return Status::ok();
}

AttnResSourceTable sourceTable(const std::vector<const bf16*>& sources) {
  AttnResSourceTable table{};
  for (size_t i = 0; i < sources.size(); ++i) table.ptr[i] = sources[i];
  return table;
}

template <typename G>
Status backward(CudaContext& context, const std::vector<const bf16*>& sources, int64_t n, int64_t d,
                const bf16* query, const bf16* keyGain, const AttnResOptions& options,
                const bf16* dOut, const std::vector<G*>& dSources, float* dQuery, float* dKeyGain) {
  MOEWB_RETURN_IF_ERROR(checkShapes(sources, n, d, query, keyGain));
  if (dSources.size() != sources.size()) {
    return invalidArgument("attnres backward: " + std::to_string(dSources.size()) +
                           " source gradients for " + std::to_string(sources.size()) + " sources");
  }
  if (n == 0) return Status::ok();
  if (dOut == nullptr || dQuery == nullptr || dKeyGain == nullptr) {
    return invalidArgument("attnres backward: null dOut/dQuery/dKeyGain");
  }
  AttnResGradTable<G> grads{};
  for (size_t i = 0; i < dSources.size(); ++i) grads.ptr[i] = dSources[i];
  MOEWB_ASSIGN_OR_RETURN(
      DeviceTensor<float> partial,
      context.newTensor<float>({attnResBackwardChunks(n), d}, MemoryCategory::kWorkspace));
  return attnResBackwardLaunch<G>(context.stream(), sourceTable(sources), grads,
                                  int(sources.size()), n, d, query, keyGain, float(options.eps),
                                  float(options.scale), dOut, partial.data(), dQuery, dKeyGain);
}

}  // namespace

Status attnResForwardCuda(CudaContext& context, const std::vector<const bf16*>& sources, int64_t n,
                          int64_t d, const bf16* query, const bf16* keyGain,
                          const AttnResOptions& options, bf16* out) {
  MOEWB_RETURN_IF_ERROR(checkShapes(sources, n, d, query, keyGain));
  if (n == 0) return Status::ok();
  if (out == nullptr) return invalidArgument("attnres: null output");
  return attnResForwardLaunch(context.stream(), sourceTable(sources), int(sources.size()), n, d,
                              query, keyGain, float(options.eps), float(options.scale), out);
}

Status attnResBackwardCuda(CudaContext& context, const std::vector<const bf16*>& sources, int64_t n,
                           int64_t d, const bf16* query, const bf16* keyGain,
                           const AttnResOptions& options, const bf16* dOut,
                           const std::vector<float*>& dSources, float* dQuery, float* dKeyGain) {
  return backward<float>(context, sources, n, d, query, keyGain, options, dOut, dSources, dQuery,
                         dKeyGain);
}

Status attnResBackwardCuda(CudaContext& context, const std::vector<const bf16*>& sources, int64_t n,
                           int64_t d, const bf16* query, const bf16* keyGain,
                           const AttnResOptions& options, const bf16* dOut,
                           const std::vector<bf16*>& dSources, float* dQuery, float* dKeyGain) {
  return backward<bf16>(context, sources, n, d, query, keyGain, options, dOut, dSources, dQuery,
                        dKeyGain);
}

}  // namespace moewb::engine::cuda
