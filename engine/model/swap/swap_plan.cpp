// The swap step model and policy of moewb/engine/swap.h. simulateSwap is an event-driven
// simulation of one step: a compute timeline (forward per layer, the turn, backward per layer),
// a D2H copy stream and an H2D copy stream whose rates change whenever both run; compute waits
// for offloads at their free points (freeLagLayers) and for reloads before a backward; events are
// phase ends and copy ends, so one simulation costs O((layers + tensors) log) with no time step.
// planSwap runs it once per candidate it considers (greedy, see planAuto).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "moewb/base/units.h"
#include "moewb/engine/swap.h"

namespace moewb::engine {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kStallEpsMs = 1e-9;

// One copy in flight or queued.
struct CopyState {
  int32_t tensor = 0;
  double remainingBytes = 0;
  double startMs = -1;
  double endMs = -1;
};

// The event-driven simulation of one step (see the header of swap.h for the rules).
class StepSimulator {
 public:
  StepSimulator(const SwapSettings& s, const SwapProfile& p, const std::vector<SwapAction>& a)
      : m_s(s), m_p(p), m_layers(int32_t(p.layerForwardMs.size())) {
    m_recomputes.assign(size_t(m_layers), false);
    for (size_t i = 0; i < a.size(); ++i) {
      if (a[i] == SwapAction::kSwap) m_off.push_back({int32_t(i), double(p.tensors[i].bytes)});
      if (a[i] == SwapAction::kRecompute) {
        m_recomputed.push_back(int32_t(i));
        m_recomputes[size_t(p.tensors[i].layer)] = true;
      }
    }
    // Reloads: last layer first (backward order), forward op order within a layer.
    m_reload = m_off;
    std::stable_sort(m_reload.begin(), m_reload.end(), [&](const CopyState& x, const CopyState& y) {
      return p.tensors[size_t(x.tensor)].layer > p.tensors[size_t(y.tensor)].layer;
    });
    m_offEnd.assign(p.tensors.size(), -1);
    m_freeMs.assign(p.tensors.size(), -1);
    m_offNeededMs.assign(m_off.size(), 0);
    m_offStallMs.assign(m_off.size(), 0);
    m_offUpTo.assign(size_t(m_layers), 0);
    for (const auto& c : m_off) ++m_offUpTo[size_t(p.tensors[size_t(c.tensor)].layer)];
    for (size_t l = 1; l < m_offUpTo.size(); ++l) m_offUpTo[l] += m_offUpTo[l - 1];
    m_pendingReloads.assign(size_t(m_layers), 0);
    for (const auto& r : m_reload) ++m_pendingReloads[size_t(p.tensors[size_t(r.tensor)].layer)];
    m_issueMs.assign(size_t(m_layers), -1);
    m_fwdEnd.assign(size_t(m_layers), 0);
    m_bwdStart.assign(size_t(m_layers), 0);
    m_bwdEnd.assign(size_t(m_layers), 0);
    m_bwdReady.assign(size_t(m_layers), 0);
  }

  void run();
  void fill(SwapPrediction& out) const;

 private:
  int32_t layerOf(const CopyState& c) const { return m_p.tensors[size_t(c.tensor)].layer; }
  double phaseMs(int32_t phase) const;
  double recomputeMs(int32_t layer) const;
  int32_t phaseLayer(int32_t phase) const {
    return phase < m_layers ? phase : 2 * m_layers - phase;
  }
  bool computeWaiting() const { return m_phaseStart < 0 && m_phase > m_layers; }
  size_t offloadsToWaitFor(int32_t phase) const;
  void passOffloadWait(size_t need, double t);
  void issueReloads(int32_t layer, double t);
  bool startWhatCan(double t);
  int64_t peakBytes(bool withSwap) const;

  const SwapSettings& m_s;
  const SwapProfile& m_p;
  int32_t m_layers;
  std::vector<CopyState> m_off, m_reload;   // issue order
  std::vector<int32_t> m_recomputed;         // tensors recomputed, forward order
  std::vector<bool> m_recomputes;            // [layers] the layer recomputes something
  size_t m_offNext = 0, m_reloadNext = 0;    // next to start
  int32_t m_offActive = -1, m_reloadActive = -1;
  std::vector<double> m_offEnd;              // [tensors] offload end, -1 before
  std::vector<double> m_freeMs;              // [tensors] device memory freed (wait end), -1 before
  std::vector<size_t> m_offUpTo;             // [layers] offloads of layers <= l (issue order)
  std::vector<double> m_offNeededMs;         // [m_off] wait point reached (its last move only)
  std::vector<double> m_offStallMs;          // [m_off] compute wait charged to this offload
  size_t m_offDone = 0;                      // finished offloads (a prefix of m_off)
  size_t m_offFreed = 0;                     // offloads waited for and freed (a prefix of m_off)
  std::vector<int32_t> m_pendingReloads;     // [layers] reloads not finished
  std::vector<double> m_issueMs;             // [layers] reload issue time, -1 before
  std::vector<double> m_fwdEnd, m_bwdStart, m_bwdEnd, m_bwdReady;
  // Compute: phases 0..L-1 forward, L the turn, L+1..2L backward of layers L-1..0.
  int32_t m_phase = 0;
  double m_phaseStart = 0;                   // -1 while waiting to start
  double m_phaseReady = 0;                   // when the phase could have started
  double m_endMs = 0;
};

double StepSimulator::phaseMs(int32_t phase) const {
  if (phase < m_layers) return m_p.layerForwardMs[size_t(phase)];
  if (phase == m_layers) return m_p.turnMs;
  const int32_t l = phaseLayer(phase);
  return m_p.layerBackwardMs[size_t(l)] + recomputeMs(l);
}

// The compute layer `layer`'s backward adds to recompute its dropped tensors (once per layer).
double StepSimulator::recomputeMs(int32_t layer) const {
  if (!m_recomputes[size_t(layer)] || size_t(layer) >= m_p.layerRecomputeMs.size()) return 0;
  return m_p.layerRecomputeMs[size_t(layer)];
}

void StepSimulator::issueReloads(int32_t layer, double t) {
  if (layer >= 0 && layer < m_layers && m_issueMs[size_t(layer)] < 0) m_issueMs[size_t(layer)] = t;
}

// How many offloads (a prefix of m_off) must be done before forward phase or turn `phase` may
// start: at the end of layer k's forward compute waits for the offloads of layer k - lag and
// every one before (one D2H stream, in order); before the turn, for all of them.
size_t StepSimulator::offloadsToWaitFor(int32_t phase) const {
  if (phase <= 0 || phase > m_layers) return 0;
  const int64_t limit = phase == m_layers ? m_layers - 1 : int64_t(phase) - 1 - m_s.freeLagLayers;
  return limit < 0 ? 0 : m_offUpTo[size_t(limit)];
}

// The wait for the first `need` offloads ends at `t`: their memory is freed now; the wait (from
// when compute reached the point) is charged to the last of them, the one compute waited for.
void StepSimulator::passOffloadWait(size_t need, double t) {
  if (need <= m_offFreed) return;
  for (size_t i = m_offFreed; i < need; ++i) m_freeMs[size_t(m_off[i].tensor)] = t;
  m_offNeededMs[need - 1] = m_phaseReady;
  m_offStallMs[need - 1] = t > m_phaseReady + kStallEpsMs ? t - m_phaseReady : 0.0;
  m_offFreed = need;
}

// Starts every phase and copy that may start at `t`; true when something started.
bool StepSimulator::startWhatCan(double t) {
  bool started = false;
  const int32_t L = m_layers;
  if (m_phaseStart < 0 && m_phase <= 2 * L) {
    const bool backward = m_phase > L;
    if (backward && m_s.prefetchLayers == 0) issueReloads(phaseLayer(m_phase), t);
    const size_t offloadsNeeded = offloadsToWaitFor(m_phase);
    const bool ready = backward ? m_pendingReloads[size_t(phaseLayer(m_phase))] == 0
                                : m_offDone >= offloadsNeeded;
    if (ready) {
      if (!backward) passOffloadWait(offloadsNeeded, t);
      m_phaseStart = t;
      started = true;
      if (m_phase == L) {  // the turn: reloads of layers past l + prefetch > L - 1
        for (int32_t l = std::max(0, L - m_s.prefetchLayers); l < L; ++l) issueReloads(l, t);
      } else if (backward) {
        const int32_t l = phaseLayer(m_phase);
        m_bwdStart[size_t(l)] = t;
        issueReloads(l - m_s.prefetchLayers, t);
      }
    }
  }
  if (m_offActive < 0 && m_offNext < m_off.size()) {
    CopyState& c = m_off[m_offNext];
    const int32_t l = layerOf(c);
    if (m_phase > l) {  // layer l's forward has ended
      c.startMs = t;
      m_offActive = int32_t(m_offNext++);
      started = true;
    }
  }
  if (m_reloadActive < 0 && m_reloadNext < m_reload.size()) {
    CopyState& c = m_reload[m_reloadNext];
    const int32_t l = layerOf(c);
    const bool issued = m_issueMs[size_t(l)] >= 0;
    const bool ownDone = m_offEnd[size_t(c.tensor)] >= 0;
    const bool offloadsDone = m_offActive < 0 && m_offNext == m_off.size();
    if (issued && ownDone && (offloadsDone || computeWaiting())) {
      c.startMs = t;
      m_reloadActive = int32_t(m_reloadNext++);
      started = true;
    }
  }
  return started;
}

void StepSimulator::run() {
  const int32_t L = m_layers;
  double t = 0;
  m_phaseStart = -1;
  m_phaseReady = 0;
  while (m_phase <= 2 * L) {
    while (startWhatCan(t)) {
    }
    const bool both = m_offActive >= 0 && m_reloadActive >= 0;
    const double d2h = both ? m_s.bidirBytesPerMs / 2 : m_s.d2hBytesPerMs;
    const double h2d = both ? m_s.bidirBytesPerMs / 2 : m_s.h2dBytesPerMs;
    const double phaseEnd = m_phaseStart >= 0 ? m_phaseStart + phaseMs(m_phase) : kInf;
    const double offEnd =
        m_offActive >= 0 ? t + m_off[size_t(m_offActive)].remainingBytes / d2h : kInf;
    const double reloadEnd =
        m_reloadActive >= 0 ? t + m_reload[size_t(m_reloadActive)].remainingBytes / h2d : kInf;
    const double next = std::min({phaseEnd, offEnd, reloadEnd});
    if (next == kInf) break;  // nothing runs and nothing can start: cannot happen (see header)
    if (m_offActive >= 0) {
      CopyState& c = m_off[size_t(m_offActive)];
      if (offEnd == next) {
        c.remainingBytes = 0;
        c.endMs = next;
        m_offEnd[size_t(c.tensor)] = next;
        m_offActive = -1;
        ++m_offDone;
      } else {
        c.remainingBytes = std::max(0.0, c.remainingBytes - d2h * (next - t));
      }
    }
    if (m_reloadActive >= 0) {
      CopyState& c = m_reload[size_t(m_reloadActive)];
      if (reloadEnd == next) {
        c.remainingBytes = 0;
        c.endMs = next;
        --m_pendingReloads[size_t(layerOf(c))];
        m_reloadActive = -1;
      } else {
        c.remainingBytes = std::max(0.0, c.remainingBytes - h2d * (next - t));
      }
    }
    t = next;
    if (phaseEnd == next) {
      if (m_phase < L) m_fwdEnd[size_t(m_phase)] = t;
      if (m_phase > L) {
        const int32_t l = phaseLayer(m_phase);
        m_bwdEnd[size_t(l)] = t;
        m_bwdReady[size_t(l)] = m_phaseReady;
      }
      ++m_phase;
      m_phaseStart = -1;
      m_phaseReady = t;
      if (m_phase > L && m_phase <= 2 * L) m_bwdReady[size_t(phaseLayer(m_phase))] = t;
    }
  }
  m_endMs = t;
}

// The watermark: fixed bytes, each layer's saved bytes from its forward end to its backward end,
// minus swapped tensors between their free point (the offload wait's end) and reload start, and
// recomputed tensors between their layer's forward end and backward start. Frees first at equal
// times.
int64_t StepSimulator::peakBytes(bool withSwap) const {
  std::vector<std::pair<double, int64_t>> events;  // (time, +alloc / -free)
  std::vector<int64_t> layerBytes(m_p.layerOtherBytes.begin(), m_p.layerOtherBytes.end());
  for (const auto& t : m_p.tensors) layerBytes[size_t(t.layer)] += t.bytes;
  for (int32_t l = 0; l < m_layers; ++l) {
    events.push_back({m_fwdEnd[size_t(l)], layerBytes[size_t(l)]});
    events.push_back({m_bwdEnd[size_t(l)], -layerBytes[size_t(l)]});
  }
  if (withSwap) {
    for (const auto& r : m_reload) {
      const int64_t bytes = m_p.tensors[size_t(r.tensor)].bytes;
      events.push_back({m_freeMs[size_t(r.tensor)], -bytes});
      events.push_back({r.startMs, bytes});
    }
    for (int32_t i : m_recomputed) {
      const SwapTensor& t = m_p.tensors[size_t(i)];
      events.push_back({m_fwdEnd[size_t(t.layer)], -t.bytes});
      events.push_back({m_bwdStart[size_t(t.layer)], t.bytes});
    }
  }
  std::sort(events.begin(), events.end());  // at equal times negative (frees) first
  int64_t now = 0, peak = 0;
  for (const auto& e : events) {
    now += e.second;
    peak = std::max(peak, now);
  }
  return m_p.fixedBytes + peak;
}

void StepSimulator::fill(SwapPrediction& out) const {
  out.moves.clear();
  out.copyMs = 0;
  out.exposedMs = 0;
  out.lateReloads = 0;
  for (size_t i = 0; i < m_off.size(); ++i) {
    const CopyState& c = m_off[i];
    out.moves.push_back({c.tensor, true, c.startMs, c.endMs, m_offNeededMs[i], m_offStallMs[i]});
    out.copyMs += c.endMs - c.startMs;
    out.exposedMs += m_offStallMs[i];
  }
  std::vector<double> layerCovered(size_t(m_layers), -kInf);  // latest reload end charged so far
  for (const auto& c : m_reload) {
    const int32_t l = layerOf(c);
    const double ready = m_bwdReady[size_t(l)];
    const double from = std::max(ready, layerCovered[size_t(l)]);
    const double stall = c.endMs > from + kStallEpsMs ? c.endMs - from : 0.0;
    layerCovered[size_t(l)] = std::max(layerCovered[size_t(l)], c.endMs);
    out.moves.push_back({c.tensor, false, c.startMs, c.endMs, ready, stall});
    out.copyMs += c.endMs - c.startMs;
    out.exposedMs += stall;
    if (stall > 0) ++out.lateReloads;
  }
  out.swappedBytes = 0;
  for (const auto& c : m_off) out.swappedBytes += m_p.tensors[size_t(c.tensor)].bytes;
  out.recomputedBytes = 0;
  for (int32_t i : m_recomputed) out.recomputedBytes += m_p.tensors[size_t(i)].bytes;
  out.recomputeMs = 0;
  for (int32_t l = 0; l < m_layers; ++l) out.recomputeMs += recomputeMs(l);
  out.peakBytes = peakBytes(true);
  out.peakNoSwapBytes = peakBytes(false);
  out.stepMs = m_endMs;
}

Status checkInput(const SwapSettings& s, const SwapProfile& p,
                  const std::vector<SwapAction>& actions) {
  const size_t L = p.layerForwardMs.size();
  if (p.layerBackwardMs.size() != L || p.layerOtherBytes.size() != L) {
    return invalidArgument("swap profile: layerForwardMs, layerBackwardMs and layerOtherBytes "
                           "have " + std::to_string(L) + ", " +
                           std::to_string(p.layerBackwardMs.size()) + " and " +
                           std::to_string(p.layerOtherBytes.size()) + " entries; they must agree");
  }
  if (actions.size() != p.tensors.size()) {
    return invalidArgument("swap: " + std::to_string(actions.size()) + " actions for " +
                           std::to_string(p.tensors.size()) + " tensors");
  }
  for (size_t l = 0; l < L; ++l) {
    if (!(p.layerForwardMs[l] >= 0) || !(p.layerBackwardMs[l] >= 0) ||
        !std::isfinite(p.layerForwardMs[l] + p.layerBackwardMs[l]) || p.layerOtherBytes[l] < 0) {
      return invalidArgument("swap profile: layer " + std::to_string(l) +
                             " has a negative or non-finite time or size");
    }
  }
  if (!(p.turnMs >= 0) || !std::isfinite(p.turnMs) || p.fixedBytes < 0) {
    return invalidArgument("swap profile: negative or non-finite turnMs or fixedBytes");
  }
  if (!p.layerRecomputeMs.empty() && p.layerRecomputeMs.size() != L) {
    return invalidArgument("swap profile: layerRecomputeMs has " +
                           std::to_string(p.layerRecomputeMs.size()) + " entries for " +
                           std::to_string(L) + " layers (or none)");
  }
  for (double v : p.layerRecomputeMs) {
    if (!(v >= 0) || !std::isfinite(v)) {
      return invalidArgument("swap profile: a negative or non-finite layerRecomputeMs");
    }
  }
  int32_t last = 0;
  for (size_t i = 0; i < p.tensors.size(); ++i) {
    const auto& t = p.tensors[i];
    if (t.layer < last || size_t(t.layer) >= L || t.bytes < 0) {
      return invalidArgument("swap profile: tensor " + std::to_string(i) + " (" + t.op +
                             ", layer " + std::to_string(t.layer) +
                             ") is out of forward order, past the last layer or negative");
    }
    last = t.layer;
  }
  if (!(s.d2hBytesPerMs > 0) || !(s.h2dBytesPerMs > 0) || !(s.bidirBytesPerMs > 0) ||
      s.prefetchLayers < 0 || s.freeLagLayers < 0) {
    return invalidArgument("swap: bandwidths must be > 0, prefetchLayers and freeLagLayers >= 0");
  }
  return Status::ok();
}

}  // namespace

Result<SwapPrediction> simulateSwap(const SwapSettings& settings, const SwapProfile& profile,
                                    const std::vector<SwapAction>& actions) {
  MOEWB_RETURN_IF_ERROR(checkInput(settings, profile, actions));
  StepSimulator sim(settings, profile, actions);
  sim.run();
  SwapPrediction out;
  out.decisions.resize(actions.size());
  for (size_t i = 0; i < actions.size(); ++i) out.decisions[i].action = actions[i];
  sim.fill(out);
  return out;
}

namespace {

const char* modeName(SwapMode mode) {
  return mode == SwapMode::kAuto ? "auto" : mode == SwapMode::kManual ? "manual" : "off";
}

// Decimal units, one decimal: "12.3 GB", "1.8 MB", "4.0 kB".
std::string gb(int64_t bytes) {
  char buf[32];
  const double b = double(bytes);
  if (b >= 1e9 || b == 0) std::snprintf(buf, sizeof buf, "%.1f GB", b / 1e9);
  else if (b >= 1e6) std::snprintf(buf, sizeof buf, "%.1f MB", b / 1e6);
  else std::snprintf(buf, sizeof buf, "%.1f kB", b / 1e3);
  return buf;
}

std::string ms(double value) {
  char buf[32];
  std::snprintf(buf, sizeof buf, value >= 100 || value == 0 ? "%.0f ms" : "%.3g ms", value);
  return buf;
}

bool listed(const std::vector<std::string>& ops, const std::string& op) {
  return std::find(ops.begin(), ops.end(), op) != ops.end();
}

bool bigEnough(const SwapSettings& s, const SwapTensor& t) {
  return t.bytes >= s.minBytes && t.bytes != 0;
}

bool mayRecompute(const SwapSettings& s, const SwapTensor& t) {
  return listed(s.recomputeOps, t.op) && bigEnough(s, t);
}

// The decision's reason for a tensor the filters rule out of swapping, or "" when it may swap.
std::string filterReason(const SwapSettings& s, const SwapTensor& t) {
  if (!listed(s.ops, t.op)) return "op not in swap.ops";
  if (!bigEnough(s, t)) return "below swap.min_bytes";
  return "";
}

std::string countLine(const SwapPrediction& p) {
  int32_t swapped = 0, recomputed = 0;
  for (const auto& d : p.decisions) {
    swapped += d.action == SwapAction::kSwap;
    recomputed += d.action == SwapAction::kRecompute;
  }
  std::string line = "swap " + std::to_string(swapped) + " of " +
                     std::to_string(p.decisions.size()) + " tensors (" + gb(p.swappedBytes) + ")";
  if (recomputed > 0) {
    line += ", recompute " + std::to_string(recomputed) + " (" + gb(p.recomputedBytes) + ", " +
            ms(p.recomputeMs) + ")";
  }
  return line;
}

std::string timingLine(const SwapPrediction& p) {
  return "exposed " + ms(p.exposedMs) + " of " + ms(p.copyMs) + " copies, " +
         std::to_string(p.lateReloads) + " late";
}

// A plan that keeps everything, every tensor with `reason`.
Result<SwapPrediction> keepAll(const SwapSettings& s, const SwapProfile& p,
                               const std::string& reason) {
  MOEWB_ASSIGN_OR_RETURN(
      SwapPrediction out,
      simulateSwap(s, p, std::vector<SwapAction>(p.tensors.size(), SwapAction::kKeep)));
  for (auto& d : out.decisions) d.reason = reason;
  return out;
}

Result<SwapPrediction> planManual(const SwapSettings& s, const SwapProfile& p) {
  std::vector<SwapAction> actions(p.tensors.size(), SwapAction::kKeep);
  std::vector<std::string> reasons(p.tensors.size());
  int64_t used = 0;
  for (size_t i = 0; i < p.tensors.size(); ++i) {
    const SwapTensor& t = p.tensors[i];
    if (mayRecompute(s, t)) {
      actions[i] = SwapAction::kRecompute;
      reasons[i] = "listed in swap.recompute_ops";
      continue;
    }
    reasons[i] = filterReason(s, t);
    if (!reasons[i].empty()) continue;
    if (used + t.bytes > s.pinnedBudgetBytes) {
      reasons[i] = "pinned budget full";
      continue;
    }
    used += t.bytes;
    actions[i] = SwapAction::kSwap;
    reasons[i] = "listed in swap.ops";
  }
  MOEWB_ASSIGN_OR_RETURN(SwapPrediction out, simulateSwap(s, p, actions));
  for (size_t i = 0; i < reasons.size(); ++i) out.decisions[i].reason = reasons[i];
  out.summary = "manual: " + countLine(out) + ": peak " + gb(out.peakNoSwapBytes) + " -> " +
                gb(out.peakBytes) + ", " + timingLine(out);
  return out;
}

// The time a plan costs beyond the step without swap: exposed copies and recomputation.
double costMs(const SwapPrediction& p) { return p.exposedMs + p.recomputeMs; }

// A candidate that reduced the peak but added time: tried again after the free ones.
struct Deferred {
  size_t tensor = 0;
  double freedPerMs = 0;   // bytes freed at the peak per ms of added time (its best action)
  double costMs = 0;
};

// One candidate action tried on top of the current plan.
struct Trial {
  SwapAction action = SwapAction::kKeep;
  SwapPrediction next;
  int64_t freed = 0;
  double costMs = 0;
};

// auto: first pass over the candidates, earliest layer first (larger first within a layer),
// taking each that lowers the peak at no added time, by its cheaper action (swap or recompute;
// recompute on ties: it uses neither the link nor pinned memory); second pass over the costly
// ones by bytes freed per ms, until the target. One or two simulations per candidate considered.
Result<SwapPrediction> planAuto(const SwapSettings& s, const SwapProfile& p) {
  const size_t n = p.tensors.size();
  std::vector<SwapAction> actions(n, SwapAction::kKeep);
  std::vector<std::string> reasons(n);
  std::vector<size_t> order;
  for (size_t i = 0; i < n; ++i) {
    reasons[i] = filterReason(s, p.tensors[i]);
    if (reasons[i].empty() || mayRecompute(s, p.tensors[i])) order.push_back(i);
  }
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const auto& x = p.tensors[a];
    const auto& y = p.tensors[b];
    return x.layer != y.layer ? x.layer < y.layer : x.bytes > y.bytes;
  });
  MOEWB_ASSIGN_OR_RETURN(SwapPrediction cur, simulateSwap(s, p, actions));
  std::vector<Deferred> deferred;
  // The cheapest action for tensor i on top of the current plan that frees bytes at the peak;
  // action kKeep (and `why` set) when none does.
  auto bestTrial = [&](size_t i, std::string& why) -> Result<Trial> {
    Trial best;
    why = "frees nothing at the peak";
    const SwapTensor& t = p.tensors[i];
    std::vector<SwapAction> options;
    if (mayRecompute(s, t)) options.push_back(SwapAction::kRecompute);
    if (filterReason(s, t).empty()) {
      if (cur.swappedBytes + t.bytes <= s.pinnedBudgetBytes) {
        options.push_back(SwapAction::kSwap);
      } else if (options.empty()) {
        why = "pinned budget full";
      }
    }
    for (SwapAction a : options) {
      actions[i] = a;
      MOEWB_ASSIGN_OR_RETURN(SwapPrediction next, simulateSwap(s, p, actions));
      actions[i] = SwapAction::kKeep;
      const int64_t freed = cur.peakBytes - next.peakBytes;
      const double cost = std::max(0.0, costMs(next) - costMs(cur));
      if (freed <= 0) continue;
      if (best.action == SwapAction::kKeep || cost < best.costMs - kStallEpsMs) {
        best = Trial{a, std::move(next), freed, cost};
      }
    }
    return best;
  };
  // Tries tensor i on top of the current plan; `allowCost` accepts a plan that adds time.
  auto tryAdd = [&](size_t i, bool allowCost) -> Result<bool> {
    if (cur.peakBytes <= s.hbmTargetBytes) {
      reasons[i] = "not needed: target reached";
      return false;
    }
    std::string why;
    MOEWB_ASSIGN_OR_RETURN(Trial trial, bestTrial(i, why));
    if (trial.action == SwapAction::kKeep) {
      reasons[i] = why;
      return false;
    }
    const bool costly = trial.costMs > kStallEpsMs;
    const bool swap = trial.action == SwapAction::kSwap;
    if (costly && !allowCost) {
      reasons[i] = (swap ? "would stall " : "recompute would cost ") + ms(trial.costMs);
      deferred.push_back({i, double(trial.freed) / trial.costMs, trial.costMs});
      return false;
    }
    reasons[i] = std::string(swap ? "picked: swap, frees " : "picked: recompute, frees ") +
                 gb(trial.freed) + " at the peak" +
                 (!costly ? (swap ? ", hidden under compute" : ", layer already recomputes")
                          : (swap ? ", stalls " : ", costs ") + ms(trial.costMs));
    actions[i] = trial.action;
    cur = std::move(trial.next);
    return true;
  };
  for (size_t i : order) MOEWB_RETURN_IF_ERROR(tryAdd(i, false).status());
  std::stable_sort(deferred.begin(), deferred.end(), [](const Deferred& a, const Deferred& b) {
    return a.freedPerMs > b.freedPerMs;
  });
  const std::vector<Deferred> costly = deferred;
  for (const auto& d : costly) {
    if (cur.peakBytes <= s.hbmTargetBytes) {
      reasons[d.tensor] += "; target reached without it";
      continue;
    }
    MOEWB_RETURN_IF_ERROR(tryAdd(d.tensor, true).status());
  }
  for (size_t i = 0; i < n; ++i) cur.decisions[i] = {actions[i], reasons[i]};
  cur.summary = "auto: " + countLine(cur) + ": peak " + gb(cur.peakNoSwapBytes) + " -> " +
                gb(cur.peakBytes) + " (target " + gb(s.hbmTargetBytes) +
                (cur.peakBytes > s.hbmTargetBytes ? ", not reached" : "") + "), " + timingLine(cur);
  return cur;
}

}  // namespace

Result<SwapPrediction> planSwap(const SwapSettings& settings, const SwapProfile& profile) {
  if (settings.mode == SwapMode::kManual) return planManual(settings, profile);
  if (settings.mode == SwapMode::kOff) {
    MOEWB_ASSIGN_OR_RETURN(SwapPrediction out, keepAll(settings, profile, "swap.mode = off"));
    out.summary = "off: every tensor kept (peak " + gb(out.peakBytes) + ")";
    return out;
  }
  MOEWB_ASSIGN_OR_RETURN(SwapPrediction none, keepAll(settings, profile, ""));
  if (settings.hbmTargetBytes <= 0 || none.peakNoSwapBytes <= settings.hbmTargetBytes) {
    const bool noTarget = settings.hbmTargetBytes <= 0;
    const std::string why =
        noTarget ? "no HBM target (swap.hbm_target_gb = 0 and the device size is unknown)"
                 : "the run fits (peak " + gb(none.peakNoSwapBytes) + " <= target " +
                       gb(settings.hbmTargetBytes) + ")";
    for (auto& d : none.decisions) d.reason = "not needed: " + why;
    none.declined = true;
    none.summary = std::string(modeName(settings.mode)) + ": declined, " + why;
    return none;
  }
  return planAuto(settings, profile);
}

}  // namespace moewb::engine
