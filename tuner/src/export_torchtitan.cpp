// torchtitan's legacy TOML job config (v0.2.x sections) from a config (see exports.h). Section and
// option names: torchtitan v0.2.2, torchtitan/config/job_config.py;
// tests/tuner/torchtitan_options.h keeps the table the tests check against.
#include <cstdio>
#include <string>
#include <vector>

#include "moewb/tuner/exports.h"

namespace moewb::tuner::detail {
namespace {

std::string num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  std::string s = buf;
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";  // a TOML float, not an integer
  return s;
}

std::string quoted(const std::string& s) {
  return "\"" + s + "\"";
}

// The keys the TOML above expresses, or that do not apply to `c` (kda.* without KDA layers).
std::vector<std::string> mappedKeys(const engine::RunConfig& c) {
  std::vector<std::string> mapped = {
      "optim.lr",        "optim.eps",           "optim.weight_decay", "optim.beta1",
      "optim.beta2",     "optim.warmup_steps",  "data.batch_size",    "data.micro_batch_size",
      "model.seq_len",   "optim.grad_clip",     "run.steps",          "run.backend",
      "run.name",        "run.seed",            "parallel.world_size", "parallel.fsdp",
      "parallel.replicate", "parallel.ep"};
  if (c.loss.kind != "chunk") mapped.push_back("loss.chunk_tokens");  // unused by this loss
  if (c.loss.kind != "cce") {
    mapped.push_back("loss.cce_vocab_block");
    mapped.push_back("loss.cce_filter_eps");
    mapped.push_back("loss.cce_filter_weight_grad");
  }
  if (c.lora.enabled == false) {
    for (const char* k : {"lora.enabled", "lora.rank", "lora.alpha", "lora.targets"})
      mapped.push_back(k);
  }
  if (c.model.mixerPattern.find('K') == std::string::npos) {
    for (const char* k : {"kda.num_heads", "kda.head_dim", "kda.chunk_size", "kda.gate",
                          "kda.lower_bound", "kda.gate_rank"}) {
      mapped.push_back(k);
    }
  }
  if (c.model.mixerPattern.find('S') == std::string::npos) {
    for (const char* k :
         {"sparse.kv_heads", "sparse.head_dim", "sparse.top_k", "sparse.indexer_heads",
          "sparse.indexer_dim", "sparse.indexer_loss_coef", "sparse.warmup_steps"}) {
      mapped.push_back(k);
    }
  }
  return mapped;
}

// Why a key is not expressed, and the nearest option where there is one.
std::vector<std::pair<std::string, std::string>> notes() {
  const std::string flavor =
      "the model shape lives in torchtitan's model flavor (Python), not the TOML";
  std::vector<std::pair<std::string, std::string>> notes = {
      {"fusion.permute_into_experts", "torchtitan has no permute-fusion option"},
      {"fusion.combine_into_experts", "torchtitan has no permute-fusion option"},
      {"moe.capacity_factor", "torchtitan's MoE is dropless; no capacity option in the TOML"},
      {"moe.drop_policy", "torchtitan's MoE is dropless"},
      {"loss.kind", "torchtitan's loss is set in the model spec; nearest: [compile] components"},
      {"parallel.a2a_chunks", "nearest: [parallelism] expert_parallel_comm_backend = \"deepep\""},
      {"run.threads", "a CPU engine setting"},
      {"kernels.expert_glu", "this engine's grouped-GEMM kernel"},
      {"kernels.expert_wgrad_walk", "this engine's grouped-GEMM kernel"},
      {"data.kind", "set [training] dataset"}};
  for (const auto& info : engine::configKeys()) {
    const bool shape = info.key.rfind("model.", 0) == 0 || info.key.rfind("moe.", 0) == 0;
    bool noted = false;
    for (const auto& n : notes) noted = noted || n.first == info.key;
    if (shape && !noted) notes.emplace_back(info.key, flavor);
  }
  return notes;
}

}  // namespace

std::string torchtitanToml(const engine::RunConfig& c, std::vector<std::string>& unexpressed) {
  const auto& p = c.parallel;
  std::string o;
  o += "[job]\ndescription = " + quoted("moewb tune export of run " + c.run.name) + "\n\n";
  o += "[optimizer]\nname = \"AdamW\"\n";
  o += "lr = " + num(c.optim.lr) + "\neps = " + num(c.optim.eps) + "\n";
  o += "weight_decay = " + num(c.optim.weightDecay) + "\n";
  o += "beta1 = " + num(c.optim.beta1) + "\nbeta2 = " + num(c.optim.beta2) + "\n\n";
  o += "[lr_scheduler]\nwarmup_steps = " + std::to_string(c.optim.warmupSteps) + "\n";
  o += "decay_ratio = 0.0  # constant after warm-up, as the engine's schedule\n\n";
  // torchtitan accumulates global / (local x data-parallel degree) micro-batches a step, so
  // local_batch_size is the sequences of one forward on a rank.
  o += "[training]\nlocal_batch_size = " + std::to_string(c.microBatchSize()) + "\n";
  o += "global_batch_size = " + std::to_string(c.data.batchSize) + "\n";
  o += "seq_len = " + std::to_string(c.model.seqLen) + "\n";
  o += "max_norm = " + num(c.optim.gradClip) + "\n";
  o += "steps = " + std::to_string(c.run.steps) + "\n";
  o += std::string("mixed_precision_param = ") +
       (c.run.backend == "cuda" ? "\"bfloat16\"" : "\"float32\"") + "\n\n";
  o += "[parallelism]\ndata_parallel_shard_degree = " + std::to_string(p.fsdpDegree()) + "\n";
  o += "data_parallel_replicate_degree = " + std::to_string(p.replicateDegree()) + "\n";
  o += "tensor_parallel_degree = 1\npipeline_parallel_degree = 1\ncontext_parallel_degree = 1\n";
  o += "expert_parallel_degree = " + std::to_string(p.ep) + "\n";
  o += "expert_tensor_parallel_degree = 1\n\n";
  o += "[activation_checkpoint]\nmode = \"none\"  # the engine keeps every activation\n\n";
  o += "[debug]\nseed = " + std::to_string(c.run.seed) + "\n";
  unexpressed = unexpressedKeys(c, mappedKeys(c), notes());
  return o;
}

}  // namespace moewb::tuner::detail
