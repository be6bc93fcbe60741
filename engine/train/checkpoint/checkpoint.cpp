// Checkpoint save/load over safetensors (see checkpoint.h).
#include "train/checkpoint/checkpoint.h"

#include <cstring>

#include "moewb/base/step_range.h"
#include "train/checkpoint/safetensors.h"

namespace moewb::engine {
namespace {

std::string shapeText(const std::vector<int64_t>& shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

// The three tensors saved per parameter: name suffix -> tensor.
struct SavedPart {
  std::string name;
  const Tensor<float>* tensor;
};

std::vector<SavedPart> partsOf(const Parameter<float>& p) {
  if (!p.trainable) return {{p.name, &p.value}};
  return {{p.name, &p.value},
          {"optimizer." + p.name + ".exp_avg", &p.adamM},
          {"optimizer." + p.name + ".exp_avg_sq", &p.adamV}};
}

// Checks that `file` holds `name` as F32 of the shape of `tensor`.
Status checkTensor(const std::string& path, const SafetensorsFile& file, const std::string& name,
                   const Tensor<float>& tensor, const char* what) {
  const SafetensorsEntry* entry = file.find(name);
  if (!entry) {
    return invalidArgument(path + ": " + what + " lacks tensor '" + name +
                           "'; it was written for a different model config");
  }
  if (entry->dtype != SafetensorsDtype::kF32 || entry->shape != tensor.shape()) {
    return invalidArgument(path + ": tensor '" + name + "' has shape " + shapeText(entry->shape) +
                           " but this model needs " + shapeText(tensor.shape()));
  }
  return Status::ok();
}

}  // namespace

Status saveCheckpoint(const std::string& path, const std::vector<Parameter<float>>& params,
                      const std::vector<CheckpointState>& state, int64_t nextStep,
                      const std::string& configToml) {
  SafetensorsWriter writer;
  writer.setMetadata("format", kCheckpointFormat);
  writer.setMetadata("format_version", "1");
  writer.setMetadata("step", std::to_string(nextStep));
  writer.setMetadata("config", configToml);
  for (const auto& param : params) {
    for (const auto& part : partsOf(param)) {
      writer.addF32(part.name, part.tensor->shape(), part.tensor->data());
    }
  }
  for (const auto& entry : state) {
    writer.addF32("state." + entry.name, {int64_t(entry.values->size())}, entry.values->data());
  }
  return writer.write(path);
}

Result<int64_t> loadCheckpoint(const std::string& path, std::vector<Parameter<float>>& params,
                               const std::vector<CheckpointState>& state) {
  MOEWB_ASSIGN_OR_RETURN(SafetensorsFile file, readSafetensors(path));
  auto format = file.metadata.find("format");
  if (format == file.metadata.end() || format->second != kCheckpointFormat) {
    return dataLoss(path + ": a safetensors file but not a MoE Workbench checkpoint (no "
                    "format = moewb-checkpoint metadata)");
  }
  auto stepText = file.metadata.find("step");
  if (stepText == file.metadata.end()) return dataLoss(path + ": checkpoint metadata has no step");
  Result<int64_t> parsedStep = parseStepNumber(stepText->second);
  if (!parsedStep.isOk()) {
    return dataLoss(path + ": checkpoint metadata step: " + parsedStep.status().message());
  }
  const int64_t step = *parsedStep;
  // Check everything before changing anything.
  size_t expected = state.size();
  for (const auto& param : params) {
    for (const auto& part : partsOf(param)) {
      MOEWB_RETURN_IF_ERROR(checkTensor(path, file, part.name, *part.tensor, "checkpoint"));
      ++expected;
    }
  }
  for (const auto& entry : state) {
    const SafetensorsEntry* saved = file.find("state." + entry.name);
    if (!saved || saved->dtype != SafetensorsDtype::kF32 ||
        saved->numel() != int64_t(entry.values->size())) {
      return invalidArgument(path + ": checkpoint lacks state tensor 'state." + entry.name +
                             "' of " + std::to_string(entry.values->size()) +
                             " values; it was written for a different model config");
    }
  }
  if (file.tensors.size() != expected) {
    return invalidArgument(path + ": checkpoint holds " + std::to_string(file.tensors.size()) +
                           " tensors but this model needs " + std::to_string(expected) +
                           "; it was written for a different model config");
  }
  for (auto& param : params) {
    for (const auto& part : partsOf(param)) {
      const SafetensorsEntry* entry = file.find(part.name);
      auto* target = const_cast<Tensor<float>*>(part.tensor);
      std::memcpy(target->data(), entry->f32(), size_t(target->bytes()));
    }
  }
  for (const auto& entry : state) {
    const SafetensorsEntry* saved = file.find("state." + entry.name);
    std::memcpy(entry.values->data(), saved->f32(), entry.values->size() * sizeof(float));
  }
  return step;
}

Status saveWeights(const std::string& path, const std::vector<NamedWeight>& weights,
                   const std::vector<CheckpointState>& state, const std::string& configToml) {
  SafetensorsWriter writer;
  writer.setMetadata("format", kWeightsFormat);
  writer.setMetadata("format_version", "1");
  writer.setMetadata("config", configToml);
  for (const auto& weight : weights) {
    writer.addF32(weight.name, weight.tensor->shape(), weight.tensor->data());
  }
  for (const auto& entry : state) {
    writer.addF32("state." + entry.name, {int64_t(entry.values->size())}, entry.values->data());
  }
  return writer.write(path);
}

Status loadWeights(const std::string& path, const std::vector<Parameter<float>*>& params,
                   const std::vector<CheckpointState>& state) {
  MOEWB_ASSIGN_OR_RETURN(SafetensorsFile file, readSafetensors(path));
  auto format = file.metadata.find("format");
  if (format == file.metadata.end() ||
      (format->second != kCheckpointFormat && format->second != kWeightsFormat)) {
    return dataLoss(path + ": a safetensors file but not a MoE Workbench checkpoint or weights "
                    "export (no format = moewb-checkpoint / moewb-weights metadata)");
  }
  for (const Parameter<float>* param : params) {
    MOEWB_RETURN_IF_ERROR(checkTensor(path, file, param->name, param->value, "weights file"));
  }
  for (const auto& entry : state) {
    const SafetensorsEntry* saved = file.find("state." + entry.name);
    if (saved && (saved->dtype != SafetensorsDtype::kF32 ||
                  saved->numel() != int64_t(entry.values->size()))) {
      return invalidArgument(path + ": state tensor 'state." + entry.name + "' does not hold " +
                             std::to_string(entry.values->size()) + " F32 values");
    }
  }
  for (Parameter<float>* param : params) {
    const SafetensorsEntry* entry = file.find(param->name);
    std::memcpy(param->value.data(), entry->f32(), size_t(param->value.bytes()));
  }
  for (const auto& entry : state) {
    const SafetensorsEntry* saved = file.find("state." + entry.name);
    if (!saved) continue;
    std::memcpy(entry.values->data(), saved->f32(), entry.values->size() * sizeof(float));
  }
  return Status::ok();
}

}  // namespace moewb::engine
