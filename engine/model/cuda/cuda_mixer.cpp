// Token mixers on the GPU (see cuda_mixer.h): dispatch by kind to the CUDA ops. The ops' weight
// and gradient structs list the parameters in mixerParameterSpecs order, so they are filled
// positionally from the parameter list.
#include "model/cuda/cuda_mixer.h"

#include <variant>

#include "model/cpu/mixer.h"
#include "ops/attention/attention_cuda.h"
#include "model/layers/kda_layer_cuda.h"
#include "ops/sparse_attention/sparse_attention_cuda.h"

namespace moewb::engine::cuda {

struct MixerStateCuda {
  std::variant<std::monostate, AttentionSavedCuda, KdaSavedCuda, SparseAttentionSavedCuda> saved;
};

MixerSavedCuda::MixerSavedCuda() = default;
MixerSavedCuda::~MixerSavedCuda() = default;
MixerSavedCuda::MixerSavedCuda(MixerSavedCuda&&) noexcept = default;
MixerSavedCuda& MixerSavedCuda::operator=(MixerSavedCuda&&) noexcept = default;

const DeviceTensor<float>* mixerAuxLossCuda(const MixerSavedCuda& saved) {
  if (!saved.state) return nullptr;
  const auto* sparse = std::get_if<SparseAttentionSavedCuda>(&saved.state->saved);
  return sparse != nullptr && !sparse->indexerLoss.empty() ? &sparse->indexerLoss : nullptr;
}

namespace {

AttentionDims attentionDims(const ModelDims& dims) {
  return {dims.batchSize, dims.seqLen, dims.numHeads, dims.dModel / dims.numHeads};
}

// Weight (bf16 compute copies) and gradient (fp32) structs of pointers, in parameter order.
template <typename Weights, size_t... I>
Weights weightsOf(const std::vector<CudaParameter*>& p, std::index_sequence<I...>) {
  return Weights{p[I]->compute.data()...};
}
template <typename Grads, size_t... I>
Grads gradsOf(const std::vector<CudaParameter*>& p, std::index_sequence<I...>) {
  return Grads{p[I]->grad.data()...};
}

constexpr size_t kAttentionParams = 4, kKdaParams = 16, kSparseParams = 11;

}  // namespace

// Runs at every mixer call (a live patch may change kda.chunk_size): only this mixer's op.
Status checkMixerSupportedCuda(char kind, const ModelDims& dims) {
  return checkMixerSupported(kind, OpBackend::kCuda, opProblemOf(dims));
}

Result<DeviceTensor<bf16>> mixerForwardCuda(CudaContext& context, char kind, const ModelDims& dims,
                                            int64_t step, const DeviceTensor<bf16>& x,
                                            const std::vector<CudaParameter*>& params,
                                            MixerSavedCuda& saved) {
  MOEWB_RETURN_IF_ERROR(checkMixerSupportedCuda(kind, dims));
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<bf16> y, context.newTensor<bf16>(
                                                   {dims.tokens(), dims.dModel},
                                                   MemoryCategory::kActivations));
  saved.state = std::make_unique<MixerStateCuda>();
  if (kind == 'K') {
    auto& kda = saved.state->saved.emplace<KdaSavedCuda>();
    const auto w = weightsOf<KdaWeightsCuda>(params, std::make_index_sequence<kKdaParams>());
    MOEWB_RETURN_IF_ERROR(
        kdaLayerForwardCuda(context, mixerKdaDims(dims), x.data(), w, y.data(), kda,
                            dims.kda.keepIntermediates));
    return y;
  }
  if (kind == 'S') {
    auto& sparse = saved.state->saved.emplace<SparseAttentionSavedCuda>();
    const auto w =
        weightsOf<SparseAttentionWeightsCuda>(params, std::make_index_sequence<kSparseParams>());
    MOEWB_RETURN_IF_ERROR(sparseAttentionForwardCuda(context, mixerSparseDims(dims, step),
                                                     x.data(), w, sparse, y.data()));
    return y;
  }
  auto& attention = saved.state->saved.emplace<AttentionSavedCuda>();
  const auto w = weightsOf<AttentionWeightsCuda>(params, std::make_index_sequence<kAttentionParams>());
  MOEWB_RETURN_IF_ERROR(
      attentionForwardCuda(context, attentionDims(dims), x.data(), w, attention, y.data()));
  return y;
}

// Every mixer backward overwrites dx; the caller adds it into the residual gradient.
Status mixerBackwardCuda(CudaContext& context, char kind, const ModelDims& dims, int64_t step,
                         const DeviceTensor<bf16>& dy, const DeviceTensor<bf16>& x,
                         const std::vector<CudaParameter*>& params, MixerSavedCuda& saved,
                         DeviceTensor<bf16>& dx) {
  MOEWB_RETURN_IF_ERROR(checkMixerSupportedCuda(kind, dims));
  if (kind == 'K') {
    const auto w = weightsOf<KdaWeightsCuda>(params, std::make_index_sequence<kKdaParams>());
    const auto g = gradsOf<KdaGradsCuda>(params, std::make_index_sequence<kKdaParams>());
    return kdaLayerBackwardCuda(context, mixerKdaDims(dims), dy.data(), x.data(), w,
                                std::get<KdaSavedCuda>(saved.state->saved), g, dx.data());
  }
  if (kind == 'S') {
    const auto w =
        weightsOf<SparseAttentionWeightsCuda>(params, std::make_index_sequence<kSparseParams>());
    const auto g =
        gradsOf<SparseAttentionGradsCuda>(params, std::make_index_sequence<kSparseParams>());
    return sparseAttentionBackwardCuda(context, mixerSparseDims(dims, step), dy.data(), x.data(),
                                       w, std::get<SparseAttentionSavedCuda>(saved.state->saved),
                                       g, dx.data());
  }
  const auto w = weightsOf<AttentionWeightsCuda>(params, std::make_index_sequence<kAttentionParams>());
  const auto g = gradsOf<AttentionGradsCuda>(params, std::make_index_sequence<kAttentionParams>());
  return attentionBackwardCuda(context, attentionDims(dims), dy.data(), x.data(), w,
                               std::get<AttentionSavedCuda>(saved.state->saved), g, dx.data());
}

}  // namespace moewb::engine::cuda
