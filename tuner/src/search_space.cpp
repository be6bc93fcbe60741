// SearchSpace: knobs from the key table, candidates validated by the engine (see search_space.h).
#include "moewb/tuner/search_space.h"

#include <algorithm>
#include <set>

#include "knob_values.h"
#include "moewb/base/text.h"

namespace moewb::tuner {
namespace {

// Keys that change speed or memory, not the model being trained. `gated`: may change numerics
// beyond rounding, so the precision gate checks them (moe.capacity_factor and moe.drop_policy
// drop tokens by design and are compared by the user, not the gate).
struct TunableKey {
  const char* key;
  bool gated;
};

const std::vector<TunableKey>& tunableTable() {
  static const std::vector<TunableKey> table = {
      {"fusion.permute_into_experts", true},
      {"fusion.combine_into_experts", true},
      {"loss.kind", true},
      {"loss.chunk_tokens", true},
      {"loss.cce_vocab_block", true},
      {"loss.cce_filter_eps", true},
      {"loss.cce_filter_weight_grad", true},
      {"kda.chunk_size", true},
      {"kda.keep_intermediates", false},  // same bits (the CUDA recompute is bitwise)
      {"parallel.a2a_chunks", true},
      {"parallel.ep", true},
      {"parallel.fsdp", true},
      {"parallel.replicate", true},
      // The split of a step into micro-batches: the same gradient up to rounding with the LM
      // loss alone, but the aux losses and capacity see each micro-batch's routing.
      {"data.micro_batch_size", true},
      {"moe.capacity_factor", false},
      {"moe.drop_policy", false},
      {"swap.mode", false},             // same bits as without swap (docs/SWAP.md)
      {"swap.prefetch_layers", false},  // when reloads are issued: timing only
      {"swap.recompute_ops", false},    // same bits: the recompute re-runs the forward's launch
      {"run.threads", true},
      // CUDA kernel choices: the GLU split computes hidden from the bf16 gate / up (last bits);
      // every weight-gradient walk gives the same bits.
      {"kernels.expert_glu", true},
      {"kernels.expert_wgrad_walk", false},
  };
  return table;
}

Result<Knob> buildKnob(const engine::RunConfig& base, const KnobSpec& spec) {
  const engine::ConfigKeyInfo* info = detail::findKeyInfo(spec.key);
  const auto& keys = tunableKeys();
  if (info == nullptr || std::find(keys.begin(), keys.end(), spec.key) == keys.end()) {
    return invalidArgument("--knobs: " + spec.key + " is not a tunable key; accepted: " +
                           joinText(keys, ", "));
  }
  Knob knob{spec.key, {detail::currentValue(base, spec.key)}, isGatedKey(spec.key)};
  const bool generated = spec.values.empty();
  for (const std::string& text : generated ? detail::generatedValues(base, *info) : spec.values) {
    Status bounds = detail::checkAgainstBounds(*info, text);
    if (!bounds.isOk()) {
      if (generated) continue;  // a ladder rung outside this key's bounds: not a candidate
      return bounds;
    }
    MOEWB_ASSIGN_OR_RETURN(std::string canonical, detail::canonicalValue(base, spec.key, text));
    if (std::find(knob.values.begin(), knob.values.end(), canonical) == knob.values.end()) {
      knob.values.push_back(canonical);
    }
  }
  return knob;
}

// Number of gated knobs a candidate moves away from the base (0: a possible gate reference).
size_t gatedMoves(const SearchSpace& space, const Candidate& c) {
  size_t moves = 0;
  for (size_t i = 0; i < space.knobs.size(); ++i) {
    if (space.knobs[i].gated && c.settings[i].second != space.knobs[i].values.front()) ++moves;
  }
  return moves;
}

}  // namespace

size_t SearchSpace::validCount() const {
  return size_t(std::count_if(candidates.begin(), candidates.end(),
                              [](const Candidate& c) { return c.valid(); }));
}

const std::vector<std::string>& tunableKeys() {
  static const std::vector<std::string> keys = [] {
    std::vector<std::string> out;
    for (const auto& t : tunableTable()) out.push_back(t.key);
    return out;
  }();
  return keys;
}

bool isGatedKey(const std::string& key) {
  for (const auto& t : tunableTable()) {
    if (key == t.key) return t.gated;
  }
  return false;
}

std::vector<KnobSpec> defaultKnobs(const engine::RunConfig& base) {
  std::vector<KnobSpec> knobs = {
      {"fusion.permute_into_experts", {}}, {"fusion.combine_into_experts", {}}, {"loss.kind", {}}};
  if (base.model.mixerPattern.find('K') != std::string::npos)
    knobs.push_back({"kda.chunk_size", {}});
  if (base.parallel.worldSize > 1) knobs.push_back({"parallel.ep", {}});
  return knobs;
}

Result<std::vector<KnobSpec>> parseKnobList(const std::string& text) {
  std::vector<KnobSpec> out;
  std::set<std::string> seen;
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    if (comma == std::string::npos) comma = text.size();
    const std::string item = text.substr(start, comma - start);
    start = comma + 1;
    if (item.empty()) {
      return invalidArgument("--knobs: empty item in '" + text +
                             "'; accepted: KEY or KEY=V1|V2|..., separated by commas");
    }
    KnobSpec spec;
    const auto eq = item.find('=');
    spec.key = item.substr(0, eq);
    if (eq != std::string::npos) {
      const std::string values = item.substr(eq + 1);
      size_t vs = 0;
      while (vs <= values.size()) {
        size_t bar = values.find('|', vs);
        if (bar == std::string::npos) bar = values.size();
        std::string v = values.substr(vs, bar - vs);
        if (v.empty()) return invalidArgument("--knobs: empty value in '" + item + "'");
        spec.values.push_back(v);
        vs = bar + 1;
      }
    }
    if (!seen.insert(spec.key).second) {
      return invalidArgument("--knobs: " + spec.key + " is named twice");
    }
    out.push_back(std::move(spec));
  }
  return out;
}

Result<SearchSpace> buildSearchSpace(const engine::RunConfig& base,
                                     const std::vector<KnobSpec>& specs) {
  MOEWB_RETURN_IF_ERROR(engine::validateConfig(base).withContext("base config"));
  SearchSpace space;
  space.base = base;
  size_t total = 1;
  for (const KnobSpec& spec : specs) {
    MOEWB_ASSIGN_OR_RETURN(Knob knob, buildKnob(base, spec));
    total *= knob.values.size();
    if (total > kMaxCandidates) {
      return invalidArgument("--knobs: the space has more than " + std::to_string(kMaxCandidates) +
                             " candidates; name fewer keys or fewer values");
    }
    space.knobs.push_back(std::move(knob));
  }
  // Odometer over the knobs' values; index 0 everywhere is the base.
  std::vector<size_t> at(space.knobs.size(), 0);
  for (size_t n = 0; n < total; ++n) {
    Candidate c;
    for (size_t i = 0; i < at.size(); ++i) {
      c.settings.emplace_back(space.knobs[i].key, space.knobs[i].values[at[i]]);
    }
    auto valid = applySettings(base, c.settings);
    if (!valid.isOk()) c.rejection = valid.status().message();
    space.candidates.push_back(std::move(c));
    for (size_t i = at.size(); i-- > 0;) {
      if (++at[i] < space.knobs[i].values.size()) break;
      at[i] = 0;
    }
  }
  std::stable_sort(space.candidates.begin() + 1, space.candidates.end(),
                   [&](const Candidate& a, const Candidate& b) {
                     return std::min<size_t>(gatedMoves(space, a), 1) <
                            std::min<size_t>(gatedMoves(space, b), 1);
                   });
  return space;
}

std::string settingsText(const Settings& settings) {
  std::string out;
  for (const auto& [key, value] : settings) out += (out.empty() ? "" : ",") + key + "=" + value;
  return out;
}

Result<Settings> parseSettingsText(const std::string& text) {
  Settings out;
  if (text.empty()) return out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    if (comma == std::string::npos) comma = text.size();
    const std::string item = text.substr(start, comma - start);
    const auto eq = item.find('=');
    if (eq == std::string::npos || eq == 0) {
      return dataLoss("settings '" + text + "' is not a list of key=value");
    }
    out.emplace_back(item.substr(0, eq), item.substr(eq + 1));
    start = comma + 1;
  }
  return out;
}

Result<engine::ValidConfig> applySettings(const engine::RunConfig& base, const Settings& settings) {
  engine::RunConfig config = base;
  for (const auto& [key, value] : settings) {
    MOEWB_RETURN_IF_ERROR(engine::applyOverride(config, key + "=" + value));
  }
  return engine::ValidConfig::validate(std::move(config));
}

}  // namespace moewb::tuner
