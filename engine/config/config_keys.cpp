// The key table of RunConfig (see config_keys.h), the typed bounds it gives configKeys() and the
// accepted text written from them, and the helpers that describe keys to users.
#include "config/config_keys.h"

#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>

namespace moewb::engine::detail {
namespace {

// No bound but the field's own (see ConfigKeyInfo::max).
constexpr double kNoMax = std::numeric_limits<double>::infinity();

#define MOEWB_FIELD(path) [](RunConfig& c) -> auto& { return c.path; }

std::vector<KeySpec> buildSpecs() {
  return {
      {"run", "name", MOEWB_FIELD(run.name), 0, 0, false, {}, "run name shown in the workbench"},
      {"run", "seed", MOEWB_FIELD(run.seed), 0, kNoMax, false, {}, "seed of weights and data"},
      {"run", "steps", MOEWB_FIELD(run.steps), 1, kNoMax, false, {}, "optimizer steps to run"},
      {"run", "backend", MOEWB_FIELD(run.backend), 0, 0, false, {"cpu", "cuda", "auto"},
       "compute backend: cpu (reference), cuda (GPU, bf16 mixed precision), auto (cuda when it can run the model, else cpu)"},
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
      {"model", "mixer_pattern", MOEWB_FIELD(model.mixerPattern), 0, 0, false, {},
       "token mixer per layer, cycled: A softmax attention, K KDA, S gated sparse attention"},
      {"model", "residual", MOEWB_FIELD(model.residual), 0, 0, false, {"plain", "attnres"},
       "pre-norm residuals or block attention residuals"},
      {"model", "attnres_block_size", MOEWB_FIELD(model.attnresBlockSize), 1, 1'048'576, false, {},
       "AttnRes block size in sublayers (2 = one block per layer)"},
      {"moe", "num_experts", MOEWB_FIELD(moe.numExperts), 1, 4096, false, {}, "routed experts per layer"},
      {"moe", "top_k", MOEWB_FIELD(moe.topK), 1, 4096, false, {},
       "experts per token (at most num_experts)"},
      {"moe", "d_ff", MOEWB_FIELD(moe.dFf), 1, 1'048'576, false, {}, "expert SwiGLU hidden width"},
      {"moe", "aux_loss_coef", MOEWB_FIELD(moe.auxLossCoef), 0, 1e3, false, {},
       "switch load-balancing loss weight (0 = off)"},
      {"moe", "router", MOEWB_FIELD(moe.router), 0, 0, false, {"softmax", "sigmoid"},
       "router score function"},
      {"moe", "route_scale", MOEWB_FIELD(moe.routeScale), 0, 1e3, true, {},
       "sigmoid router: scale of the normalised weights"},
      {"moe", "num_groups", MOEWB_FIELD(moe.numGroups), 1, 4096, false, {},
       "expert groups for group-limited routing (1 = off; must divide num_experts)"},
      {"moe", "topk_groups", MOEWB_FIELD(moe.topkGroups), 1, 4096, false, {},
       "groups kept per token (at most num_groups)"},
      {"moe", "seq_aux_loss_coef", MOEWB_FIELD(moe.seqAuxLossCoef), 0, 1e3, false, {},
       "sequence-level aux loss weight"},
      {"moe", "z_loss_coef", MOEWB_FIELD(moe.zLossCoef), 0, 1e3, false, {}, "router z-loss weight"},
      {"moe", "bias_update_rate", MOEWB_FIELD(moe.biasUpdateRate), 0, 1, false, {},
       "aux-loss-free balancing bias step (0 = off)"},
      {"moe", "capacity_factor", MOEWB_FIELD(moe.capacityFactor), 0, 1e3, false, {},
       "expert capacity factor (0 = dropless)"},
      {"moe", "drop_policy", MOEWB_FIELD(moe.dropPolicy), 0, 0, false, {"probs", "position"},
       "which assignments an over-capacity expert drops"},
      {"moe", "num_shared_experts", MOEWB_FIELD(moe.numSharedExperts), 0, 64, false, {},
       "always-active shared experts"},
      {"moe", "shared_d_ff", MOEWB_FIELD(moe.sharedDFf), 0, 1'048'576, false, {},
       "shared expert hidden width (0 = d_ff)"},
      {"moe", "latent_dim", MOEWB_FIELD(moe.latentDim), 0, 65'536, false, {},
       "latent MoE width (experts work in it; 0 = off; at most d_model)"},
      {"moe", "activation", MOEWB_FIELD(moe.activation), 0, 0, false, {"swiglu", "situ"},
       "expert activation"},
      {"moe", "situ_beta1", MOEWB_FIELD(moe.situBeta1), 0, 1e6, true, {}, "SiTU gate clip"},
      {"moe", "situ_beta2", MOEWB_FIELD(moe.situBeta2), 0, 1e6, true, {}, "SiTU linear clip"},
      {"data", "kind", MOEWB_FIELD(data.kind), 0, 0, false, {"synthetic"}, "data source"},
      {"data", "batch_size", MOEWB_FIELD(data.batchSize), 1, 1'048'576, false, {}, "sequences per step"},
      {"data", "micro_batch_size", MOEWB_FIELD(data.microBatchSize), 0, 1'048'576, false, {},
       "sequences per forward and backward on each rank (must divide batch_size / "
       "parallel.world_size): gradients accumulate over the step's micro-batches and the "
       "optimizer runs once (0 = the rank's whole batch)"},
      {"data", "skew", MOEWB_FIELD(data.skew), 0, 10, false, {},
       "Zipf exponent of topic frequencies: 0 = uniform, larger = hotter experts"},
      {"data", "num_topics", MOEWB_FIELD(data.numTopics), 1, 1'048'576, false, {},
       "hidden topics of the synthetic data (at most vocab_size)"},
      {"data", "noise", MOEWB_FIELD(data.noise), 0, 1, false, {},
       "probability that a token is uniform random"},
      {"data", "image_size", MOEWB_FIELD(data.imageSize), 0, 4096, false, {},
       "pixels per side of the image that starts each sequence (0 = text only)"},
      {"data", "patch_size", MOEWB_FIELD(data.patchSize), 1, 4096, false, {},
       "pixels per patch side; (image_size / patch_size)^2 patches lead each sequence"},
      {"data", "image_channels", MOEWB_FIELD(data.imageChannels), 1, 16, false, {},
       "channels per pixel"},
      {"data", "image_noise", MOEWB_FIELD(data.imageNoise), 0, 100, false, {},
       "std of the noise on a topic's prototype image"},
      {"optim", "lr", MOEWB_FIELD(optim.lr), 0, 10, true, {}, "peak AdamW learning rate"},
      {"optim", "beta1", MOEWB_FIELD(optim.beta1), 0, 0.999999, false, {}, "AdamW beta1"},
      {"optim", "beta2", MOEWB_FIELD(optim.beta2), 0, 0.999999999, false, {}, "AdamW beta2"},
      {"optim", "eps", MOEWB_FIELD(optim.eps), 0, 1, true, {}, "AdamW epsilon"},
      {"optim", "weight_decay", MOEWB_FIELD(optim.weightDecay), 0, 10, false, {},
       "decoupled weight decay on matrices"},
      {"optim", "warmup_steps", MOEWB_FIELD(optim.warmupSteps), 0, kNoMax, false, {},
       "linear learning-rate warm-up steps"},
      {"optim", "grad_clip", MOEWB_FIELD(optim.gradClip), 0, 1e6, false, {},
       "global gradient-norm clip (0 = off)"},
      {"kda", "num_heads", MOEWB_FIELD(kda.numHeads), 0, 1024, false, {},
       "KDA heads (0 = model.num_heads)"},
      {"kda", "head_dim", MOEWB_FIELD(kda.headDim), 0, 1024, false, {},
       "KDA key/value head width (0 = d_model / heads)"},
      {"kda", "chunk_size", MOEWB_FIELD(kda.chunkSize), 1, 4096, false, {},
       "chunk length of the chunked form"},
      {"kda", "gate", MOEWB_FIELD(kda.gate), 0, 0, false, {"default", "lower_bound"},
       "forget gate form"},
      {"kda", "lower_bound", MOEWB_FIELD(kda.lowerBound), -1e3, 0, false, {},
       "lower bound of the log forget gate (negative)"},
      {"kda", "gate_rank", MOEWB_FIELD(kda.gateRank), 0, 65'536, false, {},
       "rank of the gate bottlenecks (0 = head_dim)"},
      {"kda", "keep_intermediates", MOEWB_FIELD(kda.keepIntermediates), 0, 0, false, {},
       "CUDA: the forward keeps its chunk workspace, entry states and Vn for the backward "
       "instead of recomputing them (same bits, ~17% less KDA core time, (5 K + K V / C) fp32 "
       "more activations per token, head and KDA layer); the CPU backend always recomputes"},
      {"sparse", "kv_heads", MOEWB_FIELD(sparse.kvHeads), 1, 1024, false, {},
       "key/value heads (must divide model.num_heads)"},
      {"sparse", "head_dim", MOEWB_FIELD(sparse.headDim), 0, 1024, false, {},
       "head width (0 = d_model / num_heads)"},
      {"sparse", "top_k", MOEWB_FIELD(sparse.topK), 1, 1'048'576, false, {},
       "keys each query attends to"},
      {"sparse", "indexer_heads", MOEWB_FIELD(sparse.indexerHeads), 1, 1024, false, {},
       "lightning indexer heads"},
      {"sparse", "indexer_dim", MOEWB_FIELD(sparse.indexerDim), 1, 1024, false, {},
       "lightning indexer head width"},
      {"sparse", "indexer_loss_coef", MOEWB_FIELD(sparse.indexerLossCoef), 0, 1e3, false, {},
       "weight of the indexer KL loss"},
      {"sparse", "warmup_steps", MOEWB_FIELD(sparse.warmupSteps), 0, kNoMax, false, {},
       "dense warm-up steps before sparse key selection"},
      {"loss", "kind", MOEWB_FIELD(loss.kind), 0, 0, false, {"dense", "chunk", "cce"},
       "LM loss: dense logits, token chunks, or cut cross-entropy"},
      {"loss", "chunk_tokens", MOEWB_FIELD(loss.chunkTokens), 1, 1'048'576, false, {},
       "chunk loss: tokens per chunk"},
      {"loss", "cce_vocab_block", MOEWB_FIELD(loss.cceVocabBlock), 1, 1'048'576, false, {},
       "CCE: vocabulary entries per block"},
      {"loss", "cce_filter_eps", MOEWB_FIELD(loss.cceFilterEps), 0, 1, false, {},
       "CCE gradient filtering threshold (0 = exact)"},
      {"loss", "cce_filter_weight_grad", MOEWB_FIELD(loss.cceFilterWeightGrad), 0, 0, false, {},
       "CCE: the filter also skips its tiles in the LM head's weight gradient"},
      {"fusion", "permute_into_experts", MOEWB_FIELD(fusion.permuteIntoExperts), 0, 0, false, {},
       "experts gather token rows themselves (no permuted copy)"},
      {"fusion", "combine_into_experts", MOEWB_FIELD(fusion.combineIntoExperts), 0, 0, false, {},
       "experts scatter weighted rows into the output"},
      {"lora", "enabled", MOEWB_FIELD(lora.enabled), 0, 0, false, {},
       "LoRA fine-tuning: base weights frozen, only low-rank adapters train"},
      {"lora", "rank", MOEWB_FIELD(lora.rank), 0, 65'536, false, {},
       "adapter rank r (at least 1 when lora.enabled)"},
      {"lora", "alpha", MOEWB_FIELD(lora.alpha), 0, 1e6, false, {},
       "adapter scale numerator: W' = W + (alpha / rank) B A"},
      {"lora", "targets", MOEWB_FIELD(lora.targets), 0, 0, false, {"experts", "attention", "all"},
       "adapted weights: expert (and shared expert) projections, mixer projections, or both"},
      {"parallel", "world_size", MOEWB_FIELD(parallel.worldSize), 1, 1024, false, {},
       "ranks sharing each step's global batch: threads or virtual GPU ranks of this process "
       "(--ranks sets it), or one process per GPU under a launcher (WORLD_SIZE sets it)"},
      {"parallel", "ep", MOEWB_FIELD(parallel.ep), 1, 1024, false, {},
       "expert-parallel degree (must divide world_size and moe.num_experts)"},
      {"parallel", "fsdp", MOEWB_FIELD(parallel.fsdp), 0, 1024, false, {},
       "dense parameter shard degree (0 = world_size / replicate, all ranks when both are 0)"},
      {"parallel", "replicate", MOEWB_FIELD(parallel.replicate), 0, 1024, false, {},
       "replicas of each dense shard (0 = world_size / fsdp; fsdp * replicate = world_size)"},
      {"parallel", "timeout_ms", MOEWB_FIELD(parallel.timeoutMs), 1, 3'600'000, false, {},
       "ms a collective waits for a missing rank before the run fails naming it"},
      {"parallel", "a2a_chunks", MOEWB_FIELD(parallel.a2aChunks), 1, 4096, false, {},
       "GPU ranks: cut each rank's local experts into N chunks, each with its own EP all-to-all "
       "round trip on a second stream, so one chunk's all-to-all overlaps another's experts "
       "(1 = no overlap; at most moe.num_experts / parallel.ep; the CPU ranks ignore it)"},
      {"kernels", "expert_glu", MOEWB_FIELD(kernels.expertGlu), 0, 0, false,
       {"auto", "split", "pingpong", "fused"},
       "CUDA grouped expert GEMMs, gate+up and dh: split (the GLU as elementwise passes), "
       "pingpong or fused (the GLU in the GEMM epilogue); auto = the build's default (split); "
       "docs/GPU.md"},
      {"kernels", "expert_wgrad_walk", MOEWB_FIELD(kernels.expertWgradWalk), 0, 0, false,
       {"auto", "skew", "static", "dynamic"},
       "CUDA expert weight gradients: how persistent CTAs take tiles (same bits every way); "
       "auto = skew (dynamic when the routing is skewed)"},
      {"swap", "mode", MOEWB_FIELD(swap.mode), 0, 0, false, {"off", "manual", "auto"},
       "keep chosen saved activations in pinned host memory between forward and backward: off, "
       "manual (every tensor of swap.ops >= swap.min_bytes) or auto (the policy picks to reach "
       "swap.hbm_target_gb); docs/SWAP.md"},
      {"swap", "ops", MOEWB_FIELD(swap.ops), 0, 0, false, {},
       "comma list of swappable activations (\"\" = all): attn_norm, mixer_input, moe_norm, "
       "moe_input, expert_fc1, moe_act, expert_fc2"},
      {"swap", "recompute_ops", MOEWB_FIELD(swap.recomputeOps), 0, 0, false, {},
       "comma list of activations that may be dropped after the forward and recomputed in the "
       "backward instead (\"\" = none; CUDA backend): moe_act, expert_fc2 (both come from one "
       "re-run of the experts' gate and up GEMM); manual: recomputed, auto: the policy chooses "
       "keep, swap or recompute per tensor"},
      {"swap", "min_bytes", MOEWB_FIELD(swap.minBytes), 0, kNoMax, false, {},
       "tensors smaller than this many bytes are always kept"},
      {"swap", "hbm_target_gb", MOEWB_FIELD(swap.hbmTargetGb), 0, 1e6, false, {},
       "auto: device-memory peak to reach, GB (0 = the device's size; none on the CPU)"},
      {"swap", "pinned_budget_gb", MOEWB_FIELD(swap.pinnedBudgetGb), 0, 1e6, false, {},
       "pinned host pool, GB (at most the machine's memory)"},
      {"swap", "prefetch_layers", MOEWB_FIELD(swap.prefetchLayers), 0, 1024, false, {},
       "reloads are issued this many layers before their consumer in backward"},
      {"swap", "free_lag_layers", MOEWB_FIELD(swap.freeLagLayers), 0, 64, false, {},
       "compute waits for layer l's offloads, and their memory is freed, at the end of layer "
       "l + this's forward"},
      {"swap", "d2h_gbps", MOEWB_FIELD(swap.d2hGbps), 0, 1e5, true, {},
       "copy bandwidth model: device to host alone, GB/s"},
      {"swap", "h2d_gbps", MOEWB_FIELD(swap.h2dGbps), 0, 1e5, true, {},
       "copy bandwidth model: host to device alone, GB/s"},
      {"swap", "bidir_gbps", MOEWB_FIELD(swap.bidirGbps), 0, 1e5, true, {},
       "copy bandwidth model: both directions at once, total GB/s"},
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
    case 5: return "boolean";
    default: return "string";
  }
}

ConfigKeyInfo KeySpec::info() const {
  ConfigKeyInfo info;
  info.key = key();
  info.type = typeName();
  info.defaultValue = fieldToToml(*this, RunConfig{});
  info.description = description;
  const std::string type = info.type;
  if (type == "integer" || type == "float") {
    info.integer = type == "integer";
    info.min = minValue;
    info.minExclusive = minExclusive;
    if (!std::isinf(maxValue)) info.max = maxValue;
  } else if (type == "string") {
    info.choices = choices;
  }
  info.accepted = detail::acceptedText(info);
  return info;
}

std::string KeySpec::acceptedText() const { return info().accepted; }

std::string acceptedText(const ConfigKeyInfo& info) {
  if (info.type == "boolean") return "true | false";
  if (info.type == "string") {
    if (info.choices.empty()) return "any string";
    std::string out;
    for (const auto& c : info.choices) out += (out.empty() ? "\"" : " | \"") + c + "\"";
    return out;
  }
  const std::string lo = info.min ? formatNumber(*info.min) : "";
  const std::string hi = info.max ? formatNumber(*info.max) : "";
  if (info.minExclusive) return "> " + lo + (hi.empty() ? "" : " and <= " + hi);
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
        } else if constexpr (std::is_same_v<T, bool>) {
          return value ? "true" : "false";
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

namespace moewb::engine {

bool ConfigKeyInfo::acceptsNumber(double value) const {
  if (!min || !std::isfinite(value)) return false;
  if (minExclusive ? !(value > *min) : !(value >= *min)) return false;
  if (max && value > *max) return false;
  return !integer || value == std::floor(value);
}

bool ConfigKeyInfo::acceptsString(const std::string& value) const {
  if (type != "string") return false;
  if (choices.empty()) return true;
  for (const auto& choice : choices) {
    if (choice == value) return true;
  }
  return false;
}

}  // namespace moewb::engine
