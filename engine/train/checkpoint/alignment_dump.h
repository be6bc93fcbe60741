// Alignment dumps: everything needed to check one training step against another implementation
// of the same model (e.g. a PyTorch port): the weights before the step, the batch, the loss terms
// and every gradient after backward (before clipping), as one safetensors file per step.
//
// Tensor names (all little-endian):
//   weights.<param>   F32, the parameter's shape      values before the optimizer update
//   grads.<param>     F32, the parameter's shape      d(total loss)/d(param) after backward
//   batch.tokens      I32 [B, T]                      input token ids
//   batch.targets     I32 [B, T]                      next-token targets (-1 = not scored)
//   batch.patches     F32 [B, P, patch_dim]           image patches (multimodal only)
//   loss.ce, loss.aux, loss.total   F32 []            mean cross-entropy, summed aux losses, sum
//   state.expert_bias.<layer>  F32 [E]                the aux-loss-free router bias the step's
//                                                     forward selected with (models with
//                                                     moe.bias_update_rate > 0; format 2 on)
// Metadata: format = "moewb-alignment-dump", format_version = "2", step, config (TOML), and the
// loss terms again as exact decimal text (loss_ce, loss_aux, loss_total with 17 digits).
// Parameter names and layouts are those of the model (docs/CLI.md, "Alignment dumps").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/batch.h"
#include "model/cpu/parameter.h"
#include "model/moe/expert_bias.h"
#include "moewb/base/status.h"

namespace moewb::engine {

inline constexpr const char* kAlignmentDumpFormat = "moewb-alignment-dump";

struct DumpLossTerms {
  double ce = 0;
  double aux = 0;
  double total() const { return ce + aux; }
};

// Writes DIR/step-<NNNNNNNN>.safetensors (creating DIR). `expertBiases` is one entry per layer
// (empty: no bias). Errors: kInternal naming the path.
Status writeAlignmentDump(const std::string& dir, int64_t step,
                          const std::vector<Parameter<float>>& params,
                          const std::vector<ExpertBias>& expertBiases, const Batch& batch,
                          const DumpLossTerms& loss, const std::string& configToml);

struct AlignmentDump {
  int64_t step = 0;
  std::string configToml;
  DumpLossTerms loss;
  Batch batch;
};

// Reads a dump: copies weights.* into `params` (names and shapes must match) and the dump's
// state.expert_bias.* into `expertBiases` (one per layer when the model has a bias; a format-1
// dump has none and leaves them as they are), and returns the batch and loss terms. Nothing
// changes on error. Errors: kNotFound, kDataLoss, kInvalidArgument.
Result<AlignmentDump> readAlignmentDump(const std::string& path,
                                        std::vector<Parameter<float>>& params,
                                        std::vector<ExpertBias>& expertBiases);

}  // namespace moewb::engine
