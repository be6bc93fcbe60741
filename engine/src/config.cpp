// Config parsing (toml++), overrides, the one validation function and TOML serialisation.
// Everything walks the key table in config_keys.cpp. Cost: microseconds; called once per run and
// once per override.
#include "moewb/engine/config.h"

#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>
#include <toml++/toml.h>

#include "config_keys.h"

namespace moewb::engine {
namespace {

using detail::KeySpec;

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
    return invalidArgument(origin + ": " + spec.key() + " must be " +
                           (spec.typeName()[0] == 'i' ? "an " : "a ") + spec.typeName() +
                           " (accepted: " + spec.acceptedText() + "), got " + describeNode(node));
  };
  return std::visit(
      [&](auto ref) -> Status {
        auto& field = ref(config);
        using T = std::decay_t<decltype(field)>;
        if constexpr (std::is_same_v<T, std::string>) {
          if (!node.is_string()) return typeError();
          field = *node.value<std::string>();
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

Status checkRange(const KeySpec& spec, const RunConfig& config) {
  RunConfig& c = const_cast<RunConfig&>(config);
  return std::visit(
      [&](auto ref) -> Status {
        const auto& v = ref(c);
        using T = std::decay_t<decltype(v)>;
        bool ok = true;
        if constexpr (std::is_same_v<T, std::string>) {
          if (!spec.choices.empty()) {
            ok = false;
            for (const auto& choice : spec.choices) ok = ok || choice == v;
          }
        } else {
          double d = double(v);
          ok = std::isfinite(d) && (spec.minExclusive ? d > spec.minValue : d >= spec.minValue) &&
               d <= spec.maxValue;
        }
        if (ok) return Status::ok();
        return invalidArgument(spec.key() + " = " + detail::fieldToToml(spec, config) +
                               " is not accepted; accepted: " + spec.acceptedText());
      },
      spec.field);
}

Status relationError(const std::string& key, const std::string& what) {
  return invalidArgument(key + ": " + what);
}

}  // namespace

const std::vector<ConfigKeyInfo>& configKeys() {
  static const std::vector<ConfigKeyInfo> kKeys = [] {
    std::vector<ConfigKeyInfo> keys;
    RunConfig defaults;
    for (const auto& spec : detail::keySpecs()) {
      keys.push_back({spec.key(), spec.typeName(), spec.acceptedText(),
                      detail::fieldToToml(spec, defaults), spec.description});
    }
    return keys;
  }();
  return kKeys;
}

Result<RunConfig> parseConfigToml(const std::string& text, const std::string& sourceName) {
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
                             "' is not a section; accepted sections: run, model, moe, data, optim");
    }
    bool known = section == "run" || section == "model" || section == "moe" ||
                 section == "data" || section == "optim";
    if (!known) {
      return invalidArgument(where(sourceName, node) + ": unknown section [" + section +
                             "]; accepted sections: run, model, moe, data, optim");
    }
    MOEWB_RETURN_IF_ERROR(parseSection(section, *table, config, sourceName));
  }
  return config;
}

Result<RunConfig> loadConfigFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return notFound("cannot read config file '" + path + "'");
  std::ostringstream text;
  text << in.rdbuf();
  return parseConfigToml(text.str(), path);
}

Status applyOverride(RunConfig& config, const std::string& assignment) {
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
                             (spec->typeName()[0] == 'i' ? "an " : "a ") + spec->typeName() +
                             "; accepted: " + spec->acceptedText());
    }
    parsed.insert_or_assign("v", valueText);
  }
  return setField(*spec, config, *parsed.get("v"), "override '" + assignment + "'");
}

Status validateConfig(const RunConfig& config) {
  for (const auto& spec : detail::keySpecs()) MOEWB_RETURN_IF_ERROR(checkRange(spec, config));
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
  if (config.data.numTopics > m.vocabSize) {
    return relationError("data.num_topics", "num_topics = " + std::to_string(config.data.numTopics) +
                                                " exceeds model.vocab_size = " +
                                                std::to_string(m.vocabSize));
  }
  int64_t tokens = config.tokensPerStep();
  if (tokens > (int64_t(1) << 26)) {
    return relationError("data.batch_size", "batch_size * model.seq_len = " +
                                                std::to_string(tokens) +
                                                " tokens per step exceeds 67108864");
  }
  return Status::ok();
}

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
