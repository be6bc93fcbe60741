// torchtitan legacy TOML options (sections and keys of JobConfig) the tuner's torchtitan export
// may write, with their types and choices, as the target itself declares them.
//
// Source: pytorch/torchtitan tag v0.2.2 (the last release with TOML job configs),
// torchtitan/config/job_config.py: the dataclasses Job, Optimizer, LRScheduler, Training,
// Parallelism, ActivationCheckpoint, Debug and the field names JobConfig gives them.
#pragma once

#include <string>
#include <vector>

namespace moewb::tuner::testing {

struct TorchtitanOption {
  const char* key;                   // "section.option"
  const char* type;                  // "int", "float" (int accepted: float | int), "str", "bool"
  std::vector<std::string> choices;  // Literal[...] choices; empty = any
};

inline const std::vector<TorchtitanOption>& torchtitanOptions() {
  static const std::vector<TorchtitanOption> options = {
      {"job.description", "str", {}},
      {"optimizer.name", "str", {}},
      {"optimizer.lr", "float", {}},
      {"optimizer.eps", "float", {}},
      {"optimizer.weight_decay", "float", {}},
      {"optimizer.beta1", "float", {}},
      {"optimizer.beta2", "float", {}},
      {"lr_scheduler.warmup_steps", "int", {}},
      {"lr_scheduler.decay_ratio", "float", {}},
      {"training.local_batch_size", "int", {}},
      {"training.global_batch_size", "int", {}},
      {"training.seq_len", "int", {}},
      {"training.max_norm", "float", {}},
      {"training.steps", "int", {}},
      {"training.mixed_precision_param", "str", {"bfloat16", "float32"}},
      {"parallelism.data_parallel_replicate_degree", "int", {}},
      {"parallelism.data_parallel_shard_degree", "int", {}},
      {"parallelism.tensor_parallel_degree", "int", {}},
      {"parallelism.pipeline_parallel_degree", "int", {}},
      {"parallelism.context_parallel_degree", "int", {}},
      {"parallelism.expert_parallel_degree", "int", {}},
      {"parallelism.expert_tensor_parallel_degree", "int", {}},
      {"parallelism.expert_parallel_comm_backend", "str", {"standard", "deepep"}},
      {"activation_checkpoint.mode", "str", {"selective", "full", "memory_budget", "none"}},
      {"debug.seed", "int", {}},
  };
  return options;
}

}  // namespace moewb::tuner::testing
