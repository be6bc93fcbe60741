// Alignment dump writing and reading (see alignment_dump.h).
#include "train/checkpoint/alignment_dump.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "moewb/base/step_range.h"
#include "train/checkpoint/safetensors.h"

namespace moewb::engine {
namespace {

std::string biasName(size_t layer) { return "state.expert_bias." + std::to_string(layer); }

std::string exact(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

Result<Tensor<int32_t>> readTokens(const SafetensorsFile& file, const std::string& path,
                                   const std::string& name, int64_t* batchSize, int64_t* seqLen) {
  const SafetensorsEntry* entry = file.find(name);
  if (!entry || entry->dtype != SafetensorsDtype::kI32 || entry->shape.size() != 2) {
    return dataLoss(path + ": alignment dump lacks an I32 [B, T] tensor '" + name + "'");
  }
  *batchSize = entry->shape[0];
  *seqLen = entry->shape[1];
  Tensor<int32_t> tokens({entry->numel()});
  std::memcpy(tokens.data(), entry->i32(), size_t(tokens.bytes()));
  return tokens;
}

}  // namespace

Status writeAlignmentDump(const std::string& dir, int64_t step,
                          const std::vector<Parameter<float>>& params,
                          const std::vector<ExpertBias>& expertBiases, const Batch& batch,
                          const DumpLossTerms& loss, const std::string& configToml) {
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) return internalError("cannot create dump directory '" + dir + "': " + error.message());
  SafetensorsWriter writer;
  writer.setMetadata("format", kAlignmentDumpFormat);
  writer.setMetadata("format_version", "2");
  writer.setMetadata("step", std::to_string(step));
  writer.setMetadata("config", configToml);
  writer.setMetadata("loss_ce", exact(loss.ce));
  writer.setMetadata("loss_aux", exact(loss.aux));
  writer.setMetadata("loss_total", exact(loss.total()));
  for (const auto& p : params) writer.addF32("weights." + p.name, p.value.shape(), p.value.data());
  for (const auto& p : params) writer.addF32("grads." + p.name, p.grad.shape(), p.grad.data());
  writer.addI32("batch.tokens", {batch.batchSize, batch.seqLen}, batch.inputs.data());
  writer.addI32("batch.targets", {batch.batchSize, batch.seqLen}, batch.targets.data());
  if (batch.imagePatches > 0) {
    writer.addF32("batch.patches", {batch.batchSize, batch.imagePatches, batch.patches.dim(1)},
                  batch.patches.data());
  }
  for (size_t l = 0; l < expertBiases.size(); ++l) {
    const std::vector<float>& bias = expertBiases[l].bias;
    writer.addF32(biasName(l), {int64_t(bias.size())}, bias.data());
  }
  const float terms[3] = {float(loss.ce), float(loss.aux), float(loss.total())};
  writer.addF32("loss.ce", {}, &terms[0]);
  writer.addF32("loss.aux", {}, &terms[1]);
  writer.addF32("loss.total", {}, &terms[2]);
  char name[64];
  std::snprintf(name, sizeof name, "step-%08lld.safetensors", static_cast<long long>(step));
  return writer.write((std::filesystem::path(dir) / name).string());
}

Result<AlignmentDump> readAlignmentDump(const std::string& path,
                                        std::vector<Parameter<float>>& params,
                                        std::vector<ExpertBias>& expertBiases) {
  MOEWB_ASSIGN_OR_RETURN(SafetensorsFile file, readSafetensors(path));
  auto meta = [&](const char* key) {
    auto it = file.metadata.find(key);
    return it == file.metadata.end() ? std::string() : it->second;
  };
  if (meta("format") != kAlignmentDumpFormat) {
    return dataLoss(path + ": not a MoE Workbench alignment dump (format metadata is '" +
                    meta("format") + "')");
  }
  for (const auto& p : params) {
    const SafetensorsEntry* entry = file.find("weights." + p.name);
    if (!entry || entry->dtype != SafetensorsDtype::kF32 || entry->shape != p.value.shape()) {
      return invalidArgument(path + ": tensor 'weights." + p.name +
                             "' is missing or has another shape than this model's");
    }
  }
  const bool hasBias = file.find(biasName(0)) != nullptr;
  for (size_t l = 0; hasBias && l < expertBiases.size(); ++l) {
    const SafetensorsEntry* entry = file.find(biasName(l));
    if (!entry || entry->dtype != SafetensorsDtype::kF32 || entry->shape.size() != 1 ||
        entry->shape[0] != int64_t(expertBiases[l].bias.size())) {
      return invalidArgument(path + ": tensor '" + biasName(l) + "' is missing or is not F32 [" +
                             std::to_string(expertBiases[l].bias.size()) +
                             "] (this model's experts per layer)");
    }
  }
  if (hasBias && expertBiases.empty()) {
    return invalidArgument(path + ": the dump holds a router bias (state.expert_bias.*) but this "
                           "model has none (moe.bias_update_rate = 0)");
  }
  Result<int64_t> step = parseStepNumber(meta("step"));
  if (!step.isOk()) return dataLoss(path + ": alignment dump step: " + step.status().message());
  AlignmentDump dump;
  dump.step = *step;
  dump.configToml = meta("config");
  dump.loss.ce = std::strtod(meta("loss_ce").c_str(), nullptr);
  dump.loss.aux = std::strtod(meta("loss_aux").c_str(), nullptr);
  MOEWB_ASSIGN_OR_RETURN(dump.batch.inputs, readTokens(file, path, "batch.tokens",
                                                       &dump.batch.batchSize, &dump.batch.seqLen));
  int64_t b = 0, t = 0;
  MOEWB_ASSIGN_OR_RETURN(dump.batch.targets, readTokens(file, path, "batch.targets", &b, &t));
  if (b != dump.batch.batchSize || t != dump.batch.seqLen) {
    return dataLoss(path + ": batch.tokens and batch.targets differ in shape");
  }
  if (const SafetensorsEntry* patches = file.find("batch.patches")) {
    if (patches->dtype != SafetensorsDtype::kF32 || patches->shape.size() != 3 ||
        patches->shape[0] != b) {
      return dataLoss(path + ": batch.patches is not an F32 [B, P, patch_dim] tensor");
    }
    dump.batch.imagePatches = patches->shape[1];
    dump.batch.patches = Tensor<float>({patches->shape[0] * patches->shape[1], patches->shape[2]});
    std::memcpy(dump.batch.patches.data(), patches->f32(), size_t(dump.batch.patches.bytes()));
  }
  for (auto& p : params) {
    const SafetensorsEntry* entry = file.find("weights." + p.name);
    std::memcpy(p.value.data(), entry->f32(), size_t(p.value.bytes()));
  }
  for (size_t l = 0; hasBias && l < expertBiases.size(); ++l) {
    std::vector<float>& bias = expertBiases[l].bias;
    std::memcpy(bias.data(), file.find(biasName(l))->f32(), bias.size() * sizeof(float));
  }
  return dump;
}

}  // namespace moewb::engine
