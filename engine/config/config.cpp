// Config parsing (toml++), overrides, the one validation function and TOML serialisation.
// Everything walks the key table in config_keys.cpp. Cost: microseconds; called once per run and
// once per override.
#include "moewb/engine/config.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <sstream>
#include <toml++/toml.h>
#include <unistd.h>

#include "config/config_keys.h"
#include "config/parallel_config.h"
#include "moewb/base/text.h"
#include "moewb/engine/swap.h"

namespace moewb::engine {
namespace {

using detail::KeySpec;

const char* article(const char* noun) { return noun[0] == 'i' ? "an " : "a "; }

std::string sectionList() {
  std::vector<std::string> sections;
  for (const auto& spec : detail::keySpecs()) {
    if (sections.empty() || sections.back() != spec.section) sections.push_back(spec.section);
  }
  return joinText(sections, ", ");
}

// Cross-key rules of the hybrid architecture (mixers, MoE variants).
Status validateArchitecture(const RunConfig& config) {
  const auto& m = config.model;
  const auto& moe = config.moe;
  if (m.mixerPattern.empty() ||
      m.mixerPattern.find_first_not_of("AKS") != std::string::npos) {
    return invalidArgument("model.mixer_pattern = \"" + m.mixerPattern +
                           "\" is not accepted; accepted: a non-empty string of A (softmax "
                           "attention), K (KDA), S (gated sparse attention), e.g. \"KKKS\"");
  }
  if (moe.numExperts % moe.numGroups != 0) {
    return invalidArgument("moe.num_groups = " + std::to_string(moe.numGroups) +
                           " does not divide moe.num_experts = " + std::to_string(moe.numExperts));
  }
  if (moe.topkGroups > moe.numGroups) {
    return invalidArgument("moe.topk_groups = " + std::to_string(moe.topkGroups) +
                           " exceeds moe.num_groups = " + std::to_string(moe.numGroups));
  }
  const int32_t reachable = moe.numExperts / moe.numGroups * moe.topkGroups;
  if (moe.topK > reachable) {
    return invalidArgument("moe.top_k = " + std::to_string(moe.topK) + " exceeds the " +
                           std::to_string(reachable) +
                           " experts in moe.topk_groups of moe.num_groups groups");
  }
  if (moe.latentDim > m.dModel) {
    return invalidArgument("moe.latent_dim = " + std::to_string(moe.latentDim) +
                           " exceeds model.d_model = " + std::to_string(m.dModel) +
                           "; accepted: 0 (off) or 1.." + std::to_string(m.dModel));
  }
  const bool usesSparse = m.mixerPattern.find('S') != std::string::npos;
  const bool usesKda = m.mixerPattern.find('K') != std::string::npos;
  if (usesSparse && m.numHeads % config.sparse.kvHeads != 0) {
    return invalidArgument("sparse.kv_heads = " + std::to_string(config.sparse.kvHeads) +
                           " does not divide model.num_heads = " + std::to_string(m.numHeads));
  }
  const int32_t kdaHeads = config.kda.numHeads > 0 ? config.kda.numHeads : m.numHeads;
  if (usesKda && config.kda.headDim == 0 && m.dModel % kdaHeads != 0) {
    return invalidArgument("kda.num_heads = " + std::to_string(kdaHeads) +
                           " does not divide model.d_model = " + std::to_string(m.dModel) +
                           "; set kda.head_dim or choose a divisor");
  }
  return Status::ok();
}

std::string where(const std::string& source, const toml::node& node) {
  const auto& begin = node.source().begin;
  if (begin.line == 0) return source;
  return source + ":" + std::to_string(begin.line);
}

std::string describeNode(const toml::node& node) {
  std::ostringstream os;
  os << node.type() << " ";
  if (node.is_table() || node.is_array()) return os.str();
  node.visit([&](const auto& v) { os << v; });
  return os.str();
}

// Stores a TOML value into the field described by `spec`, checking its type (not its range).
Status setField(const KeySpec& spec, RunConfig& config, const toml::node& node,
                const std::string& origin) {
  auto typeError = [&]() {
    return invalidArgument(origin + ": " + spec.key() + " must be " + article(spec.typeName()) +
                           spec.typeName() +
                           " (accepted: " + spec.acceptedText() + "), got " + describeNode(node));
  };
  return std::visit(
      [&](auto ref) -> Status {
        auto& field = ref(config);
        using T = std::decay_t<decltype(field)>;
        if constexpr (std::is_same_v<T, std::string>) {
          if (!node.is_string()) return typeError();
          field = *node.value<std::string>();
        } else if constexpr (std::is_same_v<T, bool>) {
          if (!node.is_boolean()) return typeError();
          field = *node.value<bool>();
        } else if constexpr (std::is_same_v<T, double>) {
          if (!node.is_number()) return typeError();
          field = *node.value<double>();
        } else {
          if (!node.is_integer()) return typeError();
          int64_t v = *node.value<int64_t>();
          if (v < int64_t(std::numeric_limits<T>::min()) ||
              (std::is_same_v<T, int32_t> && v > int64_t(std::numeric_limits<int32_t>::max()))) {
            return invalidArgument(origin + ": " + spec.key() + " = " + std::to_string(v) +
                                   " is out of range; accepted: " + spec.acceptedText());
          }
          field = T(v);
        }
        return Status::ok();
      },
      spec.field);
}

Status parseSection(const std::string& sectionName, const toml::table& table, RunConfig& config,
                    const std::string& source) {
  for (const auto& [key, node] : table) {
    std::string dotted = sectionName + "." + std::string(key.str());
    const KeySpec* spec = detail::findKey(dotted);
    if (!spec) {
      return invalidArgument(where(source, node) + ": unknown key '" + dotted +
                             "'; accepted keys in [" + sectionName +
                             "]: " + detail::acceptedKeysText(sectionName));
    }
    MOEWB_RETURN_IF_ERROR(setField(*spec, config, node, where(source, node)));
  }
  return Status::ok();
}

// The per-key check of validateConfig: `spec`'s field against its typed bounds `info`
// (configKeys(), so what the GUI and docs show is what is checked).
Status checkRange(const KeySpec& spec, const ConfigKeyInfo& info, const RunConfig& config) {
  RunConfig& c = const_cast<RunConfig&>(config);
  return std::visit(
      [&](auto ref) -> Status {
        const auto& v = ref(c);
        using T = std::decay_t<decltype(v)>;
        bool ok = true;
        if constexpr (std::is_same_v<T, bool>) {
          ok = true;
        } else if constexpr (std::is_same_v<T, std::string>) {
          ok = info.acceptsString(v);
        } else {
          ok = info.acceptsNumber(double(v));
          // TOML integers are signed 64-bit: a larger seed could not be read back.
          if constexpr (std::is_same_v<T, uint64_t>) {
            ok = ok && v <= uint64_t(std::numeric_limits<int64_t>::max());
          }
        }
        if (ok) return Status::ok();
        return invalidArgument(spec.key() + " = " + detail::fieldToToml(spec, config) +
                               " is not accepted; accepted: " + info.accepted);
      },
      spec.field);
}

Status relationError(const std::string& key, const std::string& what) {
  return invalidArgument(key + ": " + what);
}

std::string gbText(double gb) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", gb);
  return buf;
}

// Each entry of the comma list `list` (key `key`) must be one of `names`; "" (or blanks) passes.
// `what` names the kind of entry in the message ("a swap op").
Status validateOpList(const std::string& key, const std::string& list,
                      const std::vector<std::string>& names, const std::string& what,
                      const std::string& emptyMeaning) {
  const std::string accepted = joinText(names, ", ");
  if (list.find_first_not_of(" \t") == std::string::npos) return Status::ok();
  for (const std::string& entry : splitSwapOpList(list)) {
    if (std::find(names.begin(), names.end(), entry) == names.end()) {
      return relationError(key, "\"" + entry + "\" in \"" + list + "\" is not " + what + "; "
                                "accepted: a comma list of " + accepted + " (\"\" = " +
                                emptyMeaning + ")");
    }
  }
  return Status::ok();
}

// Cross-key rules of [swap]. swap.prefetch_layers >= model.num_layers is accepted on purpose: it
// issues every reload at the turn, which is a valid (if memory-hungry) schedule.
Status validateSwap(const RunConfig& config) {
  const SwapSection& swap = config.swap;
  MOEWB_RETURN_IF_ERROR(validateOpList("swap.ops", swap.ops, swapOpNames(), "a swap op", "all"));
  MOEWB_RETURN_IF_ERROR(validateOpList("swap.recompute_ops", swap.recomputeOps,
                                       swapRecomputeOpNames(), "a recomputable op",
                                       "none"));
  const bool recomputes = swap.recomputeOps.find_first_not_of(" \t,") != std::string::npos;
  if (recomputes && swap.mode != "off" && config.run.backend == "cpu") {
    return relationError("swap.recompute_ops",
                         "recompute runs on the CUDA backend only (the CPU backend keeps every "
                         "activation); set swap.recompute_ops = \"\" or run.backend = \"cuda\"");
  }
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long pageBytes = sysconf(_SC_PAGE_SIZE);
  const double hostGb = pages > 0 && pageBytes > 0 ? double(pages) * double(pageBytes) / 1e9 : 0;
  if (hostGb > 0 && swap.pinnedBudgetGb > hostGb) {
    return relationError("swap.pinned_budget_gb",
                         "pinned_budget_gb = " + gbText(swap.pinnedBudgetGb) +
                             " exceeds this machine's " + gbText(hostGb) +
                             " GB of physical memory; accepted: 0.." + gbText(hostGb));
  }
  if (swap.mode != "off" && config.parallel.worldSize > 1) {
    return relationError("swap.mode",
                         "swap runs on one rank only for now (parallel.world_size = " +
                             std::to_string(config.parallel.worldSize) +
                             "); set swap.mode = \"off\" or parallel.world_size = 1");
  }
  return Status::ok();
}

// "1, 2, 4, 8": the divisors of `n`, or "" when there are more than a message should list.
std::string divisorList(int64_t n) {
  std::vector<std::string> divisors;
  for (int64_t d = 1; d <= n && divisors.size() <= 12; ++d) {
    if (n % d == 0) divisors.push_back(std::to_string(d));
  }
  return divisors.size() > 12 ? "" : joinText(divisors, ", ");
}

// data.micro_batch_size against the rank's batch (after validateParallelConfig checked that
// world_size divides batch_size) and against swap, whose planner times one forward and one
// backward per step.
Status validateMicroBatch(const RunConfig& config) {
  const int64_t micro = config.data.microBatchSize;
  if (micro == 0) return Status::ok();
  const int64_t rankBatch = config.rankBatchSize();
  if (rankBatch % micro != 0) {
    const std::string list = divisorList(rankBatch);
    return relationError(
        "data.micro_batch_size",
        "micro_batch_size = " + std::to_string(micro) + " does not divide the " +
            std::to_string(rankBatch) + " sequences each rank trains per step (data.batch_size = " +
            std::to_string(config.data.batchSize) + " / parallel.world_size = " +
            std::to_string(config.parallel.worldSize) + "); accepted: 0 (the whole batch) or a " +
            "divisor of " + std::to_string(rankBatch) + (list.empty() ? "" : " (" + list + ")"));
  }
  if (config.microBatches() > 1 && config.swap.mode != "off") {
    return relationError(
        "swap.mode", "\"" + config.swap.mode + "\" is not accepted with data.micro_batch_size = " +
                         std::to_string(micro) + " (" + std::to_string(config.microBatches()) +
                         " micro-batches a step): swap plans one forward and one backward per "
                         "step; accepted: swap.mode = \"off\", or data.micro_batch_size = 0 or " +
                         std::to_string(rankBatch));
  }
  return Status::ok();
}

}  // namespace

const std::vector<ConfigKeyInfo>& configKeys() {
  static const std::vector<ConfigKeyInfo> kKeys = [] {
    std::vector<ConfigKeyInfo> keys;
    for (const auto& spec : detail::keySpecs()) keys.push_back(spec.info());
    return keys;
  }();
  return kKeys;
}

namespace {

// parseConfigToml before its message is shortened.
Result<RunConfig> parseConfigTomlText(const std::string& text, const std::string& sourceName) {
  toml::table root;
  try {
    root = toml::parse(text, sourceName);
  } catch (const toml::parse_error& err) {
    return invalidArgument(sourceName + ":" + std::to_string(err.source().begin.line) +
                           ": not valid TOML: " + std::string(err.description()));
  }
  RunConfig config;
  for (const auto& [key, node] : root) {
    std::string section(key.str());
    const toml::table* table = node.as_table();
    if (!table) {
      return invalidArgument(where(sourceName, node) + ": top-level key '" + section +
                             "' is not a section; accepted sections: " + sectionList());
    }
    bool known = false;
    for (const auto& spec : detail::keySpecs()) known = known || section == spec.section;
    if (!known) {
      return invalidArgument(where(sourceName, node) + ": unknown section [" + section +
                             "]; accepted sections: " + sectionList());
    }
    MOEWB_RETURN_IF_ERROR(parseSection(section, *table, config, sourceName));
  }
  return config;
}

// A message quoting a user's value stays readable when the value is huge (a 1 MB string).
Status shortened(const Status& status) {
  return status.isOk() ? status : Status(status.code(), shortenLongRuns(status.message()));
}

}  // namespace

Result<RunConfig> parseConfigToml(const std::string& text, const std::string& sourceName) {
  Result<RunConfig> parsed = parseConfigTomlText(text, sourceName);
  if (!parsed.isOk()) return shortened(parsed.status());
  return parsed;
}

Result<RunConfig> loadConfigFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return notFound("cannot read config file '" + path + "'");
  std::ostringstream text;
  text << in.rdbuf();
  return parseConfigToml(text.str(), path);
}

namespace {

// applyOverride before its message is shortened.
Status applyOverrideText(RunConfig& config, const std::string& assignment) {
  size_t eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0) {
    return invalidArgument("override '" + assignment + "' is not of the form section.key=value");
  }
  std::string key = assignment.substr(0, eq);
  std::string valueText = assignment.substr(eq + 1);
  const KeySpec* spec = detail::findKey(key);
  if (!spec) {
    std::string section = key.substr(0, key.find('.'));
    return invalidArgument("unknown key '" + key + "' in override '" + assignment +
                           "'; accepted keys: " + detail::acceptedKeysText(section));
  }
  toml::table parsed;
  try {
    parsed = toml::parse("v = " + valueText);
  } catch (const toml::parse_error&) {
    // A bare word such as `--set run.name=demo` is taken as a string for string keys.
    if (std::string(spec->typeName()) != "string") {
      return invalidArgument("override '" + assignment + "': '" + valueText + "' is not " +
                             article(spec->typeName()) + spec->typeName() +
                             "; accepted: " + spec->acceptedText());
    }
    parsed.insert_or_assign("v", valueText);
  }
  return setField(*spec, config, *parsed.get("v"), "override '" + assignment + "'");
}

// validateConfig before its message is shortened.
Status validateConfigFields(const RunConfig& config);

}  // namespace

Status applyOverride(RunConfig& config, const std::string& assignment) {
  return shortened(applyOverrideText(config, assignment));
}

Result<ValidConfig> ValidConfig::validate(RunConfig config) {
  MOEWB_RETURN_IF_ERROR(validateConfig(config));
  return ValidConfig(std::move(config));
}

Status validateConfig(const RunConfig& config) { return shortened(validateConfigFields(config)); }

namespace {

Status validateConfigFields(const RunConfig& config) {
  const auto& specs = detail::keySpecs();
  const auto& infos = configKeys();  // one per spec, same order
  for (size_t i = 0; i < specs.size(); ++i) {
    MOEWB_RETURN_IF_ERROR(checkRange(specs[i], infos[i], config));
  }
  const auto& m = config.model;
  const auto& moe = config.moe;
  if (moe.topK > moe.numExperts) {
    return relationError("moe.top_k", "top_k = " + std::to_string(moe.topK) +
                                          " exceeds moe.num_experts = " +
                                          std::to_string(moe.numExperts) +
                                          "; accepted: 1.." + std::to_string(moe.numExperts));
  }
  if (m.dModel % m.numHeads != 0) {
    return relationError("model.num_heads", "num_heads = " + std::to_string(m.numHeads) +
                                                " does not divide model.d_model = " +
                                                std::to_string(m.dModel) +
                                                "; accepted: a divisor of d_model");
  }
  MOEWB_RETURN_IF_ERROR(validateArchitecture(config));
  if (config.data.numTopics > m.vocabSize) {
    return relationError("data.num_topics", "num_topics = " + std::to_string(config.data.numTopics) +
                                                " exceeds model.vocab_size = " +
                                                std::to_string(m.vocabSize));
  }
  if (config.data.imageSize > 0 && config.data.imageSize % config.data.patchSize != 0) {
    return relationError("data.patch_size", "patch_size = " + std::to_string(config.data.patchSize) +
                                                " does not divide data.image_size = " +
                                                std::to_string(config.data.imageSize));
  }
  if (config.data.imagePatches() >= m.seqLen) {
    return relationError("data.image_size", "image_size = " + std::to_string(config.data.imageSize) +
                                                " gives " + std::to_string(config.data.imagePatches()) +
                                                " patches, leaving no text in model.seq_len = " +
                                                std::to_string(m.seqLen));
  }
  if (config.lora.enabled && config.lora.rank < 1) {
    return relationError("lora.rank", "rank = " + std::to_string(config.lora.rank) +
                                          " is not accepted with lora.enabled = true; accepted: "
                                          "1..65536");
  }
  int64_t tokens = config.tokensPerStep();
  if (tokens > (int64_t(1) << 26)) {
    return relationError("data.batch_size", "batch_size * model.seq_len = " +
                                                std::to_string(tokens) +
                                                " tokens per step exceeds 67108864");
  }
  MOEWB_RETURN_IF_ERROR(validateSwap(config));
  MOEWB_RETURN_IF_ERROR(validateParallelConfig(config));
  return validateMicroBatch(config);
}

}  // namespace

std::string toToml(const RunConfig& config) {
  std::ostringstream os;
  std::string section;
  for (const auto& spec : detail::keySpecs()) {
    if (section != spec.section) {
      if (!section.empty()) os << "\n";
      section = spec.section;
      os << "[" << section << "]\n";
    }
    os << spec.name << " = " << detail::fieldToToml(spec, config) << "\n";
  }
  return os.str();
}

}  // namespace moewb::engine
