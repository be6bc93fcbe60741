// Block AttnRes bookkeeping on the GPU (see attnres_state_cuda.h; the CPU twin is
// attnres_state.cpp, which this file follows call for call).
#include "model/layers/attnres_state_cuda.h"

#include <utility>

#include "moewb/base/check.h"
#include "ops/attnres/attnres_cuda.h"

namespace moewb::engine::cuda {

AttnResStateCuda::AttnResStateCuda(int64_t blockSize, const AttnResOptions& options)
    : m_blockSize(blockSize), m_options(options) {
  MOEWB_CHECK(blockSize >= 1);
}

void AttnResStateCuda::expectStage(Stage stage) const {
  MOEWB_CHECK_MSG(m_stage == stage, "AttnResStateCuda: call out of order (stage "
                                        << int(m_stage) << ", expected " << int(stage) << ")");
}

std::vector<const bf16*> AttnResStateCuda::sourcesOf(size_t call) const {
  const Call& c = m_calls[call];
  std::vector<const bf16*> sources;
  for (int64_t b = 0; b < c.blocksBefore; ++b) sources.push_back(m_blocks[size_t(b)].data());
  sources.push_back(c.boundary ? m_blocks[size_t(c.blocksBefore)].data()
                               : m_snapshots[call].data());
  return sources;
}

Result<DeviceTensor<bf16>> AttnResStateCuda::mix(CudaContext& context,
                                                 const std::vector<const bf16*>& sources,
                                                 const DeviceTensor<bf16>& query,
                                                 const DeviceTensor<bf16>& keyGain) const {
  MOEWB_CHECK(query.numel() == m_width && keyGain.numel() == m_width);
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<bf16> out,
                         context.newTensor<bf16>({m_rows, m_width}, MemoryCategory::kActivations));
  MOEWB_RETURN_IF_ERROR(attnResForwardCuda(context, sources, m_rows, m_width, query.data(),
                                           keyGain.data(), m_options, out.data()));
  return Result<DeviceTensor<bf16>>(std::move(out));
}

Result<DeviceTensor<bf16>> AttnResStateCuda::toBf16(CudaContext& context,
                                                    const DeviceTensor<float>& grad) const {
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<bf16> out,
                         context.newTensor<bf16>({m_rows, m_width}, MemoryCategory::kActivations));
  MOEWB_RETURN_IF_ERROR(castFloatToBf16(context.stream(), grad.data(), out.data(), grad.numel()));
  return Result<DeviceTensor<bf16>>(std::move(out));
}

void AttnResStateCuda::begin(DeviceTensor<bf16> embedding) {
  MOEWB_CHECK(embedding.rank() == 2);
  m_rows = embedding.dim(0);
  m_width = embedding.dim(1);
  m_calls.clear();
  m_blocks.clear();
  m_snapshots.clear();
  m_finalPrefix = DeviceTensor<bf16>();
  m_dBlocks.clear();
  m_dPrefix = DeviceTensor<float>();
  m_prefix = std::move(embedding);
  m_stage = Stage::kMix;
}

Result<DeviceTensor<bf16>> AttnResStateCuda::mixBeforeSublayer(CudaContext& context,
                                                               const DeviceTensor<bf16>& query,
                                                               const DeviceTensor<bf16>& keyGain) {
  expectStage(Stage::kMix);
  const int64_t sublayer = int64_t(m_calls.size());
  Call call;
  call.blocksBefore = int64_t(m_blocks.size());
  call.boundary = isBoundary(sublayer, m_blockSize);
  m_calls.push_back(call);
  if (call.boundary) {
    m_blocks.push_back(std::move(m_prefix));
    m_snapshots.emplace_back();
  } else {
    m_snapshots.push_back(std::move(m_prefix));
  }
  m_prefix = DeviceTensor<bf16>();
  m_stage = Stage::kOutput;
  return mix(context, sourcesOf(m_calls.size() - 1), query, keyGain);
}

Status AttnResStateCuda::addSublayerOutput(CudaContext& context, DeviceTensor<bf16> output) {
  expectStage(Stage::kOutput);
  const Call& call = m_calls.back();
  const DeviceTensor<bf16>& source = call.boundary ? m_blocks.back() : m_snapshots.back();
  MOEWB_CHECK(output.rank() == 2 && output.dim(0) == source.dim(0) &&
              output.dim(1) == source.dim(1));
  m_prefix = std::move(output);
  if (!call.boundary) {
    MOEWB_RETURN_IF_ERROR(addBf16(context.stream(), m_prefix.data(), m_snapshots.back().data(),
                                  m_prefix.data(), m_prefix.numel()));
  }
  m_stage = Stage::kMix;
  return Status::ok();
}

Result<DeviceTensor<bf16>> AttnResStateCuda::mixFinal(CudaContext& context,
                                                      const DeviceTensor<bf16>& query,
                                                      const DeviceTensor<bf16>& keyGain) {
  expectStage(Stage::kMix);
  m_finalPrefix = std::move(m_prefix);
  m_prefix = DeviceTensor<bf16>();
  std::vector<const bf16*> sources;
  for (const DeviceTensor<bf16>& block : m_blocks) sources.push_back(block.data());
  sources.push_back(m_finalPrefix.data());
  m_stage = Stage::kForwardDone;
  return mix(context, sources, query, keyGain);
}

Status AttnResStateCuda::backwardFinal(CudaContext& context, const DeviceTensor<bf16>& dMixed,
                                       const DeviceTensor<bf16>& query,
                                       const DeviceTensor<bf16>& keyGain,
                                       DeviceTensor<float>& dQuery, DeviceTensor<float>& dKeyGain) {
  expectStage(Stage::kForwardDone);
  MOEWB_CHECK(dMixed.numel() == m_rows * m_width && dQuery.numel() == m_width &&
              dKeyGain.numel() == m_width);
  m_dBlocks.clear();
  std::vector<const bf16*> sources;
  std::vector<float*> dSources;
  for (const DeviceTensor<bf16>& block : m_blocks) {
    MOEWB_ASSIGN_OR_RETURN(
        DeviceTensor<float> grad,
        context.newTensor<float>({m_rows, m_width}, MemoryCategory::kActivations));
    MOEWB_RETURN_IF_ERROR(fillFloat(context.stream(), grad.data(), 0.0f, grad.numel()));
    m_dBlocks.push_back(std::move(grad));
    sources.push_back(block.data());
  }
  MOEWB_ASSIGN_OR_RETURN(m_dPrefix,
                         context.newTensor<float>({m_rows, m_width}, MemoryCategory::kActivations));
  MOEWB_RETURN_IF_ERROR(fillFloat(context.stream(), m_dPrefix.data(), 0.0f, m_dPrefix.numel()));
  for (DeviceTensor<float>& grad : m_dBlocks) dSources.push_back(grad.data());
  sources.push_back(m_finalPrefix.data());
  dSources.push_back(m_dPrefix.data());
  MOEWB_RETURN_IF_ERROR(attnResBackwardCuda(context, sources, m_rows, m_width, query.data(),
                                            keyGain.data(), m_options, dMixed.data(), dSources,
                                            dQuery.data(), dKeyGain.data()));
  m_finalPrefix = DeviceTensor<bf16>();
  m_stage = m_calls.empty() ? Stage::kBackDone : Stage::kBackOutput;
  return Status::ok();
}

Result<DeviceTensor<bf16>> AttnResStateCuda::backwardSublayerOutput(CudaContext& context) {
  expectStage(Stage::kBackOutput);
  const Call& call = m_calls.back();
  // The output's gradient is the current prefix's in both cases (prefix = out, or prefix_s + out).
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<bf16> dOutput, toBf16(context, m_dPrefix));
  if (call.boundary) {
    // The output started a new prefix; the block the previous prefix became continues it.
    MOEWB_CHECK_EQ(int64_t(m_dBlocks.size()), call.blocksBefore + 1);
    m_dPrefix = std::move(m_dBlocks.back());
    m_dBlocks.pop_back();
  } else {
    // prefix_{s+1} = prefix_s + out_s: prefix_s keeps the same gradient buffer.
    MOEWB_CHECK_EQ(int64_t(m_dBlocks.size()), call.blocksBefore);
  }
  m_stage = Stage::kBackMix;
  return Result<DeviceTensor<bf16>>(std::move(dOutput));
}

Status AttnResStateCuda::backwardMixBeforeSublayer(
    CudaContext& context, const DeviceTensor<bf16>& dMixed, const DeviceTensor<bf16>& query,
    const DeviceTensor<bf16>& keyGain, DeviceTensor<float>& dQuery, DeviceTensor<float>& dKeyGain) {
  expectStage(Stage::kBackMix);
  MOEWB_CHECK(dMixed.numel() == m_rows * m_width && dQuery.numel() == m_width &&
              dKeyGain.numel() == m_width);
  const size_t index = m_calls.size() - 1;
  const Call call = m_calls.back();
  std::vector<float*> dSources;
  for (int64_t b = 0; b < call.blocksBefore; ++b) dSources.push_back(m_dBlocks[size_t(b)].data());
  dSources.push_back(m_dPrefix.data());
  MOEWB_RETURN_IF_ERROR(attnResBackwardCuda(context, sourcesOf(index), m_rows, m_width,
                                            query.data(), keyGain.data(), m_options, dMixed.data(),
                                            dSources, dQuery.data(), dKeyGain.data()));
  if (call.boundary) {
    MOEWB_CHECK_EQ(int64_t(m_blocks.size()), call.blocksBefore + 1);
    m_blocks.pop_back();
  }
  m_snapshots.pop_back();
  m_calls.pop_back();
  m_stage = m_calls.empty() ? Stage::kBackDone : Stage::kBackOutput;
  return Status::ok();
}

Result<DeviceTensor<bf16>> AttnResStateCuda::takeEmbeddingGrad(CudaContext& context) {
  expectStage(Stage::kBackDone);
  MOEWB_ASSIGN_OR_RETURN(DeviceTensor<bf16> dEmbedding, toBf16(context, m_dPrefix));
  m_blocks.clear();
  m_dBlocks.clear();
  m_dPrefix = DeviceTensor<float>();
  m_stage = Stage::kIdle;
  return Result<DeviceTensor<bf16>>(std::move(dEmbedding));
}

int64_t AttnResStateCuda::heldBytes() const {
  int64_t bytes = m_prefix.bytes() + m_finalPrefix.bytes() + m_dPrefix.bytes();
  for (const DeviceTensor<bf16>& t : m_blocks) bytes += t.bytes();
  for (const DeviceTensor<bf16>& t : m_snapshots) bytes += t.bytes();
  for (const DeviceTensor<float>& t : m_dBlocks) bytes += t.bytes();
  return bytes;
}

}  // namespace moewb::engine::cuda
