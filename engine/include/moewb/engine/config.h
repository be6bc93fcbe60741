// RunConfig: everything a training run is made of, as read from TOML (samples/configs/*.toml).
//
// Operations: parse a TOML file or string into a RunConfig, apply `key=value` overrides (the CLI's
// --set and, later, live patches), validate the whole config in one function, and print it back as
// TOML (what the trace stores in `run.config`). Every key has a default, so an empty file is a valid
// config (tiny sizes, the hybrid default mixer pattern). Unknown keys, wrong types and invalid combinations are rejected with a
// message naming the key, the value and what is accepted. Pure value type; no threads, no I/O except
// loadConfigFile.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "moewb/base/status.h"

namespace moewb::engine {

struct RunSection {
  std::string name = "run";       // shown in the workbench and stored in the trace
  uint64_t seed = 1234;           // seeds weights and data; same seed + config => same losses
  int64_t steps = 200;            // optimizer steps for `moewb run` unless --steps overrides
  std::string backend = "cpu";    // "cpu" (reference), "cuda" (GPU, bf16 mixed precision) or "auto"
  int32_t threads = 0;            // CPU worker threads; 0 = all hardware threads

  bool operator==(const RunSection&) const = default;
};

struct ModelSection {
  int32_t vocabSize = 256;        // tokens; embedding and LM head rows
  int32_t dModel = 64;            // model width D
  int32_t numLayers = 2;          // decoder layers L
  int32_t numHeads = 4;           // attention heads; dModel % numHeads == 0
  int32_t seqLen = 64;            // tokens per sequence T
  double normEps = 1e-5;          // RMSNorm epsilon
  double initStd = 0.02;          // std of the normal weight init
  std::string mixerPattern = "KKKS";  // token mixer per layer, cycled: A = softmax attention,
                                  // K = KDA linear attention, S = gated sparse attention
  std::string residual = "plain"; // "plain" pre-norm residuals or "attnres" block attention residuals
  int32_t attnresBlockSize = 2;   // AttnRes block size in sublayers (2 = one block per layer)

  bool operator==(const ModelSection&) const = default;
};

struct MoeSection {
  int32_t numExperts = 8;         // routed experts E per layer
  int32_t topK = 2;               // experts per token, 1 <= topK <= numExperts
  int32_t dFf = 128;              // expert SwiGLU hidden width
  double auxLossCoef = 0.01;      // switch load-balancing loss weight alpha (0 disables)
  std::string router = "softmax"; // "softmax" (top-k then softmax) or "sigmoid" (+ normalise)
  double routeScale = 1.0;        // sigmoid router: weights scaled by this after normalising
  int32_t numGroups = 1;          // group-limited routing: expert groups (1 = off)
  int32_t topkGroups = 1;         // groups kept per token
  double seqAuxLossCoef = 0.0;    // sequence-level aux loss weight
  double zLossCoef = 0.0;         // router z-loss weight
  double biasUpdateRate = 0.0;    // aux-loss-free balancing bias step gamma (0 = off)
  double capacityFactor = 0.0;    // expert capacity factor; 0 = dropless
  std::string dropPolicy = "probs";  // with capacity: "probs" or "position"
  int32_t numSharedExperts = 0;   // always-active shared experts
  int32_t sharedDFf = 0;          // shared expert hidden width; 0 = d_ff
  int32_t latentDim = 0;          // latent MoE width (experts work in it); 0 = off
  std::string activation = "swiglu";  // "swiglu" or "situ"
  double situBeta1 = 4.0;         // SiTU gate clip
  double situBeta2 = 25.0;        // SiTU linear-branch clip

  bool operator==(const MoeSection&) const = default;
};

struct KdaSection {
  int32_t numHeads = 0;           // KDA heads; 0 = model.num_heads
  int32_t headDim = 0;            // key/value head width; 0 = d_model / heads
  int32_t chunkSize = 64;         // chunk length of the WY/UT form
  std::string gate = "lower_bound";  // forget gate form: "default" or "lower_bound"
  double lowerBound = -5.0;       // lower bound of the log forget gate
  int32_t gateRank = 0;           // rank of the gate/decay bottlenecks; 0 = head_dim
  // CUDA backend: the forward keeps its chunk intermediates (WY workspace, chunk-entry states,
  // Vn) for the backward instead of the backward recomputing them (same bits, more activation
  // memory). The CPU backend always recomputes (accepted, no effect).
  bool keepIntermediates = false;

  bool operator==(const KdaSection&) const = default;
};

struct SparseSection {
  int32_t kvHeads = 1;            // key/value heads (1 = MQA); must divide model.num_heads
  int32_t headDim = 0;            // head width; 0 = d_model / num_heads
  int32_t topK = 16;              // keys each query attends to
  int32_t indexerHeads = 4;       // lightning indexer heads
  int32_t indexerDim = 16;        // lightning indexer head width
  double indexerLossCoef = 1.0;   // weight of the indexer's KL loss
  int32_t warmupSteps = 50;       // dense warm-up steps before sparse selection

  bool operator==(const SparseSection&) const = default;
};

struct LossSection {
  std::string kind = "dense";     // "dense", "chunk" (token chunks) or "cce" (vocabulary blocks)
  int32_t chunkTokens = 256;      // chunk loss: tokens per chunk
  int32_t cceVocabBlock = 256;    // CCE: vocabulary entries per block
  double cceFilterEps = 0.0;      // CCE gradient filtering threshold; 0 = exact
  bool cceFilterWeightGrad = false;  // CCE: the filter also drops tiles from the head's gradient

  bool operator==(const LossSection&) const = default;
};

struct FusionSection {
  bool permuteIntoExperts = false;  // experts read token rows through the dispatch index
  bool combineIntoExperts = false;  // experts scatter weighted rows straight into the output

  bool operator==(const FusionSection&) const = default;
};

struct DataSection {
  std::string kind = "synthetic"; // only "synthetic" for now
  int32_t batchSize = 8;          // sequences per step B
  int32_t microBatchSize = 0;     // sequences per forward and backward on each rank; 0 = the
                                  //   rank's whole share of the step (see RunConfig::microBatches)
  double skew = 1.0;              // Zipf exponent of topic frequencies; 0 = uniform, larger = hotter experts
  int32_t numTopics = 16;         // hidden topics; each has its own token transition table
  double noise = 0.1;             // probability that a token is replaced by a uniform random one
  int32_t imageSize = 0;          // pixels per image side; 0 = text only
  int32_t patchSize = 4;          // pixels per patch side (divides image_size)
  int32_t imageChannels = 1;      // channels per pixel
  double imageNoise = 0.5;        // std of the noise added to a topic's prototype image

  // Image positions at the start of each sequence: (image_size / patch_size)^2, 0 = text only.
  int32_t imagePatches() const {
    return imageSize > 0 && patchSize > 0 ? (imageSize / patchSize) * (imageSize / patchSize) : 0;
  }
  // Features per patch: channels * patch_size^2.
  int32_t patchDim() const { return imageChannels * patchSize * patchSize; }

  bool operator==(const DataSection&) const = default;
};

struct OptimSection {
  double lr = 3e-3;               // peak AdamW learning rate
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weightDecay = 0.01;      // decoupled, on matrices only
  int32_t warmupSteps = 10;       // linear warm-up, then constant
  double gradClip = 1.0;          // global L2 norm clip; 0 disables

  bool operator==(const OptimSection&) const = default;
};

struct LoraSection {
  bool enabled = false;           // freeze every base weight and train low-rank adapters only
  int32_t rank = 8;               // adapter rank r
  double alpha = 32.0;            // adapter scale s = alpha / rank
  std::string targets = "all";    // adapted weights: "experts", "attention" or "all"

  bool operator==(const LoraSection&) const = default;
};

// Parallelism: in-process ranks (threads; run.backend = "cpu" or "auto"), virtual ranks sharing
// one GPU (run.backend = "cuda"), or one process per GPU over NCCL (moewb launch, or a launcher's
// RANK / WORLD_SIZE environment). The world of ranks is world_size = fsdp * replicate;
// experts are sharded over `ep` consecutive ranks, dense parameters over `fsdp` consecutive ranks
// and replicated `replicate` times (HSDP), expert parameters over the expert-data-parallel group
// (the world_size / ep ranks that hold the same experts). Every rank reads data.batch_size /
// world_size sequences of the global batch.
struct ParallelSection {
  int32_t worldSize = 1;          // ranks; `moewb run --ranks N` sets it
  int32_t ep = 1;                 // expert-parallel degree (divides world_size and num_experts)
  int32_t fsdp = 0;               // dense parameter shard degree; 0 = world_size / replicate
  int32_t replicate = 0;          // replicas of each dense shard; 0 = world_size / fsdp
  int32_t timeoutMs = 10000;      // ms a collective waits for a missing rank before failing
  int32_t a2aChunks = 1;          // GPU ranks: EP all-to-all / expert compute overlap chunks

  // The degrees in effect: fsdp (0: world_size / replicate, or world_size when both are 0) and
  // replicate (0: world_size / that fsdp). validateConfig checks fsdp * replicate = world_size.
  int32_t fsdpDegree() const {
    return fsdp > 0 ? fsdp : replicate > 0 ? worldSize / replicate : worldSize;
  }
  int32_t replicateDegree() const {
    return replicate > 0 ? replicate : fsdpDegree() > 0 ? worldSize / fsdpDegree() : 0;
  }
  bool operator==(const ParallelSection&) const = default;
};

// Swap: saved activations of chosen (layer, op) kept in a pinned host tier between forward and
// backward (moewb/engine/swap.h, docs/SWAP.md). On the CUDA backend the copies are real (D2H on
// a side stream after the layer's forward, H2D prefetched ahead of its backward); on the CPU
// backend the same policy runs over a simulated tier whose copy times come from the bandwidth
// keys below, so the events and views exist without a GPU.
struct SwapSection {
  std::string mode = "off";       // "off", "manual" (every tensor of `ops` >= min_bytes) or
                                  // "auto" (the policy picks from `ops` to reach hbm_target_gb)
  std::string ops = "";           // comma list of swap ops (swapOpNames()); "" = all of them
  std::string recomputeOps = "";  // comma list of ops recomputed in backward instead of kept
                                  //   (swapRecomputeOpNames(): CUDA only); "" = none
  int64_t minBytes = 1 << 20;     // tensors smaller than this are always kept
  double hbmTargetGb = 0;         // auto: device-memory peak to reach, GB (1e9 B); 0 = device size
  double pinnedBudgetGb = 4;      // pinned host pool, GB, allocated once at the first swap
  int32_t prefetchLayers = 1;     // reloads are issued this many layers before their consumer
  int32_t freeLagLayers = 1;      // compute waits for layer l's offloads (and frees their memory)
                                  //   at the end of layer l + this's forward
  double d2hGbps = 55;            // copy bandwidth model, GB/s: device to host alone,
  double h2dGbps = 55;            //   host to device alone,
  double bidirGbps = 36;          //   and both directions at once (total)

  bool operator==(const SwapSection&) const = default;
};

// Kernel choices of the CUDA backend's grouped expert GEMMs (docs/GPU.md; the CPU backend has one
// kernel per op and ignores them). "auto" keeps the process's default (the MOEWB_GROUPED_*
// environment variables, else the built-in choice).
struct KernelsSection {
  std::string expertGlu = "auto";        // gate+up and dh: "split" (round 9: plain epilogues,
                                         //   the GLU as elementwise passes), "pingpong" (round
                                         //   7), "fused" (round 2: the GLU in the epilogue)
  std::string expertWgradWalk = "auto";  // weight-gradient tile walk: "skew", "static", "dynamic"

  bool operator==(const KernelsSection&) const = default;
};

struct RunConfig {
  RunSection run;
  ModelSection model;
  MoeSection moe;
  DataSection data;
  OptimSection optim;
  KdaSection kda;
  SparseSection sparse;
  LossSection loss;
  FusionSection fusion;
  LoraSection lora;
  ParallelSection parallel;
  SwapSection swap;
  KernelsSection kernels;

  int64_t tokensPerStep() const { return int64_t(data.batchSize) * model.seqLen; }
  // Sequences each rank trains per step: data.batch_size / parallel.world_size.
  int32_t rankBatchSize() const {
    return parallel.worldSize > 0 ? data.batchSize / parallel.worldSize : data.batchSize;
  }
  // Sequences of one forward and backward on one rank: data.micro_batch_size, or the rank's
  // whole batch when it is 0.
  int32_t microBatchSize() const {
    return data.microBatchSize > 0 ? data.microBatchSize : rankBatchSize();
  }
  // Forward and backward passes per optimizer step on each rank: rankBatchSize() /
  // microBatchSize() (1 without micro-batching; validateConfig checks that it divides).
  int32_t microBatches() const {
    return microBatchSize() > 0 ? std::max(1, rankBatchSize() / microBatchSize()) : 1;
  }
  bool operator==(const RunConfig&) const = default;
};

// One documented key of the config: its dotted name, type, the values it accepts (as typed bounds
// and as the text written from them), its default and a one-line description.
//
// The typed bounds are validateConfig's per-key range and choice checks: a value outside them is
// always refused, and a value inside them passes those checks. `accepted` is written from the bounds
// (never declared separately), so the two cannot disagree. What the bounds do not hold are the
// rules between keys, which stay in validateConfig because their bound is another key's value at
// the time of the check, not a constant of the key: top_k <= num_experts (and the reach of
// group-limited routing), num_heads divides d_model, num_groups divides num_experts, topk_groups
// <= num_groups, latent_dim <= d_model, sparse.kv_heads divides num_heads and kda heads divide
// d_model (only when the mixer pattern uses S / K), num_topics <= vocab_size, patch_size divides
// image_size and the image leaves text in seq_len, batch_size * seq_len <= 2^26, lora.rank >= 1
// only while lora.enabled, and [parallel]'s divisibility rules and exclusions (fusion.* = true
// refused while parallel.ep > 1, lora.enabled = true while world_size > 1), and
// data.micro_batch_size dividing batch_size / world_size (refused beside swap.mode other than
// "off" when it splits the step). The letters of model.mixer_pattern (A, K, S; non-empty) are
// checked there too: it has no list of choices.
struct ConfigKeyInfo {
  std::string key;           // "moe.top_k"
  std::string type;          // "integer", "float", "string" or "boolean"
  std::string accepted;      // written from the bounds: "1..4096", "> 0 and <= 10", "0.." (no
                             // upper bound), `"cpu" | "auto"`, "any string", "true | false"
  std::string defaultValue;  // as TOML text
  std::string description;
  bool integer = false;             // whole numbers only (type "integer")
  std::optional<double> min;        // numbers: the lowest accepted value, in the key's own unit;
                                    // nullopt for strings and booleans
  bool minExclusive = false;        // true: the value must be > *min (floats such as optim.lr)
  std::optional<double> max;        // numbers: the highest accepted value (inclusive); nullopt =
                                    // as large as the field holds: 2147483647 for 32-bit keys,
                                    // 9223372036854775807 (the largest TOML integer) for 64-bit
  std::vector<std::string> choices; // strings: the accepted values, exact and case-sensitive;
                                    // empty = no fixed list

  // True when `value` is finite, inside [min, max] (above min when minExclusive) and whole for an
  // integer key; always false for a string or boolean key. A 32-bit key without `max` must also
  // fit its field (the parser refuses a larger integer before validation).
  bool acceptsNumber(double value) const;
  // True when `value` is one of `choices`; for a string key without choices, always true (see
  // model.mixer_pattern above); always false for a number or boolean key.
  bool acceptsString(const std::string& value) const;
};

// Lists every accepted key in file order (docs/CONFIG.md's config reference is generated from
// this). Built once on first use; the reference stays valid for the life of the program and may
// be read from any thread.
const std::vector<ConfigKeyInfo>& configKeys();

// Parses TOML text (`sourceName` names it in messages, e.g. the file path). Unknown sections or
// keys, and values of the wrong type, give kInvalidArgument naming the key. Does not validate
// cross-key constraints: call validateConfig.
Result<RunConfig> parseConfigToml(const std::string& text, const std::string& sourceName);

// Reads and parses a file; kNotFound when it cannot be read.
Result<RunConfig> loadConfigFile(const std::string& path);

// Applies one override "section.key=value" (value in TOML syntax, bare strings accepted).
// Errors name the key and the accepted keys/types. Does not validate; call validateConfig after.
Status applyOverride(RunConfig& config, const std::string& assignment);

// The one validation function: ranges of every key and the constraints between keys
// (top_k <= num_experts, d_model % num_heads == 0, ...). Returns the first problem found.
Status validateConfig(const RunConfig& config);

// A RunConfig that passed validateConfig. validate() is the only way to make one, so what takes a
// ValidConfig (TrainingRun, Trainer, the rank steppers) trusts it and validates nothing again:
// a config is validated once on its way from the file to the ranks. Converts to the RunConfig.
class ValidConfig {
 public:
  // validateConfig(config): kInvalidArgument naming the first key that is out of range or
  // conflicts with another.
  static Result<ValidConfig> validate(RunConfig config);

  const RunConfig& get() const { return m_config; }
  operator const RunConfig&() const { return m_config; }  // NOLINT: a view, by design
  const RunConfig* operator->() const { return &m_config; }

 private:
  explicit ValidConfig(RunConfig config) : m_config(std::move(config)) {}
  RunConfig m_config;
};

// Serialises to TOML with every key present; parseConfigToml(toToml(c)) == c.
std::string toToml(const RunConfig& config);

}  // namespace moewb::engine
