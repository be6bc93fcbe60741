// CostModel::predict: a candidate's step from the calibration and the scaling rules of
// cost_model.h (work estimates in cost_model_rules.cpp).
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "cost_model_rules.h"
#include "moewb/engine/swap.h"
#include "moewb/tuner/cost_model.h"

namespace moewb::tuner {
namespace {

constexpr double kH200DeviceBytes = 141e9;  // HBM3e of one H200, used when hbm_target_gb = 0

double ratio(double candidate, double calibrated) {
  return calibrated > 0 ? candidate / calibrated : 0;
}

int32_t effectiveThreads(const engine::RunConfig& c, int32_t hardware) {
  const int32_t t = c.run.threads > 0 ? c.run.threads : hardware;
  return std::max(1, std::min(t, hardware));
}

std::string fmt(const char* format, double a, double b = 0, double c = 0) {
  char buf[256];
  std::snprintf(buf, sizeof buf, format, a, b, c);
  return buf;
}

bool hasMixer(const engine::RunConfig& c, char kind) {
  return c.model.mixerPattern.find(kind) != std::string::npos;
}

// Mixer kinds the candidate needs that the calibrated run never traced.
Status checkPhasesKnown(const Calibration& cal, const engine::RunConfig& c) {
  const std::pair<char, const char*> kinds[] = {
      {'A', "attention"}, {'K', "kda"}, {'S', "sparse_attention"}};
  for (const auto& [kind, phase] : kinds) {
    if (hasMixer(c, kind) && !cal.phaseMs.count(std::string(phase) + ".fwd")) {
      return failedPrecondition(std::string("the calibration trace ") + cal.tracePath +
                                " has no '" + phase + "' phases, which model.mixer_pattern '" +
                                c.model.mixerPattern + "' needs; calibrate from a run whose " +
                                "pattern has '" + kind + "' layers");
    }
  }
  return Status::ok();
}

// The saved tensors of one step for the swap planner (engine/swap.h's list), `elemBytes` each.
engine::SwapProfile swapProfile(const engine::RunConfig& c, const detail::Work& w,
                                const Prediction& p, double elemBytes) {
  engine::SwapProfile profile;
  const int32_t layers = c.model.numLayers;
  const double n = w.tokensPerRank, d = c.model.dModel, k = c.moe.topK, f = c.moe.dFf;
  double fwd = 0, bwd = 0, turn = 0, expertsFwd = 0;
  for (const auto& [name, ms] : p.phaseMs) {
    const std::string base = detail::phaseBase(name);
    if (name == "experts.fwd") expertsFwd += ms;
    if (base == "loss")
      turn += ms;
    else if (base == "embedding" || base == "optimizer")
      continue;
    else
      (name.size() > 4 && name.substr(name.size() - 4) == ".bwd" ? bwd : fwd) += ms;
  }
  int64_t perLayer = 0;
  for (int32_t l = 0; l < layers; ++l) {
    const std::pair<const char*, double> ops[] = {
        {"attn_norm", n * d},
        {"mixer_input", n * d},
        {"moe_norm", n * d},
        {"moe_input", n * d},
        {"expert_fc1", c.fusion.permuteIntoExperts ? 0 : n * k * d},
        {"moe_act", 2 * n * k * f},
        {"expert_fc2", n * k * f}};
    int64_t layerBytes = 0;
    for (const auto& [op, elems] : ops) {
      if (elems <= 0) continue;
      profile.tensors.push_back({l, op, int64_t(elems * elemBytes)});
      layerBytes += int64_t(elems * elemBytes);
    }
    perLayer = layerBytes;
    profile.layerForwardMs.push_back(fwd / std::max(1, layers));
    profile.layerBackwardMs.push_back(bwd / std::max(1, layers));
    // swap.recompute_ops re-runs the experts' gate + up GEMM: 4 of its 6 R D F forward FLOPs.
    profile.layerRecomputeMs.push_back(expertsFwd / std::max(1, layers) * 2.0 / 3.0);
  }
  const int64_t other = std::max<int64_t>(0, p.activationsBytes / std::max(1, layers) - perLayer);
  profile.layerOtherBytes.assign(size_t(layers), other);
  profile.turnMs = turn;
  profile.fixedBytes = p.weightsBytes + p.gradsBytes + p.optimizerBytes;
  return profile;
}

Status addSwap(const Calibration& cal, const engine::RunConfig& c, const detail::Work& w,
               Prediction& p) {
  engine::SwapSettings settings =
      engine::swapSettingsFrom(c.swap, cal.backend == "cpu" ? 0 : int64_t(kH200DeviceBytes));
  if (cal.swapBytesPerMs > 0) {  // measured copies replace the configured bandwidths
    const double scale = cal.swapBytesPerMs / settings.d2hBytesPerMs;
    settings.d2hBytesPerMs *= scale;
    settings.h2dBytesPerMs *= scale;
    settings.bidirBytesPerMs *= scale;
  }
  const double elemBytes = cal.backend == "cpu" ? 4 : 2;
  MOEWB_ASSIGN_OR_RETURN(engine::SwapPrediction s,
                         engine::planSwap(settings, swapProfile(c, w, p, elemBytes)));
  p.exposedSwapMs = s.exposedMs + s.recomputeMs;  // recompute: compute on the critical path
  p.peakHbmBytes = s.declined ? p.peakHbmBytes : std::min(p.peakHbmBytes, s.peakBytes);
  p.peakHostBytes = s.swappedBytes;
  return Status::ok();
}

double linkBytesPerMs(const Interconnect& net, int32_t groupSize) {
  const double gbps = groupSize <= net.gpusPerNode ? net.intraNodeGbps : net.interNodeGbps;
  return gbps * 1e6;  // GB/s = 1e9 B / 1e3 ms
}

// Ranks per device of the candidate over those of the calibrated run, and the CPU's threads.
double computeShare(const Calibration& cal, const engine::RunConfig& c, int32_t devices) {
  const int32_t ranks = std::max(1, c.parallel.worldSize);
  double share = double(std::max(1, (ranks + devices - 1) / devices)) /
                 double(std::max(1, (cal.worldSize + cal.devices - 1) / cal.devices));
  if (cal.backend == "cpu") {
    share *= double(effectiveThreads(cal.config, cal.hardwareThreads)) /
             double(effectiveThreads(c, cal.hardwareThreads));
  }
  return share;
}

// The work ratio of phase `name` (its own rule, else its base name's, else "other").
double phaseRatio(const std::string& name, const detail::Work& wc, const detail::Work& w) {
  for (const std::string& key : {name, detail::phaseBase(name)}) {
    auto wn = w.phaseWork.find(key);
    auto wo = wc.phaseWork.find(key);
    if (wn != w.phaseWork.end() && wo != wc.phaseWork.end()) return ratio(wn->second, wo->second);
  }
  return ratio(w.otherPhaseWork, wc.otherPhaseWork);
}

}  // namespace

double detail::kdaCoreForwardMs(const Calibration& cal) {
  auto fwd = cal.phaseMs.find("kda.fwd");
  auto bwd = cal.phaseMs.find("kda.bwd");
  if (fwd == cal.phaseMs.end() || bwd == cal.phaseMs.end()) return 0;
  const bool recomputed = !cal.config.kda.keepIntermediates || cal.backend == "cpu";
  const double core = (bwd->second - 2 * fwd->second) / (recomputed ? 2 : 1);
  return std::clamp(core, 0.0, fwd->second);
}

namespace {

// loss.fwd / loss.bwd: the calibrated pass time (the phase less its traffic, over its passes)
// times the candidate's passes and LM-head work ratio, plus the candidate's traffic. A pass with
// no calibrated product (the chunk loss's backward) borrows the other pass's time per product.
double predictLossPhase(const Calibration& cal, const engine::RunConfig& c, const detail::Work& wc,
                        const detail::Work& w, bool forward) {
  const double rate = detail::hbmBytesPerMs(cal);
  const double nThen = wc.tokensPerRank, nNow = w.tokensPerRank;
  auto perPass = [&](bool fwd) {
    auto it = cal.phaseMs.find(fwd ? "loss.fwd" : "loss.bwd");
    const detail::LossPasses passes = detail::lossPasses(cal.config.loss.kind);
    const double count = fwd ? passes.forward : passes.backward;
    if (it == cal.phaseMs.end() || count <= 0) return -1.0;
    const double traffic = rate > 0 ? detail::lossTrafficBytes(cal.config, nThen, fwd) / rate : 0.0;
    return std::max(0.0, it->second - traffic) / count;
  };
  double pass = perPass(forward);
  if (pass < 0) pass = std::max(0.0, perPass(!forward));
  const detail::LossPasses now = detail::lossPasses(c.loss.kind);
  const double traffic = rate > 0 ? detail::lossTrafficBytes(c, nNow, forward) / rate : 0.0;
  return pass * (forward ? now.forward : now.backward) * phaseRatio("loss", wc, w) + traffic;
}

void predictCompute(const Calibration& cal, const engine::RunConfig& c, const detail::Work& wc,
                    const detail::Work& w, double share, Prediction& p) {
  for (const auto& [name, ms] : cal.phaseMs) {
    const bool loss = name == "loss.fwd" || name == "loss.bwd";
    double phase =
        loss ? predictLossPhase(cal, c, wc, w, name == "loss.fwd") : ms * phaseRatio(name, wc, w);
    if (name == "kda.bwd" && w.kdaRecomputes != wc.kdaRecomputes) {
      const double recompute =
          detail::kdaCoreForwardMs(cal) * ratio(w.kdaCoreForwardWork, wc.kdaCoreForwardWork);
      phase = std::max(0.0, phase + (w.kdaRecomputes ? recompute : -recompute));
    }
    p.phaseMs[name] = phase * share;
    p.computeMs += p.phaseMs[name];
  }
  p.idleMs = cal.idleMs * ratio(w.idleUnits, wc.idleUnits);
}

void predictComm(const Calibration& cal, const Interconnect& net, const engine::RunConfig& c,
                 const detail::Work& wc, const detail::Work& w, Prediction& p) {
  const double elemBytes = cal.backend == "cpu" ? 4 : 2;
  const int32_t ranks = std::max(1, c.parallel.worldSize);
  if (w.a2aElems > 0) {
    double t = 0;
    if (wc.a2aElems > 0 && cal.a2aMs > 0 && c.parallel.ep <= cal.worldSize) {
      t = cal.a2aMs * ratio(w.a2aElems, wc.a2aElems);
    } else {
      t = w.a2aElems * elemBytes / linkBytesPerMs(net, c.parallel.ep) +
          w.a2aCount * net.latencyUs / 1e3;
    }
    const int32_t chunks = std::max(1, c.parallel.a2aChunks);
    if (cal.backend == "cuda" && chunks > 1) {
      const double experts = p.phaseMs["experts.fwd"] + p.phaseMs["experts.bwd"];
      t = t / chunks + std::max(0.0, t - experts) * (chunks - 1) / chunks;
    }
    p.exposedA2aMs = t;
  }
  if (w.collectiveElems > 0) {
    const int32_t group = std::max({c.parallel.fsdpDegree(), c.parallel.replicateDegree(),
                                    ranks / std::max(1, c.parallel.ep)});
    if (wc.collectiveElems > 0 && cal.collectiveMs > 0 && group <= cal.worldSize) {
      p.exposedCollectiveMs = cal.collectiveMs * ratio(w.collectiveElems, wc.collectiveElems);
    } else {
      p.exposedCollectiveMs = w.collectiveElems * elemBytes / linkBytesPerMs(net, group) +
                              w.collectiveCount * net.latencyUs / 1e3;
    }
  }
}

void predictMemory(const Calibration& cal, const detail::Work& wc, const detail::Work& w,
                   Prediction& p) {
  const double params = ratio(w.paramsPerRank, wc.paramsPerRank);
  p.weightsBytes = int64_t(double(cal.weightsBytes) * params);
  p.gradsBytes = int64_t(double(cal.gradsBytes) * params);
  p.optimizerBytes = int64_t(double(cal.optimizerBytes) * params);
  // CUDA: the allocator's blocks tensor by tensor (cost_model_memory.cpp); CPU: saved elements.
  const double act = cal.backend == "cuda"
                         ? ratio(w.deviceActivationBytes, wc.deviceActivationBytes)
                         : ratio(w.activationElems, wc.activationElems);
  p.activationsBytes = int64_t(double(cal.activationsBytes) * act);
  const double sumCal =
      double(cal.weightsBytes + cal.gradsBytes + cal.optimizerBytes + cal.activationsBytes);
  const double overhead = sumCal > 0 && cal.peakBytes > 0 ? cal.peakBytes / sumCal : 1;
  p.peakHbmBytes = int64_t(
      double(p.weightsBytes + p.gradsBytes + p.optimizerBytes + p.activationsBytes) * overhead);
}

// The assumptions of the fusion, loss-kind and KDA-recompute rules when the candidate uses them.
void appendRuleAssumptions(const Calibration& cal, const engine::RunConfig& c,
                           std::vector<std::string>& a) {
  if (c.fusion.permuteIntoExperts != cal.config.fusion.permuteIntoExperts ||
      c.fusion.combineIntoExperts != cal.config.fusion.combineIntoExperts) {
    a.push_back(
        "fusion: a fused permute's forward moves the index only (its backward still scatters "
        "the rows), a fused combine the token rows (N D); gathered expert reads cost what "
        "contiguous ones did in the trace");
  }
  if (c.loss.kind != cal.config.loss.kind || c.loss.chunkTokens != cal.config.loss.chunkTokens) {
    a.push_back(
        fmt("loss.kind: LM-head products per pass (dense 1+2, cce 1+3, chunk 3+0) at the "
            "calibrated kind's time per product; materialised logits and the chunk loss's "
            "per-chunk dW at the optimizer's measured %.2f TB/s",
            detail::hbmBytesPerMs(cal) / 1e9));
  }
  if (c.microBatches() != cal.config.microBatches()) {
    a.push_back(
        fmt("data.micro_batch_size: %.0f micro-batches a step (calibrated %.0f): the same "
            "compute, one micro-batch's activations, idle gaps and all-to-all latencies per "
            "pass; smaller kernels' lower efficiency is not modelled",
            double(c.microBatches()), double(cal.config.microBatches())));
  }
  if (c.kda.keepIntermediates != cal.config.kda.keepIntermediates && cal.backend == "cuda") {
    a.push_back(
        fmt("kda.keep_intermediates: the KDA core's forward recompute, %.2f ms in the "
            "trace (from kda.bwd - 2 kda.fwd)",
            detail::kdaCoreForwardMs(cal)));
  }
}

void appendAssumptions(const Calibration& cal, const Interconnect& net, const engine::RunConfig& c,
                       const detail::Work& w, int32_t devices, Prediction& p) {
  const int32_t ranks = std::max(1, c.parallel.worldSize);
  auto& a = p.assumptions;
  a.push_back("calibrated from " + cal.tracePath + " (" + cal.backend + ", " +
              std::to_string(cal.worldSize) + " rank(s) on " + std::to_string(cal.devices) +
              " device(s), " + std::to_string(cal.stepsUsed) + " step(s); phase times from " +
              (cal.fromKernels ? "GPU kernels" : "phase slices") + ")");
  a.push_back(
      fmt("phase compute scales with the work ratio of each phase (FLOPs, moved rows, "
          "held parameters); ranks per device %.0f (calibrated %.0f)",
          double((ranks + devices - 1) / devices),
          double((cal.worldSize + cal.devices - 1) / cal.devices)));
  a.push_back(
      fmt("routing skew max/mean %.2f tokens per expert from the trace; busiest EP rank "
          "holds %.2fx the mean rows",
          cal.routingSkew, w.rankSkew));
  if (cal.backend == "cpu") {
    a.push_back(fmt("cpu: compute / threads (%.0f of %.0f hardware threads)",
                    double(effectiveThreads(c, cal.hardwareThreads)), double(cal.hardwareThreads)));
  }
  if (w.a2aElems > 0 || w.collectiveElems > 0) {
    a.push_back("interconnect beyond the traced ranks: " + interconnectText(net) +
                fmt(" (measured in the trace: all-to-all %.2f GB/s, other collectives %.2f GB/s)",
                    cal.a2aBytesPerMs / 1e6, cal.collectiveBytesPerMs / 1e6));
    a.push_back(
        "collectives are exposed (issued on the step's thread), all-to-alls too unless "
        "parallel.a2a_chunks > 1 on cuda; uniform routing for cross-rank bytes");
  }
  appendRuleAssumptions(cal, c, a);
  if (c.swap.mode != "off") {
    a.push_back(cal.swapBytesPerMs > 0
                    ? fmt("swap copies at the measured %.1f GB/s", cal.swapBytesPerMs / 1e6)
                    : fmt("swap copies at swap.d2h_gbps %.0f / h2d_gbps %.0f (none measured)",
                          c.swap.d2hGbps, c.swap.h2dGbps));
  }
  if (cal.backend == "cuda") {
    a.push_back(
        "activations: saved tensors in allocator blocks, the peak at the turn's stack plus the "
        "largest backward transient; blocks the allocator reuses at up to twice a request are "
        "not counted (h8/h18 of bench/RESULTS.md: up to 1.6% of the peak)");
  }
  a.push_back(fmt("idle %.2f ms in the trace, scaled by phases per step", cal.idleMs));
}

}  // namespace

CostModel::CostModel(Calibration calibration, Interconnect interconnect)
    : m_cal(std::move(calibration)),
      m_net(interconnect),
      m_calWork(std::make_shared<detail::Work>(detail::workOf(m_cal.config, m_cal.routingSkew))) {}

Result<Prediction> CostModel::predict(const engine::RunConfig& c,
                                      const PredictOptions& options) const {
  MOEWB_RETURN_IF_ERROR(checkPhasesKnown(m_cal, c));
  const detail::Work w = detail::workOf(c, m_cal.routingSkew);
  const int32_t devices = options.devices > 0 ? options.devices : m_cal.devices;
  Prediction p;
  predictCompute(m_cal, c, *m_calWork, w, computeShare(m_cal, c, devices), p);
  predictComm(m_cal, m_net, c, *m_calWork, w, p);
  predictMemory(m_cal, *m_calWork, w, p);
  if (c.swap.mode != "off") MOEWB_RETURN_IF_ERROR(addSwap(m_cal, c, w, p));
  p.stepMs = p.computeMs + p.exposedA2aMs + p.exposedCollectiveMs + p.exposedSwapMs + p.idleMs;
  if (options.withAssumptions) appendAssumptions(m_cal, m_net, c, w, devices, p);
  return p;
}

Result<Interconnect> parseInterconnect(const std::string& text, Interconnect base) {
  size_t start = 0;
  while (start < text.size()) {
    size_t comma = text.find(',', start);
    if (comma == std::string::npos) comma = text.size();
    const std::string item = text.substr(start, comma - start);
    start = comma + 1;
    const auto eq = item.find('=');
    const std::string key = item.substr(0, eq);
    char* end = nullptr;
    const std::string value = eq == std::string::npos ? "" : item.substr(eq + 1);
    const double v = std::strtod(value.c_str(), &end);
    const bool number = !value.empty() && end && *end == '\0' && std::isfinite(v) && v > 0;
    const char* accepted =
        "; accepted: intra_node_gbps=X, inter_node_gbps=X, latency_us=X (numbers > 0), "
        "gpus_per_node=N (whole number >= 1), comma-separated";
    const Status refused =
        invalidArgument("--interconnect: '" + item + "' is not accepted" + accepted);
    if (!number) return refused;
    if (key == "intra_node_gbps") {
      base.intraNodeGbps = v;
    } else if (key == "inter_node_gbps") {
      base.interNodeGbps = v;
    } else if (key == "latency_us") {
      base.latencyUs = v;
    } else if (key == "gpus_per_node" && v == std::floor(v) && v <= 1e6) {
      base.gpusPerNode = int32_t(v);
    } else {
      return refused;
    }
  }
  return base;
}

std::string interconnectText(const Interconnect& n) {
  return fmt("intra_node_gbps=%g inter_node_gbps=%g ", n.intraNodeGbps, n.interNodeGbps) +
         fmt("gpus_per_node=%g latency_us=%g", double(n.gpusPerNode), n.latencyUs);
}

std::string describePrediction(const Prediction& p) {
  std::string out = fmt("predicted step %.2f ms = compute %.2f + exposed all-to-all %.2f", p.stepMs,
                        p.computeMs, p.exposedA2aMs) +
                    fmt(" + exposed collectives %.2f + exposed swap %.2f + idle %.2f\n",
                        p.exposedCollectiveMs, p.exposedSwapMs, p.idleMs);
  out += "  compute per phase (ms):";
  for (const auto& [name, ms] : p.phaseMs) out += " " + name + fmt("=%.2f", ms);
  constexpr double kMiB = 1 << 20;
  out += fmt("\npredicted peak device memory %.2f MiB per rank (weights %.2f, ",
             double(p.peakHbmBytes) / kMiB, double(p.weightsBytes) / kMiB) +
         fmt("grads %.2f, optimizer %.2f, ", double(p.gradsBytes) / kMiB,
             double(p.optimizerBytes) / kMiB) +
         fmt("activations %.2f); host (swap) %.2f MiB\n", double(p.activationsBytes) / kMiB,
             double(p.peakHostBytes) / kMiB);
  if (!p.assumptions.empty()) out += "assumptions:\n";
  for (const auto& a : p.assumptions) out += "  - " + a + "\n";
  return out;
}

}  // namespace moewb::tuner
