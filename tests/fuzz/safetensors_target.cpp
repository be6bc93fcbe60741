// fuzzSafetensors (see fuzz_targets.h): a safetensors file from elsewhere through the reader and
// the three loaders that take one (--resume: loadCheckpoint, --init-weights: loadWeights, dump
// replay: readAlignmentDump), with the arguments Trainer passes them, into the parameters of a
// model small enough that a load costs microseconds: samples/configs/tiny.toml with
// kFuzzModelOverrides (fuzz_model.h). tests/fuzz/make_seeds.sh writes the seed checkpoints and
// dumps of that model.
//
// The loaders are called directly rather than through a Trainer so that the libFuzzer build
// compiles only the readers (the checkpoint sources and their few dependencies), not the engine.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "fuzz_model.h"
#include "fuzz_targets.h"
#include "model/cpu/parameter.h"
#include "model/moe/expert_bias.h"
#include "train/checkpoint/alignment_dump.h"
#include "train/checkpoint/checkpoint.h"
#include "train/checkpoint/safetensors.h"

namespace moewb::fuzz {
namespace {

namespace fs = std::filesystem;

// The parameters (values and AdamW moments, as a trainable model has) and the per-layer expert
// biases every input is loaded into. Loads that succeed overwrite them; shapes never change.
struct FuzzModel {
  std::vector<engine::Parameter<float>> params;
  std::vector<engine::ExpertBias> biases;
  std::vector<engine::CheckpointState> state;  // "layers.<l>.moe.expert_bias", as Trainer names it
};

FuzzModel& fuzzModel() {
  static FuzzModel* model = [] {
    auto* made = new FuzzModel;
    for (const FuzzParameter& info : fuzzModelParameters()) {
      engine::Parameter<float> param;
      param.name = info.name;
      param.value = engine::Tensor<float>(info.shape);
      param.adamM = engine::Tensor<float>(info.shape);
      param.adamV = engine::Tensor<float>(info.shape);
      made->params.push_back(std::move(param));
    }
    for (int64_t layer = 0; layer < kFuzzModelLayers; ++layer) {
      made->biases.push_back(engine::makeExpertBias(kFuzzModelExperts));
    }
    for (size_t layer = 0; layer < made->biases.size(); ++layer) {
      made->state.push_back(
          {"layers." + std::to_string(layer) + ".moe.expert_bias", &made->biases[layer].bias});
    }
    return made;
  }();
  return *model;
}

const fs::path& inputPath() {
  static const fs::path path =
      fs::temp_directory_path() / ("moewb-fuzz-safetensors-" + std::to_string(getpid()));
  return path;
}

}  // namespace

int fuzzSafetensors(const uint8_t* data, size_t size) {
  FuzzModel& model = fuzzModel();
  const std::string path = inputPath().string();
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), std::streamsize(size));
  }
  // Each loader reads the file with readSafetensors, then checks names, shapes and metadata.
  (void)engine::loadCheckpoint(path, model.params, model.state);
  std::vector<engine::Parameter<float>*> base;
  for (auto& param : model.params) base.push_back(&param);
  (void)engine::loadWeights(path, base, model.state);
  (void)engine::readAlignmentDump(path, model.params, model.biases);
  std::error_code ignored;
  fs::remove(path, ignored);
  return 0;
}

}  // namespace moewb::fuzz
