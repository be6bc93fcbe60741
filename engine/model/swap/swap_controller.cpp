// SwapController (swap_controller.h): the candidates of a step from the model sizes, the layer
// times of a step from its phase events, and the per-rank replanning rules. Planning costs one
// planSwap (milliseconds at most); swaps() is an array lookup.
#include "model/swap/swap_controller.h"

#include <algorithm>
#include <cmath>

#include "moewb/base/text.h"
#include "moewb/engine/model_flops.h"

namespace moewb::engine {
namespace {

constexpr int64_t kBf16Bytes = 2;
constexpr int64_t kF32Bytes = 4;
constexpr double kReplanRelativeChange = 0.2;  // "moved by more than a fifth"
constexpr double kReplanStallShare = 0.05;     // more exposed time than 5% of the copy time
constexpr int32_t kOps = int32_t(SwapOp::kCount);

// Saved bytes of one layer that are no swap candidate (an estimate of what the CUDA backend
// keeps): the two RMSNorm rstd [N] fp32; the mixer's state taken as softmax attention's q, k, v
// and output [N, D] bf16 plus its log-sum-exp [N, H] fp32 for every mixer kind; the router's
// logits [N, E] fp32 and top-k ids and weights [N, k]; the expert output rows yPerm [N k, Dx]
// bf16 unless combine_into_experts; shared experts' gate, up and hidden [N, S Fs] bf16; the
// latent projection's in, pre and out [N, Dl] bf16 and rstd [N].
int64_t otherSavedBytes(const ModelDims& d) {
  const int64_t n = d.tokens();
  const int64_t rows = n * d.topK;
  const int64_t dx = d.moe.latent() ? d.moe.latentDim : d.dModel;
  int64_t bytes = 2 * n * kF32Bytes;
  bytes += 4 * n * d.dModel * kBf16Bytes + n * d.numHeads * kF32Bytes;
  bytes += n * d.numExperts * kF32Bytes + 2 * rows * kF32Bytes;
  if (!d.moe.combineIntoExperts) bytes += rows * dx * kBf16Bytes;
  bytes += 3 * n * d.moe.sharedWidth() * kBf16Bytes;
  if (d.moe.latent()) bytes += 3 * n * d.moe.latentDim * kBf16Bytes + n * kF32Bytes;
  return bytes;
}

// The op of a tensor named in swapOpNames() order, or kCount.
SwapOp opOf(const std::string& name) {
  for (int32_t i = 0; i < kOps; ++i) {
    if (name == swapOpName(SwapOp(i))) return SwapOp(i);
  }
  return SwapOp::kCount;
}

bool timesMoved(const std::vector<double>& planned, const std::vector<double>& now) {
  if (planned.size() != now.size()) return true;
  for (size_t i = 0; i < now.size(); ++i) {
    if (std::fabs(now[i] - planned[i]) > kReplanRelativeChange * planned[i]) return true;
  }
  return false;
}

// swap.ops as text: "" when every op is allowed (as the key's "" means), else a comma list.
std::string opsText(const std::vector<std::string>& ops) {
  const auto& all = swapOpNames();
  const bool every = std::all_of(all.begin(), all.end(), [&](const std::string& op) {
    return std::find(ops.begin(), ops.end(), op) != ops.end();
  });
  return every ? "" : joinText(ops, ",");
}

// The event of a plan made from `profile` under `settings`; `recomputeMeasured`: the profile's
// layerRecomputeMs is a measured mean (else the FLOPs estimate).
SwapPlanEvent planEvent(const SwapSettings& settings, const SwapProfile& profile,
                        const SwapPrediction& plan, int64_t step, int32_t rank,
                        bool recomputeMeasured) {
  SwapPlanEvent e;
  e.step = step;
  e.rank = rank;
  e.mode = settings.mode == SwapMode::kAuto     ? "auto"
           : settings.mode == SwapMode::kManual ? "manual"
                                                  : "off";
  e.hbmTargetBytes = settings.hbmTargetBytes;
  e.pinnedBudgetBytes = settings.pinnedBudgetBytes;
  e.prefetchLayers = settings.prefetchLayers;
  e.freeLagLayers = settings.freeLagLayers;
  e.ops = opsText(settings.ops);
  e.minBytes = settings.minBytes;
  e.recomputeOps = joinText(settings.recomputeOps, ",");
  e.d2hGbps = settings.d2hBytesPerMs / 1e6;
  e.h2dGbps = settings.h2dBytesPerMs / 1e6;
  e.bidirGbps = settings.bidirBytesPerMs / 1e6;
  e.fixedBytes = profile.fixedBytes;
  e.turnMs = profile.turnMs;
  e.layerForwardMs = profile.layerForwardMs;
  e.layerBackwardMs = profile.layerBackwardMs;
  e.layerOtherBytes = profile.layerOtherBytes;
  e.layerRecomputeMs = profile.layerRecomputeMs;
  e.recomputeMsMeasured = recomputeMeasured && !profile.layerRecomputeMs.empty();
  for (size_t i = 0; i < profile.tensors.size(); ++i) {
    const SwapTensor& t = profile.tensors[i];
    e.tensorLayer.push_back(t.layer);
    e.tensorOp.push_back(t.op);
    e.tensorBytes.push_back(t.bytes);
    e.tensorSwapped.push_back(plan.decisions[i].action == SwapAction::kSwap);
    e.tensorRecomputed.push_back(plan.decisions[i].action == SwapAction::kRecompute);
    e.tensorReason.push_back(plan.decisions[i].reason);
  }
  e.predictedPeakBytes = plan.peakBytes;
  e.predictedPeakNoSwapBytes = plan.peakNoSwapBytes;
  e.predictedExposedMs = plan.exposedMs;
  e.summary = plan.summary;
  return e;
}

}  // namespace

const char* swapOpName(SwapOp op) {
  const auto& names = swapOpNames();
  const size_t i = size_t(op);
  return i < names.size() ? names[i].c_str() : "unknown";
}

SwapProfile swapProfileFor(const ModelDims& d) {
  SwapProfile p;
  const int64_t n = d.tokens();
  const int64_t rows = n * d.topK;  // upper bound of the routed rows
  const int64_t dx = d.moe.latent() ? d.moe.latentDim : d.dModel;
  const int64_t bytes[kOps] = {
      n * d.dModel * kBf16Bytes,     // attn_norm   [N, D]
      n * d.dModel * kBf16Bytes,     // mixer_input [N, D]
      n * d.dModel * kBf16Bytes,     // moe_norm    [N, D]
      n * d.dModel * kBf16Bytes,     // moe_input   [N, D]
      rows * dx * kBf16Bytes,        // expert_fc1  [N k, Dx]
      2 * rows * d.dFf * kBf16Bytes, // moe_act     [N k, F] x 2
      rows * d.dFf * kBf16Bytes,     // expert_fc2  [N k, F]
  };
  for (int32_t l = 0; l < int32_t(d.numLayers); ++l) {
    for (int32_t op = 0; op < kOps; ++op) {
      if (SwapOp(op) == SwapOp::kExpertFc1 && d.moe.permuteIntoExperts) continue;
      p.tensors.push_back({l, swapOpName(SwapOp(op)), bytes[op]});
    }
  }
  p.layerForwardMs.assign(size_t(d.numLayers), 0.0);
  p.layerBackwardMs.assign(size_t(d.numLayers), 0.0);
  p.layerOtherBytes.assign(size_t(d.numLayers), otherSavedBytes(d));
  p.layerRecomputeMs.assign(size_t(d.numLayers), estimatedLayerRecomputeMs(d));
  return p;
}

double estimatedLayerRecomputeMs(const ModelDims& d) {
  const double rows = double(d.tokens()) * double(d.topK);
  const double dx = double(d.moe.latent() ? d.moe.latentDim : d.dModel);
  const double flops = 2.0 * rows * dx * 2.0 * double(d.dFf);
  return flops / (0.5 * kH200MeasuredGemmFlopsPerSecond) * 1e3;
}

Result<StepLayerTimes> layerTimesFromPhases(const std::vector<PhaseEvent>& events,
                                            int32_t numLayers) {
  const size_t L = size_t(std::max(0, numLayers));
  std::vector<int64_t> fwdStart(L, INT64_MAX), fwdEnd(L, INT64_MIN);
  std::vector<int64_t> bwdStart(L, INT64_MAX), bwdEnd(L, INT64_MIN);
  for (const auto& e : events) {
    if (e.layer < 0 || size_t(e.layer) >= L || e.pass == Pass::kNone) continue;
    const size_t l = size_t(e.layer);
    auto& start = e.pass == Pass::kForward ? fwdStart : bwdStart;
    auto& end = e.pass == Pass::kForward ? fwdEnd : bwdEnd;
    start[l] = std::min(start[l], e.startNs);
    end[l] = std::max(end[l], e.endNs);
  }
  for (size_t l = 0; l < L; ++l) {
    if (fwdStart[l] == INT64_MAX || bwdStart[l] == INT64_MAX) {
      return invalidArgument("swap: layer " + std::to_string(l) + " has no " +
                             (fwdStart[l] == INT64_MAX ? "forward" : "backward") +
                             " phase in the step's events");
    }
  }
  StepLayerTimes t;
  t.forwardMs.resize(L);
  t.backwardMs.resize(L);
  if (L == 0) return t;
  const auto ms = [](int64_t ns) { return double(std::max<int64_t>(0, ns)) / 1e6; };
  for (size_t l = 0; l < L; ++l) {
    t.forwardMs[l] = ms((l + 1 < L ? fwdStart[l + 1] : fwdEnd[l]) - fwdStart[l]);
    t.backwardMs[l] = ms((l > 0 ? bwdStart[l - 1] : bwdEnd[l]) - bwdStart[l]);
  }
  t.turnMs = ms(bwdStart[L - 1] - fwdEnd[L - 1]);
  t.forwardStartNs = fwdStart[0];
  return t;
}

SwapController::SwapController(const SwapSettings& settings, SwapProfile sizes, int32_t rank)
    : m_settings(settings), m_profile(std::move(sizes)), m_rank(rank) {
  m_actions.assign(m_profile.layerForwardMs.size() * size_t(kOps), 0);
}

void SwapController::setSettings(const SwapSettings& settings) {
  m_settings = settings;
  m_settingsChanged = true;
}

std::optional<SwapPlanEvent> SwapController::beginStep(int64_t step, int64_t fixedBytes) {
  m_profile.fixedBytes = fixedBytes;
  const bool off = m_settings.mode == SwapMode::kOff;
  if (off) {
    // Emitted once when swap goes from on to off; nothing while it stays off.
    const bool wasOn = m_plan.has_value();
    m_settingsChanged = false;
    std::fill(m_actions.begin(), m_actions.end(), 0);
    if (!wasOn) return std::nullopt;
  } else {
    if (m_settings.mode == SwapMode::kAuto && !m_measured) return std::nullopt;  // measuring
    // A plan made before any step was measured (manual mode at the first step) is made again
    // once there are times, so its prediction is not one of zero-length layers.
    const bool due = m_settingsChanged || !m_plan || (m_measured && !m_plannedWithTimes) ||
                     (m_measured && timesDue(step));
    if (!due) return std::nullopt;
    m_settingsChanged = false;
    std::fill(m_actions.begin(), m_actions.end(), 0);
  }
  Result<SwapPrediction> planned = planSwap(m_settings, m_profile);
  if (!planned.isOk()) {  // the profile is built here, so this is a bug: keep everything
    SwapPrediction keep;
    keep.decisions.assign(m_profile.tensors.size(), {SwapAction::kKeep, "plan failed"});
    keep.summary = "swap plan failed, every tensor kept: " + planned.status().message();
    planned = std::move(keep);
  }
  m_plan = std::move(planned).value();
  m_plannedForwardMs = m_profile.layerForwardMs;
  m_plannedBackwardMs = m_profile.layerBackwardMs;
  m_plannedTurnMs = m_profile.turnMs;
  m_plannedRecomputeMs = m_profile.layerRecomputeMs;
  m_plannedFixedBytes = m_profile.fixedBytes;
  m_plannedStep = step;
  m_plannedWithTimes = m_measured;
  for (size_t i = 0; i < m_profile.tensors.size(); ++i) {
    const SwapTensor& t = m_profile.tensors[i];
    const SwapOp op = opOf(t.op);
    if (!off && op != SwapOp::kCount) {
      m_actions[size_t(t.layer) * size_t(kOps) + size_t(op)] =
          uint8_t(m_plan->decisions[i].action);
    }
  }
  SwapPlanEvent e = planEvent(m_settings, m_profile, *m_plan, step, m_rank, m_recomputeMeasured);
  if (off) m_plan.reset();  // the "off" plan is emitted once; nothing swaps
  return e;
}

bool SwapController::timesDue(int64_t step) const {
  const bool same = m_plannedForwardMs == m_profile.layerForwardMs &&
                    m_plannedBackwardMs == m_profile.layerBackwardMs &&
                    m_plannedTurnMs == m_profile.turnMs &&
                    m_plannedRecomputeMs == m_profile.layerRecomputeMs &&
                    m_plannedFixedBytes == m_profile.fixedBytes;
  if (same) return false;
  const bool moved = timesMoved(m_plannedForwardMs, m_profile.layerForwardMs) ||
                     timesMoved(m_plannedBackwardMs, m_profile.layerBackwardMs);
  // The first measured recompute time replaces the FLOPs estimate: plan again at once.
  if (timesMoved(m_plannedRecomputeMs, m_profile.layerRecomputeMs)) return true;
  if (moved && step - m_plannedStep >= kSwapReplanEverySteps) return true;
  std::vector<SwapAction> actions;
  actions.reserve(m_plan->decisions.size());
  for (const auto& d : m_plan->decisions) actions.push_back(d.action);
  const Result<SwapPrediction> now = simulateSwap(m_settings, m_profile, actions);
  if (!now.isOk()) return true;  // the plan no longer fits the profile: plan again
  const double copyMs = std::max(now->copyMs, m_plan->copyMs);
  if (now->exposedMs > m_plan->exposedMs + kReplanStallShare * copyMs) return true;
  const int64_t target = m_settings.hbmTargetBytes;
  const bool reached = m_plan->peakBytes <= target;
  return m_settings.mode == SwapMode::kAuto && target > 0 && reached && now->peakBytes > target;
}

SwapAction SwapController::actionAt(int32_t layer, SwapOp op) const {
  if (!m_plan || m_settings.mode == SwapMode::kOff || layer < 0 || op >= SwapOp::kCount) {
    return SwapAction::kKeep;
  }
  const size_t i = size_t(layer) * size_t(kOps) + size_t(op);
  return i < m_actions.size() ? SwapAction(m_actions[i]) : SwapAction::kKeep;
}

bool SwapController::swaps(int32_t layer, SwapOp op) const {
  return actionAt(layer, op) == SwapAction::kSwap;
}

bool SwapController::recomputes(int32_t layer, SwapOp op) const {
  return actionAt(layer, op) == SwapAction::kRecompute;
}

void SwapController::recordStepTimes(const std::vector<double>& layerForwardMs,
                                     const std::vector<double>& layerBackwardMs, double turnMs,
                                     const std::vector<double>& layerRecomputeMs) {
  if (layerForwardMs.size() != m_profile.layerForwardMs.size() ||
      layerBackwardMs.size() != m_profile.layerBackwardMs.size()) {
    return;  // another model's times: ignored
  }
  m_profile.layerForwardMs = layerForwardMs;
  m_profile.layerBackwardMs = layerBackwardMs;
  if (layerRecomputeMs.size() == layerBackwardMs.size()) {
    double sum = 0;
    int32_t count = 0;
    for (size_t l = 0; l < layerRecomputeMs.size(); ++l) {
      if (!(layerRecomputeMs[l] > 0) || !std::isfinite(layerRecomputeMs[l])) continue;
      m_profile.layerBackwardMs[l] = std::max(0.0, layerBackwardMs[l] - layerRecomputeMs[l]);
      sum += layerRecomputeMs[l];
      ++count;
    }
    if (count > 0) {
      m_profile.layerRecomputeMs.assign(layerBackwardMs.size(), sum / count);
      m_recomputeMeasured = true;
    }
  }
  m_profile.turnMs = std::max(0.0, turnMs);
  m_measured = true;
}

}  // namespace moewb::engine
