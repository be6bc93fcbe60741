// Megatron-Core command-line options the tuner's Megatron export may write, with their argparse
// types and choices, as the target itself declares them.
//
// Source: NVIDIA/Megatron-LM main at d98e8a64ddf34856e74b24714e3bedb2f5a39553 (2026-08-22):
// megatron/training/arguments.py (explicit add_argument calls) and the config dataclasses it turns
// into flags through ArgumentGroupFactory (megatron/training/argument_utils.py: field name with
// '_' -> '-', or the field's argparse_meta arg_names; bool False -> store_true):
// megatron/core/transformer/transformer_config.py, megatron/core/model_parallel_config.py,
// megatron/training/config/{training_config,common_config}.py.
#pragma once

#include <string>
#include <vector>

namespace moewb::tuner::testing {

struct MegatronOption {
  const char* name;                  // without the leading "--"
  const char* type;                  // "int", "float", "str", "flag" (store_true), "float+" /
                                     // "str+" (nargs='+')
  std::vector<std::string> choices;  // empty = any value of the type
};

inline const std::vector<MegatronOption>& megatronOptions() {
  static const std::vector<MegatronOption> options = {
      // network size (arguments.py, TransformerConfig)
      {"num-layers", "int", {}},
      {"hidden-size", "int", {}},
      {"ffn-hidden-size", "int", {}},
      {"num-attention-heads", "int", {}},
      {"seq-length", "int", {}},
      {"max-position-embeddings", "int", {}},
      {"vocab-size", "int", {}},
      {"normalization", "str", {"LayerNorm", "RMSNorm"}},
      {"norm-epsilon", "float", {}},  // TransformerConfig.layernorm_epsilon
      {"init-method-std", "float", {}},
      {"disable-bias-linear", "flag", {}},  // TransformerConfig.add_bias_linear
      {"swiglu", "flag", {}},
      // activation recompute and fine-grained activation offloading (TransformerConfig:
      // recompute_granularity, recompute_modules; fine_grained_activation_offloading,
      // offload_modules; docs/user-guide/features/fine_grained_activation_offloading.md)
      {"recompute-granularity", "str", {"full", "selective"}},
      {"recompute-modules", "str+",
       {"core_attn", "moe_act", "layernorm", "mla_up_proj", "mlp", "moe", "shared_experts"}},
      {"fine-grained-activation-offloading", "flag", {}},
      {"offload-modules", "str+",
       {"attn_norm", "qkv_linear", "core_attn", "attn_proj", "mlp_norm", "expert_fc1", "moe_act"}},
      // MoE (_add_moe_args, TransformerConfig)
      {"num-experts", "int", {}},
      {"moe-router-topk", "int", {}},
      {"moe-ffn-hidden-size", "int", {}},
      {"moe-router-load-balancing-type",
       "str+",
       {"aux_loss", "seq_aux_loss", "global_aux_loss", "sinkhorn", "quantile_balancing", "none"}},
      {"moe-aux-loss-coeff", "float+", {}},
      {"moe-router-score-function", "str", {"softmax", "sigmoid", "sqrtsoftplus"}},
      {"moe-router-topk-scaling-factor", "float", {}},
      {"moe-router-num-groups", "int", {}},
      {"moe-router-group-topk", "int", {}},
      {"moe-z-loss-coeff", "float", {}},
      {"moe-router-enable-expert-bias", "flag", {}},
      {"moe-router-bias-update-rate", "float", {}},
      {"moe-expert-capacity-factor", "float", {}},
      {"moe-token-drop-policy", "str", {"probs", "position"}},
      {"moe-shared-expert-intermediate-size", "int", {}},
      {"moe-grouped-gemm", "flag", {}},
      {"moe-permute-fusion", "flag", {}},
      {"moe-token-dispatcher-type", "str", {"allgather", "alltoall", "flex"}},
      // parallelism (ModelParallelConfig, arguments.py)
      {"tensor-model-parallel-size", "int", {}},
      {"expert-model-parallel-size", "int", {}},
      {"expert-tensor-parallel-size", "int", {}},
      {"use-megatron-fsdp", "flag", {}},  // DistributedInitConfig
      {"data-parallel-sharding-strategy",
       "str",
       {"no_shard", "optim", "optim_grads", "optim_grads_params"}},
      // training, schedule, optimizer, data (TrainingConfig, SchedulerConfig, RNGConfig, args)
      {"micro-batch-size", "int", {}},
      {"global-batch-size", "int", {}},
      {"train-iters", "int", {}},
      {"seed", "int", {}},
      {"lr", "float", {}},
      {"lr-warmup-iters", "int", {}},
      {"lr-decay-style", "str", {"constant", "linear", "cosine", "inverse-square-root", "WSD"}},
      {"weight-decay", "float", {}},
      {"adam-beta1", "float", {}},
      {"adam-beta2", "float", {}},
      {"adam-eps", "float", {}},
      {"clip-grad", "float", {}},
      {"mock-data", "flag", {}},
      {"bf16", "flag", {}},
  };
  return options;
}

}  // namespace moewb::tuner::testing
