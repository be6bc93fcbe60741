// Candidate values of the tunable keys (see knob_values.h).
#include "knob_values.h"

#include <algorithm>
#include <cstdlib>
#include <sstream>
#include <thread>

namespace moewb::tuner::detail {
namespace {

std::string unquote(const std::string& v) {
  if (v.size() >= 2 && v.front() == '"' && v.back() == '"') return v.substr(1, v.size() - 2);
  return v;
}

std::vector<std::string> powersOfTwo(int64_t lo, int64_t hi) {
  std::vector<std::string> out;
  for (int64_t v = 1; v <= hi; v *= 2) {
    if (v >= lo) out.push_back(std::to_string(v));
  }
  return out;
}

std::vector<std::string> divisors(int64_t n) {
  std::vector<std::string> out;
  for (int64_t d = 1; d <= n; ++d) {
    if (n % d == 0) out.push_back(std::to_string(d));
  }
  return out;
}

// data.micro_batch_size: 0 (the rank's whole batch) and the micro-batch sizes that cut the
// rank's `rankBatch` sequences into M = 2, 3, 4, ... equal parts, the four smallest such M.
std::vector<std::string> microBatchSizes(int64_t rankBatch) {
  std::vector<std::string> out = {"0"};
  for (int64_t m = 2; m <= rankBatch && out.size() < 5; ++m) {
    if (rankBatch % m == 0) out.push_back(std::to_string(rankBatch / m));
  }
  return out;
}

}  // namespace

std::string currentValue(const engine::RunConfig& config, const std::string& key) {
  const auto dot = key.find('.');
  if (dot == std::string::npos) return "";
  const std::string section = "[" + key.substr(0, dot) + "]";
  const std::string name = key.substr(dot + 1) + " = ";
  std::istringstream in(engine::toToml(config));
  std::string line;
  bool inSection = false;
  while (std::getline(in, line)) {
    if (!line.empty() && line.front() == '[') {
      inSection = line == section;
    } else if (inSection && line.rfind(name, 0) == 0) {
      return unquote(line.substr(name.size()));
    }
  }
  return "";
}

Result<std::string> canonicalValue(const engine::RunConfig& base, const std::string& key,
                                   const std::string& text) {
  engine::RunConfig copy = base;
  MOEWB_RETURN_IF_ERROR(engine::applyOverride(copy, key + "=" + text));
  return currentValue(copy, key);
}

const engine::ConfigKeyInfo* findKeyInfo(const std::string& key) {
  for (const auto& info : engine::configKeys()) {
    if (info.key == key) return &info;
  }
  return nullptr;
}

Status checkAgainstBounds(const engine::ConfigKeyInfo& info, const std::string& text) {
  bool ok = false;
  if (info.type == "boolean") {
    ok = text == "true" || text == "false";
  } else if (info.type == "string") {
    ok = info.acceptsString(unquote(text));
  } else {
    char* end = nullptr;
    const double v = std::strtod(text.c_str(), &end);
    ok = end != text.c_str() && *end == '\0' && info.acceptsNumber(v);
  }
  if (ok) return Status::ok();
  return invalidArgument("--knobs: " + info.key + " = " + text +
                         " is not accepted; accepted: " + info.accepted);
}

std::vector<std::string> generatedValues(const engine::RunConfig& base,
                                         const engine::ConfigKeyInfo& info) {
  const std::string& k = info.key;
  if (info.type == "boolean") return {"false", "true"};
  if (k == "swap.recompute_ops") return {"", "expert_fc2", "moe_act, expert_fc2"};
  // The concrete kernels (auto is one of them; the knob starts from the base's value anyway).
  if (k == "kernels.expert_glu") return {"split", "pingpong", "fused"};
  if (k == "kernels.expert_wgrad_walk") return {"skew", "static", "dynamic"};
  if (info.type == "string") return info.choices;
  const int64_t world = base.parallel.worldSize;
  if (k == "parallel.ep" || k == "parallel.fsdp" || k == "parallel.replicate")
    return divisors(world);
  if (k == "parallel.a2a_chunks") return powersOfTwo(1, base.moe.numExperts / base.parallel.ep);
  if (k == "data.micro_batch_size") return microBatchSizes(base.rankBatchSize());
  if (k == "kda.chunk_size") return powersOfTwo(16, std::min<int64_t>(128, base.model.seqLen));
  if (k == "loss.chunk_tokens") return {"64", "256", "1024"};
  // CCE: its vocabulary block is also the width of its gradient-filter tiles (128 measured best
  // on an H200); 2^-12 is bf16's epsilon / 32, Cut Cross-Entropy's own filter threshold.
  if (k == "loss.cce_vocab_block") return {"64", "128", "256", "1024", "4096"};
  if (k == "loss.cce_filter_eps") return {"0.0", "0.000244140625"};
  if (k == "moe.capacity_factor") return {"0.0", "1.0", "1.25", "1.5", "2.0"};
  if (k == "swap.prefetch_layers") return {"1", "2", "4"};
  if (k == "run.threads") {
    const int64_t hw = std::max<unsigned>(1, std::thread::hardware_concurrency());
    return powersOfTwo(1, hw);
  }
  return {};
}

}  // namespace moewb::tuner::detail
