// The key table of RunConfig (see config_keys.h) and the helpers that describe keys to users.
#include "config_keys.h"

#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>

namespace moewb::engine::detail {
namespace {

constexpr double kMaxInt32 = double(std::numeric_limits<int32_t>::max());
constexpr double kMaxInt64 = 9.0e18;

#define MOEWB_FIELD(path) [](RunConfig& c) -> auto& { return c.path; }

std::vector<KeySpec> buildSpecs() {
  return {
      {"run", "name", MOEWB_FIELD(run.name), 0, 0, false, {}, "run name shown in the workbench"},
      {"run", "seed", MOEWB_FIELD(run.seed), 0, kMaxInt64, false, {}, "seed of weights and data"},
      {"run", "steps", MOEWB_FIELD(run.steps), 1, kMaxInt64, false, {}, "optimizer steps to run"},
      {"run", "backend", MOEWB_FIELD(run.backend), 0, 0, false, {"cpu", "auto"},
       "compute backend (auto picks the best one built in)"},
      {"run", "threads", MOEWB_FIELD(run.threads), 0, 1024, false, {},
       "CPU worker threads, 0 = all hardware threads"},
      {"model", "vocab_size", MOEWB_FIELD(model.vocabSize), 2, 16'777'216, false, {}, "vocabulary size"},
      {"model", "d_model", MOEWB_FIELD(model.dModel), 1, 65'536, false, {}, "model width D"},
      {"model", "num_layers", MOEWB_FIELD(model.numLayers), 1, 1024, false, {}, "decoder layers"},
      {"model", "num_heads", MOEWB_FIELD(model.numHeads), 1, 1024, false, {},
       "attention heads (must divide d_model)"},
      {"model", "seq_len", MOEWB_FIELD(model.seqLen), 2, 1'048'576, false, {}, "tokens per sequence"},
      {"model", "norm_eps", MOEWB_FIELD(model.normEps), 0, 1, true, {}, "RMSNorm epsilon"},
      {"model", "init_std", MOEWB_FIELD(model.initStd), 0, 10, true, {}, "std of the normal weight init"},
      {"moe", "num_experts", MOEWB_FIELD(moe.numExperts), 1, 4096, false, {}, "routed experts per layer"},
      {"moe", "top_k", MOEWB_FIELD(moe.topK), 1, 4096, false, {},
       "experts per token (at most num_experts)"},
      {"moe", "d_ff", MOEWB_FIELD(moe.dFf), 1, 1'048'576, false, {}, "expert SwiGLU hidden width"},
      {"moe", "aux_loss_coef", MOEWB_FIELD(moe.auxLossCoef), 0, 1e3, false, {},
       "switch load-balancing loss weight (0 = off)"},
      {"data", "kind", MOEWB_FIELD(data.kind), 0, 0, false, {"synthetic"}, "data source"},
      {"data", "batch_size", MOEWB_FIELD(data.batchSize), 1, 1'048'576, false, {}, "sequences per step"},
      {"data", "skew", MOEWB_FIELD(data.skew), 0, 10, false, {},
       "Zipf exponent of topic frequencies: 0 = uniform, larger = hotter experts"},
      {"data", "num_topics", MOEWB_FIELD(data.numTopics), 1, 1'048'576, false, {},
       "hidden topics of the synthetic data (at most vocab_size)"},
      {"data", "noise", MOEWB_FIELD(data.noise), 0, 1, false, {},
       "probability that a token is uniform random"},
      {"optim", "lr", MOEWB_FIELD(optim.lr), 0, 10, true, {}, "peak AdamW learning rate"},
      {"optim", "beta1", MOEWB_FIELD(optim.beta1), 0, 0.999999, false, {}, "AdamW beta1"},
      {"optim", "beta2", MOEWB_FIELD(optim.beta2), 0, 0.999999999, false, {}, "AdamW beta2"},
      {"optim", "eps", MOEWB_FIELD(optim.eps), 0, 1, true, {}, "AdamW epsilon"},
      {"optim", "weight_decay", MOEWB_FIELD(optim.weightDecay), 0, 10, false, {},
       "decoupled weight decay on matrices"},
      {"optim", "warmup_steps", MOEWB_FIELD(optim.warmupSteps), 0, kMaxInt32, false, {},
       "linear learning-rate warm-up steps"},
      {"optim", "grad_clip", MOEWB_FIELD(optim.gradClip), 0, 1e6, false, {},
       "global gradient-norm clip (0 = off)"},
  };
}

#undef MOEWB_FIELD

std::string formatNumber(double v) {
  if (v == std::floor(v) && std::fabs(v) < 1e15) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.0f", v);
    return buf;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

}  // namespace

const char* KeySpec::typeName() const {
  switch (field.index()) {
    case 0: case 1: case 2: return "integer";
    case 3: return "float";
    default: return "string";
  }
}

std::string KeySpec::acceptedText() const {
  if (std::holds_alternative<std::string& (*)(RunConfig&)>(field)) {
    if (choices.empty()) return "any string";
    std::string out;
    for (const auto& c : choices) out += (out.empty() ? "\"" : " | \"") + c + "\"";
    return out;
  }
  std::string lo = formatNumber(minValue);
  std::string hi = maxValue >= kMaxInt32 ? "" : formatNumber(maxValue);
  if (minExclusive) return "> " + lo + (hi.empty() ? "" : " and <= " + hi);
  return lo + ".." + hi;
}

const std::vector<KeySpec>& keySpecs() {
  static const std::vector<KeySpec> kSpecs = buildSpecs();
  return kSpecs;
}

const KeySpec* findKey(const std::string& dottedKey) {
  for (const auto& spec : keySpecs()) {
    if (spec.key() == dottedKey) return &spec;
  }
  return nullptr;
}

std::string acceptedKeysText(const std::string& section) {
  bool known = false;
  for (const auto& spec : keySpecs()) known = known || section == spec.section;
  std::string out;
  for (const auto& spec : keySpecs()) {
    if (known && section != spec.section) continue;
    out += (out.empty() ? "" : ", ") + (known ? std::string(spec.name) : spec.key());
  }
  return out;
}

std::string fieldToToml(const KeySpec& spec, const RunConfig& config) {
  RunConfig& c = const_cast<RunConfig&>(config);  // accessors are shared with the setters
  return std::visit(
      [&](auto ref) -> std::string {
        const auto& value = ref(c);
        using T = std::decay_t<decltype(value)>;
        if constexpr (std::is_same_v<T, std::string>) {
          std::ostringstream os;
          os << '"';
          for (char ch : value) {
            if (ch == '"' || ch == '\\') os << '\\' << ch;
            else if (ch == '\n') os << "\\n";
            else if (static_cast<unsigned char>(ch) < 0x20) {
              char buf[8];
              std::snprintf(buf, sizeof buf, "\\u%04x", ch);
              os << buf;
            } else os << ch;
          }
          os << '"';
          return os.str();
        } else if constexpr (std::is_same_v<T, double>) {
          char buf[40];
          std::snprintf(buf, sizeof buf, "%.17g", value);
          std::string s = buf;
          if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
          return s;
        } else {
          return std::to_string(value);
        }
      },
      spec.field);
}

}  // namespace moewb::engine::detail
