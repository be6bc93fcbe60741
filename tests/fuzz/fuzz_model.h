// The model the safetensors fuzz target loads files into: samples/configs/tiny.toml shrunk by
// kFuzzModelOverrides to 1,336 parameters, and its parameter names and shapes (what `moewb config
// -c samples/configs/tiny.toml --set ... --params` prints; fuzz_regressions_test checks the table
// against the engine's model, so a renamed parameter fails a test instead of silently leaving the
// fuzzer without loadable seeds). tests/fuzz/make_seeds.sh uses the same overrides.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace moewb::fuzz {

inline constexpr const char* kFuzzModelOverrides[] = {
    "run.threads=1",     "model.vocab_size=16",       "model.d_model=8",   "model.num_layers=1",
    "model.num_heads=2", "model.seq_len=4",           "moe.num_experts=4", "moe.top_k=2",
    "moe.d_ff=8",        "moe.bias_update_rate=0.01", "data.batch_size=2", "data.num_topics=4",
};
inline constexpr int64_t kFuzzModelLayers = 1;
inline constexpr int64_t kFuzzModelExperts = 4;

struct FuzzParameter {
  std::string name;
  std::vector<int64_t> shape;
};

// The model's parameters in model order.
inline const std::vector<FuzzParameter>& fuzzModelParameters() {
  static const std::vector<FuzzParameter> params = {
      {"embedding", {16, 8}},
      {"layers.0.attn_norm", {8}},
      {"layers.0.attn.wq", {8, 8}},
      {"layers.0.attn.wk", {8, 8}},
      {"layers.0.attn.wv", {8, 8}},
      {"layers.0.attn.wo", {8, 8}},
      {"layers.0.moe_norm", {8}},
      {"layers.0.moe.router", {4, 8}},
      {"layers.0.moe.gate", {4, 8, 8}},
      {"layers.0.moe.up", {4, 8, 8}},
      {"layers.0.moe.down", {4, 8, 8}},
      {"final_norm", {8}},
      {"lm_head", {16, 8}},
  };
  return params;
}

}  // namespace moewb::fuzz
