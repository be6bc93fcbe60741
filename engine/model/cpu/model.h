// Model<T>: the decoder-only hybrid MoE transformer with an explicit forward (saving
// activations) and an explicit backward.
//
//   h = embed(tokens) (+ patch embedding at image positions, multimodal batches)
//   per layer l:  h = h + Mixer_l(RMSNorm(h));  h = h + MoE(RMSNorm(h))
//   logits = RMSNorm(h) Wlm^T (untied);  loss = mean CE over text targets + aux losses
// Mixer_l follows model.mixer_pattern (model/mixer.h: softmax attention, KDA or gated sparse
// attention). With model.residual = "attnres" the two residual adds and the input of the final
// norm become Block AttnRes mixes (ops/attnres/attnres_state.h). The MoE FFN is router ->
// permute -> experts -> combine (+ shared experts), with every variant of MoeOptions
// (model/moe_ffn.h). The loss head is dense, chunked or CCE (model/lm_loss.h).
// Init: matrices ~ N(0, init_std), each chunk of 2^20 elements of a parameter from its own Rng
// stream keyed by the seed, the parameter's name and the chunk (drawn in parallel; the same
// values whatever the order or thread count), residual-output
// projections scaled by 1/sqrt(2L), norm gains 1, AttnRes queries 0, op-specific rules for KDA
// and sparse attention (their headers). forward()/backward() emit one PhaseEvent per phase and
// layer through the recorder. Not thread-safe; one model per trainer, parallel inside.
// LoRA (lora.enabled): every base parameter is frozen (no moments) and each targeted weight W
// gets adapters "<name>.lora_a" (A ~ N(0, 1/in), from their own streams, so the base weights
// match the LoRA-off model of the same seed) and "<name>.lora_b" (B = 0), appended after the base
// parameters (model/lora.h). forward() materialises W' = W + s B A, which value() hands to the
// ops; backward() turns the dW' left in W's grad into dA, dB and zeroes W's grad.
// Parallel runs (engine/train/parallel, model_parallel.h): with dims.expertShards > 1 the routed
// experts' tensors hold this rank's E / expertShards experts (initialised to the same values as
// the matching slice of the one-rank model) and the experts stage runs the EP all-to-all round
// trip; installed hooks run before each unit's forward and after its backward (FSDP), and a
// world communicator makes the Switch loss use global statistics.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/batch.h"
#include "model/cpu/lm_loss.h"
#include "model/cpu/mixer.h"
#include "model/cpu/model_parallel.h"
#include "model/cpu/moe_ffn.h"
#include "model/cpu/parameter.h"
#include "model/cpu/parameter_layout.h"
#include "model/layers/attnres_state.h"
#include "model/moe/expert_bias.h"
#include "model/parallel/ep_dispatch.h"
#include "runtime/thread_pool.h"
#include "runtime/tensor/tensor.h"
#include "runtime/phase_recorder.h"

namespace moewb::engine {

struct ForwardResult {
  double loss = 0;     // mean cross-entropy over text targets (nats)
  double auxLoss = 0;  // MoE balancing losses + indexer KL losses, each weighted by its
                       // coefficient times the forward's LossWeights::aux
  std::vector<std::vector<int64_t>> expertCounts;   // [L][E] assignments selected, sum N k
  std::vector<std::vector<int64_t>> expertDropped;  // [L][E] assignments dropped by capacity
  std::vector<std::vector<double>> expertBias;      // [L][E] selection bias (0s when unused)
  // The first aux-loss term that is not finite, e.g. "layer 3 MoE balancing loss = inf" (empty
  // when all are): where a divergence shows first.
  std::string nonFiniteAuxTerm;
  double totalLoss() const { return loss + auxLoss; }
  // Records `value` of the term named `name` of `layer` if it is the first non-finite one.
  void noteAuxTerm(int32_t layer, const char* name, double value);
};

template <typename T>
class Model {
 public:
  // Allocates every parameter of modelParameterLayout(dims), in its order (zeros until
  // initialize(); frozen LoRA base weights without AdamW moments). `pool` must outlive the model.
  Model(const ModelDims& dims, ThreadPool& pool);

  // Draws all weights from `seed` (same seed => identical weights, whatever the thread count):
  // chunks of each parameter from streams keyed by the seed, the parameter's name and the
  // chunk, in parallel over the pool.
  void initialize(uint64_t seed);

  // The model's sizes and settings; while loss weights other than the defaults are set, the aux
  // coefficients are those times LossWeights::aux (what the forward and backward use).
  const ModelDims& dims() const { return m_dims; }
  std::vector<Parameter<T>>& parameters() { return m_params; }
  const std::vector<Parameter<T>>& parameters() const { return m_params; }
  int64_t parameterCount() const;
  void zeroGrads();

  // Takes the settings that change only the computation, not the shape of any parameter or
  // state, from `dims` (see Trainer::liveKeys): MoE top-k, balancing coefficients, route scale,
  // capacity and drop policy, fusion flags, the loss head, sparse top-k and indexer loss weight,
  // KDA chunk size. Used for live patches between steps.
  void applyLiveDims(const ModelDims& dims);

  // The optimizer step about to run (selects the sparse layers' stage).
  void setStep(int64_t step) { m_step = step; }

  // The next forwards' and backwards' share of their step's objective (micro-batching): the
  // backward scales the LM loss's gradient by weights.lm, the aux losses (values and gradients)
  // are weighted by weights.aux. The defaults ({1, 1}) train the whole step in one forward.
  void setLossWeights(const LossWeights& weights);

  // Runs the forward pass on `batch` (B and T must match dims: dims().batchSize is the batch of
  // one forward) and keeps the activations. `recorder` may be null.
  ForwardResult forward(const Batch& batch, PhaseRecorder* recorder);

  // Backward of lm * loss + auxLoss of the last forward (LossWeights); adds into every
  // parameter's grad (so forwards and backwards of several micro-batches accumulate) and
  // releases the activations. Must follow forward().
  void backward(PhaseRecorder* recorder);

  // After the optimizer step: the aux-loss-free bias update (moe.bias_update_rate > 0) from the
  // counts of the forwards since the last call.
  void afterOptimizerStep();

  // Non-parameter state that checkpoints must carry: the aux-loss-free expert bias per layer
  // (empty when moe.bias_update_rate = 0).
  std::vector<ExpertBias>& expertBiases() { return m_bias; }

  // True for the LoRA adapters ("*.lora_a", "*.lora_b"), false for base parameters.
  bool isLoraAdapter(size_t index) const { return m_isAdapter[index]; }

  // The weight the forward uses for parameter `index`: W + s B A for an adapted weight (the same
  // arithmetic as the forward's), a copy of the value otherwise.
  Tensor<T> mergedValue(size_t index) const;

  // Installs the parallel driver's communicators and hooks (model_parallel.h); T = float only
  // when parallel.ep or parallel.world is set. The EP group's size must be dims().expertShards.
  void setParallel(const ModelParallel& parallel);
  // True for the routed experts' gate / up / down (and their adapters): sharded over EP ranks,
  // holding dims().localExperts() experts.
  bool isExpertSharded(size_t index) const { return m_expertSharded[index]; }
  // The unit of parameter `index` for FSDP: its decoder layer, or -1 (embedding and head).
  int32_t unitOf(size_t index) const { return m_unit[index]; }

 private:
  using Init = ParamInit;
  struct ParamIndex {
    int index = -1;
  };
  struct LayerParams {
    char mixer = 'A';
    int mixerNorm = -1, moeNorm = -1;
    std::vector<int> mixerParams;              // mixerParameterSpecs order
    int router = -1, gate = -1, up = -1, down = -1;
    int sharedGate = -1, sharedUp = -1, sharedDown = -1;
    int latentDown = -1, latentUp = -1, latentNorm = -1;
    int mixerResQuery = -1, mixerResGain = -1, moeResQuery = -1, moeResGain = -1;
  };
  struct LayerActs {
    Tensor<T> input;  // [N, D] input of the mixer norm
    Tensor<T> norm1;  // [N, D]
    Tensor<T> rstd1;  // [N]
    MixerSaved<T> mixer;
    Tensor<T> mid;    // [N, D] input of the MoE norm
    Tensor<T> norm2;  // [N, D]
    Tensor<T> rstd2;  // [N]
    MoeSaved<T> moe;
    EpSaved ep;       // expert-parallel experts stage (parallel.ep > 1)
  };

  // Allocates the tensors of `decl` (parameter_layout.h) and returns its index.
  int addParam(const ParameterDecl& decl);
  // Records parameter `index` in the field of the model that `decl.role` names.
  void bindParam(const ParameterDecl& decl, int index);
  void materializeLora();
  void convertLoraGrads();
  // The weight the ops see: W' while LoRA adapts the parameter, else its value.
  const Tensor<T>& value(int index) const {
    const Tensor<T>& effective = m_effective[size_t(index)];
    return effective.empty() ? m_params[size_t(index)].value : effective;
  }
  Tensor<T>& grad(int index) { return m_params[size_t(index)].grad; }
  std::vector<const Tensor<T>*> mixerValues(const LayerParams& p) const;
  std::vector<Tensor<T>*> mixerGrads(const LayerParams& p);
  MoeWeights<T> moeWeights(int32_t layer) const;
  MoeGrads<T> moeGrads(int32_t layer);
  MoeOptions moeOptions() const;

  Tensor<T> embedForward(const Batch& batch, PhaseRecorder* recorder);
  void embedBackward(const Tensor<T>& dh, PhaseRecorder* recorder);
  Tensor<T> mixerSublayerForward(int32_t layer, PhaseRecorder* recorder);
  Tensor<T> moeSublayerForward(int32_t layer, PhaseRecorder* recorder);
  Tensor<T> moeSublayerBackward(int32_t layer, const Tensor<T>& dOut, PhaseRecorder* recorder);
  Tensor<T> mixerSublayerBackward(int32_t layer, const Tensor<T>& dOut, PhaseRecorder* recorder);
  void layerForward(int32_t layer, Tensor<T>& h, PhaseRecorder* recorder);
  Tensor<T> layerBackward(int32_t layer, const Tensor<T>& dOut, PhaseRecorder* recorder);
  double lossForward(PhaseRecorder* recorder);
  void expertsStageForward(int32_t layer, const MoeWeights<T>& w);
  void expertsStageBackward(int32_t layer, const MoeWeights<T>& w, const MoeGrads<T>& g,
                            MoeBackwardState<T>& state);
  void enterUnit(int32_t unit, bool forward);
  Tensor<T> lossBackward(PhaseRecorder* recorder);
  // One unit of initialize(): parameter `param` by its whole-tensor rule (chunk < 0) or chunk
  // `chunk` (kInitChunkElements elements of the whole, all-expert tensor) of its N(0, std) draw.
  struct InitTask {
    size_t param;
    int64_t chunk;
  };
  static constexpr int64_t kInitChunkElements = int64_t(1) << 20;
  void initializeTask(const InitTask& task, uint64_t seed);
  // The standard deviation of parameter i's normal draw (init_std, scaled for residual outputs).
  double initStddev(size_t i) const;

  ModelDims m_baseDims;  // the configured dims (live settings applied), no loss weights
  ModelDims m_dims;      // m_baseDims with the aux weight of m_lossWeights
  LossWeights m_lossWeights;
  ThreadPool& m_pool;
  std::vector<Parameter<T>> m_params;
  std::vector<Init> m_init;        // [params] how initialize() draws each parameter
  std::vector<char> m_initMixer;   // [params] mixer kind for Init::kMixer
  std::vector<std::string> m_localName;  // [params] name below the layer prefix
  std::vector<bool> m_isAdapter;         // [params] LoRA adapter
  std::vector<bool> m_expertSharded;     // [params] routed expert weight, sharded over EP
  std::vector<int32_t> m_unit;           // [params] decoder layer, -1 outside the layers
  ModelParallel m_parallel;
  struct LoraAdapter {
    int base = -1, a = -1, b = -1;  // parameter indices of W, A, B
  };
  std::vector<LoraAdapter> m_lora;
  double m_loraScale = 0;            // s = alpha / rank
  std::vector<Tensor<T>> m_effective;  // [params] W' of adapted weights (empty otherwise)
  int m_embedding = -1, m_patchWeight = -1, m_patchBias = -1;
  int m_finalNorm = -1, m_lmHead = -1, m_finalResQuery = -1, m_finalResGain = -1;
  std::vector<LayerParams> m_layers;
  std::vector<ExpertBias> m_bias;  // [L] when moe.bias_update_rate > 0
  int64_t m_step = 0;

  // Activations of the last forward.
  bool m_hasActivations = false;
  Tensor<int32_t> m_inputs;   // [N]
  Tensor<int32_t> m_targets;  // [N]
  Tensor<T> m_patches;        // [B*P, patch_dim] image patches of the last forward
  std::vector<LayerActs> m_acts;
  std::unique_ptr<AttnResState<T>> m_attnRes;
  Tensor<T> m_finalInput;    // [N, D]
  Tensor<T> m_finalNormOut;  // [N, D]
  Tensor<T> m_finalRstd;     // [N]
  LmLossSaved<T> m_lossSaved;
};

}  // namespace moewb::engine
