// Megatron-Core command-line flags from a config (see exports.h). Option names and semantics:
// Megatron-LM main (megatron/training/arguments.py,
// megatron/core/transformer/transformer_config.py, megatron/core/model_parallel_config.py);
// tests/tuner/megatron_options.h keeps the table the tests check against.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "moewb/engine/swap.h"
#include "moewb/tuner/exports.h"

namespace moewb::tuner::detail {
namespace {

std::string num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

class FlagWriter {
 public:
  void flag(const std::string& name, const std::string& value = "") {
    m_text += "--" + name + (value.empty() ? "" : " " + value) + "\n";
  }
  void mapped(std::initializer_list<const char*> keys) {
    for (const char* k : keys) m_mapped.push_back(k);
  }
  void note(const std::string& key, const std::string& text) { m_notes.emplace_back(key, text); }
  const std::string& text() const { return m_text; }
  const std::vector<std::string>& mappedKeys() const { return m_mapped; }
  const std::vector<std::pair<std::string, std::string>>& notes() const { return m_notes; }

 private:
  std::string m_text;
  std::vector<std::string> m_mapped;
  std::vector<std::pair<std::string, std::string>> m_notes;
};

void modelFlags(const engine::RunConfig& c, FlagWriter& w) {
  w.flag("num-layers", std::to_string(c.model.numLayers));
  w.flag("hidden-size", std::to_string(c.model.dModel));
  w.flag("num-attention-heads", std::to_string(c.model.numHeads));
  w.flag("seq-length", std::to_string(c.model.seqLen));
  w.flag("max-position-embeddings", std::to_string(c.model.seqLen));
  w.flag("vocab-size", std::to_string(c.model.vocabSize));
  w.flag("normalization", "RMSNorm");
  w.flag("norm-epsilon", num(c.model.normEps));
  w.flag("init-method-std", num(c.model.initStd));
  w.flag("disable-bias-linear");
  w.mapped({"model.num_layers", "model.d_model", "model.num_heads", "model.seq_len",
            "model.vocab_size", "model.norm_eps", "model.init_std"});
  if (c.model.mixerPattern.find_first_not_of('A') == std::string::npos)
    w.mapped({"model.mixer_pattern"});
  w.note("model.mixer_pattern",
         "Megatron-Core trains softmax attention here; KDA (K) and gated "
         "sparse attention (S) layers have no option");
  if (c.model.residual == "plain") w.mapped({"model.residual", "model.attnres_block_size"});
  if (c.model.mixerPattern.find('K') == std::string::npos) {
    w.mapped({"kda.num_heads", "kda.head_dim", "kda.chunk_size", "kda.gate", "kda.lower_bound",
              "kda.gate_rank"});
  }
  if (c.model.mixerPattern.find('S') == std::string::npos) {
    w.mapped({"sparse.kv_heads", "sparse.head_dim", "sparse.top_k", "sparse.indexer_heads",
              "sparse.indexer_dim", "sparse.indexer_loss_coef", "sparse.warmup_steps"});
  }
}

void moeFlags(const engine::RunConfig& c, FlagWriter& w) {
  const auto& m = c.moe;
  w.flag("num-experts", std::to_string(m.numExperts));
  w.flag("moe-router-topk", std::to_string(m.topK));
  w.flag("moe-ffn-hidden-size", std::to_string(m.dFf));
  w.flag("ffn-hidden-size", std::to_string(m.dFf));
  w.flag("moe-router-score-function", m.router);
  w.mapped({"moe.num_experts", "moe.top_k", "moe.d_ff", "moe.router"});
  std::string types, coeffs;
  if (m.auxLossCoef > 0) types += " aux_loss", coeffs += " " + num(m.auxLossCoef);
  if (m.seqAuxLossCoef > 0) types += " seq_aux_loss", coeffs += " " + num(m.seqAuxLossCoef);
  w.flag("moe-router-load-balancing-type", types.empty() ? "none" : types.substr(1));
  if (!coeffs.empty()) w.flag("moe-aux-loss-coeff", coeffs.substr(1));
  w.mapped({"moe.aux_loss_coef", "moe.seq_aux_loss_coef"});
  if (m.router == "sigmoid") w.flag("moe-router-topk-scaling-factor", num(m.routeScale));
  w.mapped({"moe.route_scale"});
  if (m.numGroups > 1) {
    w.flag("moe-router-num-groups", std::to_string(m.numGroups));
    w.flag("moe-router-group-topk", std::to_string(m.topkGroups));
  }
  w.mapped({"moe.num_groups", "moe.topk_groups"});
  if (m.zLossCoef > 0) w.flag("moe-z-loss-coeff", num(m.zLossCoef));
  if (m.biasUpdateRate > 0) {
    w.flag("moe-router-enable-expert-bias");
    w.flag("moe-router-bias-update-rate", num(m.biasUpdateRate));
  }
  w.mapped({"moe.z_loss_coef", "moe.bias_update_rate"});
  if (m.capacityFactor > 0) {
    w.flag("moe-expert-capacity-factor", num(m.capacityFactor));
    w.flag("moe-token-drop-policy", m.dropPolicy);
  }
  w.mapped({"moe.capacity_factor", "moe.drop_policy"});
  if (m.numSharedExperts > 0) {
    const int64_t width = int64_t(m.numSharedExperts) * (m.sharedDFf > 0 ? m.sharedDFf : m.dFf);
    w.flag("moe-shared-expert-intermediate-size", std::to_string(width));
  }
  w.mapped({"moe.num_shared_experts", "moe.shared_d_ff"});
  if (m.latentDim == 0) w.mapped({"moe.latent_dim"});
  if (m.activation == "swiglu") {
    w.flag("swiglu");
    w.mapped({"moe.activation", "moe.situ_beta1", "moe.situ_beta2"});
  }
  w.flag("moe-grouped-gemm");
  w.flag("moe-token-dispatcher-type", "alltoall");
  if (c.fusion.permuteIntoExperts || c.fusion.combineIntoExperts) w.flag("moe-permute-fusion");
  w.mapped({"fusion.permute_into_experts", "fusion.combine_into_experts"});
}

void trainingFlags(const engine::RunConfig& c, FlagWriter& w) {
  const auto& p = c.parallel;
  // Megatron-Core accumulates global / (micro x data-parallel ranks) micro-batches a step: our
  // global batch of all ranks and the sequences of one forward on a rank.
  w.flag("global-batch-size", std::to_string(c.data.batchSize));
  w.flag("micro-batch-size", std::to_string(c.microBatchSize()));
  w.flag("train-iters", std::to_string(c.run.steps));
  w.flag("seed", std::to_string(c.run.seed));
  if (c.data.kind == "synthetic") w.flag("mock-data");
  w.flag("lr", num(c.optim.lr));
  w.flag("lr-warmup-iters", std::to_string(c.optim.warmupSteps));
  w.flag("lr-decay-style", "constant");
  w.flag("weight-decay", num(c.optim.weightDecay));
  w.flag("adam-beta1", num(c.optim.beta1));
  w.flag("adam-beta2", num(c.optim.beta2));
  w.flag("adam-eps", num(c.optim.eps));
  w.flag("clip-grad", num(c.optim.gradClip));
  if (c.run.backend == "cuda") w.flag("bf16");
  w.mapped({"data.batch_size", "data.micro_batch_size", "data.kind", "run.steps", "run.seed",
            "run.name", "optim.lr", "optim.warmup_steps", "optim.weight_decay", "optim.beta1",
            "optim.beta2", "optim.eps", "optim.grad_clip", "run.backend"});
  w.flag("tensor-model-parallel-size", "1");
  w.flag("expert-tensor-parallel-size", "1");
  w.flag("expert-model-parallel-size", std::to_string(p.ep));
  w.mapped({"parallel.world_size", "parallel.ep"});
  if (p.fsdpDegree() > 1 && p.replicateDegree() == 1) {
    w.flag("use-megatron-fsdp");
    w.flag("data-parallel-sharding-strategy", "optim_grads_params");
  }
  if (p.fsdpDegree() == 1 || p.replicateDegree() == 1)
    w.mapped({"parallel.fsdp", "parallel.replicate"});
  w.note("parallel.fsdp", "FSDP inside replicas (HSDP) has no flag of its own here");
  w.note("parallel.replicate", "FSDP inside replicas (HSDP) has no flag of its own here");
  if (p.a2aChunks == 1) w.mapped({"parallel.a2a_chunks"});
  w.note("parallel.a2a_chunks",
         "nearest: --overlap-moe-expert-parallel-comm --delay-wgrad-compute");
  if (c.loss.kind == "dense") w.mapped({"loss.kind"});
  if (c.loss.kind != "chunk") w.mapped({"loss.chunk_tokens"});
  if (c.loss.kind != "cce") {
    w.mapped({"loss.cce_vocab_block", "loss.cce_filter_eps", "loss.cce_filter_weight_grad"});
  }
  w.note("loss.kind", "nearest: --cross-entropy-loss-fusion (a fused kernel; logits still exist)");
  if (!c.lora.enabled) w.mapped({"lora.enabled", "lora.rank", "lora.alpha", "lora.targets"});
  w.note("run.threads", "a CPU engine setting");
  w.note("kernels.expert_glu",
         "this engine's grouped-GEMM kernel; Megatron-Core: --moe-grouped-gemm");
  w.note("kernels.expert_wgrad_walk", "this engine's grouped-GEMM kernel");
}

// Our swap op (named after its consumer) -> Megatron-Core's fine-grained offload module (named
// after the module whose input it offloads), or "" when Megatron has none.
const char* offloadModuleOf(const std::string& op) {
  if (op == "attn_norm") return "attn_norm";
  if (op == "mixer_input") return "qkv_linear";
  if (op == "moe_norm") return "mlp_norm";
  if (op == "expert_fc1") return "expert_fc1";
  if (op == "moe_act") return "moe_act";
  return "";  // moe_input (router + experts' input), expert_fc2 (fc2's input)
}

// [swap]: manual swap -> --fine-grained-activation-offloading --offload-modules; recompute of the
// activated rows (expert_fc2) -> --recompute-modules moe_act (Megatron recomputes the activation
// function's output). Auto mode (a policy toward an HBM target) and our moe_act recompute (a
// re-run of the gate / up GEMM) have no equivalent: listed with the nearest.
void swapFlags(const engine::RunConfig& c, FlagWriter& w) {
  const engine::SwapSettings s = engine::swapSettingsFrom(c.swap, 0);
  const auto listed = [](const std::vector<std::string>& ops, const char* op) {
    return std::find(ops.begin(), ops.end(), op) != ops.end();
  };
  if (s.mode == engine::SwapMode::kOff) {
    w.mapped({"swap.mode", "swap.ops", "swap.recompute_ops", "swap.min_bytes",
              "swap.hbm_target_gb", "swap.pinned_budget_gb", "swap.prefetch_layers",
              "swap.free_lag_layers", "swap.d2h_gbps", "swap.h2d_gbps", "swap.bidir_gbps"});
    return;
  }
  const bool fc2 = listed(s.recomputeOps, "expert_fc2");
  if (fc2) {
    w.flag("recompute-granularity", "selective");
    w.flag("recompute-modules", "moe_act");
  }
  if (listed(s.recomputeOps, "moe_act")) {
    w.note("swap.recompute_ops", "moe_act: nearest --recompute-modules moe (recomputes the whole "
                                 "MoE block, not only the gate / up GEMM)");
  } else {
    w.mapped({"swap.recompute_ops"});
  }
  if (s.mode == engine::SwapMode::kAuto) {
    w.note("swap.mode", "auto plans toward swap.hbm_target_gb; Megatron offloads the modules "
                        "listed, nearest --offload-modules with --activation-offload-fraction");
    return;
  }
  std::string modules;
  bool allMapped = true;
  for (const std::string& op : s.ops) {
    const char* module = offloadModuleOf(op);
    if (listed(s.recomputeOps, op.c_str())) continue;  // recomputed, not swapped
    if (*module == '\0') {
      w.note("swap.ops", op + " has no Megatron offload module");
      allMapped = false;
      continue;
    }
    modules += (modules.empty() ? "" : " ") + std::string(module);
  }
  if (allMapped) w.mapped({"swap.ops"});
  if (!modules.empty()) {
    w.flag("fine-grained-activation-offloading");
    w.flag("offload-modules", modules);
  }
  w.mapped({"swap.mode"});
}

}  // namespace

std::string megatronFlags(const engine::RunConfig& config, std::vector<std::string>& unexpressed) {
  FlagWriter w;
  modelFlags(config, w);
  moeFlags(config, w);
  trainingFlags(config, w);
  swapFlags(config, w);
  unexpressed = unexpressedKeys(config, w.mappedKeys(), w.notes());
  std::string out = "# launch with " + std::to_string(config.parallel.worldSize) +
                    " GPU(s) (parallel.world_size)\n";
  return out + w.text();
}

}  // namespace moewb::tuner::detail
