// calibrate(): a cost-model calibration read out of a trace (see cost_model.h). One streaming pass
// over the slices collects the phase, collective and GPU kernel times per (step, rank); the
// collectives' bytes and groups come from the reader's matched collectives per step.
#include <algorithm>
#include <set>
#include <thread>

#include "moewb/storage/trace_reader.h"
#include "moewb/tuner/cost_model.h"

namespace moewb::tuner {
namespace {

struct Interval {
  int64_t startNs = 0;
  int64_t endNs = 0;
};

// What the slice pass collects for one (step, rank).
struct RankStep {
  std::vector<std::pair<std::string, Interval>> phases;  // phase slices but the passes
  std::vector<Interval> collectives;                     // this rank's collective slices
  std::map<std::string, double> kernelMs;                // GPU kernel time per phase name
};

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int64_t overlapNs(const Interval& a, const std::vector<Interval>& others) {
  int64_t sum = 0;
  for (const Interval& b : others) {
    sum += std::max<int64_t>(0, std::min(a.endNs, b.endNs) - std::max(a.startNs, b.startNs));
  }
  return sum;
}

Status missing(const std::string& path, const std::string& what) {
  return failedPrecondition(path + " cannot calibrate the cost model: it has " + what +
                            "; use a trace of `moewb run` (or a study trial) with at least one "
                            "completed step");
}

// Per step: the rank-mean compute ms of every phase name.
std::map<int64_t, std::map<std::string, double>> phaseMsPerStep(
    const std::map<std::pair<int64_t, int32_t>, RankStep>& byRankStep, int32_t ranks,
    bool fromKernels) {
  std::map<int64_t, std::map<std::string, double>> out;
  for (const auto& [key, rs] : byRankStep) {
    auto& step = out[key.first];
    if (fromKernels) {
      for (const auto& [name, ms] : rs.kernelMs) step[name] += ms / ranks;
      continue;
    }
    for (const auto& [name, iv] : rs.phases) {
      const int64_t ns = (iv.endNs - iv.startNs) - overlapNs(iv, rs.collectives);
      step[name] += double(std::max<int64_t>(0, ns)) / 1e6 / ranks;
    }
  }
  return out;
}

// Collective time and bytes per step and rank from the matched collectives of `steps`.
Status readCollectives(storage::TraceReader& reader, const std::vector<int64_t>& steps,
                       int32_t ranks, Calibration& cal) {
  std::vector<double> a2aMs, otherMs;
  double a2aBytes = 0, a2aXferMs = 0, otherBytes = 0, otherXferMs = 0;
  for (int64_t step : steps) {
    MOEWB_ASSIGN_OR_RETURN(auto matched, reader.stepCollectives(step));
    double a = 0, o = 0;
    for (const storage::MatchedCollective& c : matched) {
      const bool isA2a = c.commGroup == "ep" && c.op.rfind("all_to_all", 0) == 0;
      for (const storage::CollectiveArrival& r : c.arrivals) {
        const double ms = double(r.durNs) / 1e6;
        const double xfer = double(std::max<int64_t>(0, r.durNs - r.waitNs)) / 1e6;
        (isA2a ? a : o) += ms / ranks;
        (isA2a ? a2aBytes : otherBytes) += double(r.bytesSent) / ranks;
        (isA2a ? a2aXferMs : otherXferMs) += xfer / ranks;
      }
    }
    a2aMs.push_back(a);
    otherMs.push_back(o);
  }
  const double n = double(std::max<size_t>(1, steps.size()));
  cal.a2aMs = median(a2aMs);
  cal.collectiveMs = median(otherMs);
  cal.a2aBytes = a2aBytes / n;
  cal.collectiveBytes = otherBytes / n;
  cal.a2aBytesPerMs = a2aXferMs > 0 ? a2aBytes / a2aXferMs : 0;
  cal.collectiveBytesPerMs = otherXferMs > 0 ? otherBytes / otherXferMs : 0;
  return Status::ok();
}

Status readMemory(storage::TraceReader& reader, const std::string& path, Calibration& cal) {
  MOEWB_ASSIGN_OR_RETURN(auto counters, reader.counters(storage::TimeWindow::all()));
  std::set<std::string> seen;
  for (const storage::CounterRow& c : counters) {
    int64_t* field = c.name == "memory.weights_bytes"       ? &cal.weightsBytes
                     : c.name == "memory.grads_bytes"       ? &cal.gradsBytes
                     : c.name == "memory.optimizer_bytes"   ? &cal.optimizerBytes
                     : c.name == "memory.activations_bytes" ? &cal.activationsBytes
                                                            : nullptr;
    if (field == nullptr) continue;
    seen.insert(c.name);
    *field = std::max(*field, int64_t(c.value));
  }
  if (!seen.count("memory.weights_bytes") || !seen.count("memory.grads_bytes") ||
      !seen.count("memory.optimizer_bytes")) {
    return missing(path,
                   "no memory counters (memory.weights_bytes, memory.grads_bytes and "
                   "memory.optimizer_bytes)");
  }
  if (!seen.count("memory.activations_bytes")) {  // multi-rank runs: the peak's rest
    cal.activationsBytes = std::max<int64_t>(
        0, cal.peakBytes - cal.weightsBytes - cal.gradsBytes - cal.optimizerBytes);
  }
  return Status::ok();
}

Status readRouting(storage::TraceReader& reader, const std::string& path, Calibration& cal) {
  MOEWB_ASSIGN_OR_RETURN(auto layers, reader.layerImbalance());
  double sum = 0;
  int n = 0;
  for (const auto& l : layers) {
    if (l.meanMaxOverMean <= 0) continue;
    sum += l.meanMaxOverMean;
    ++n;
  }
  if (n == 0) return missing(path, "no expert load rows (routing skew)");
  cal.routingSkew = sum / n;
  MOEWB_ASSIGN_OR_RETURN(auto swaps, reader.swapSteps());
  double bytes = 0, ms = 0;
  for (const auto& s : swaps) {
    bytes += double(s.swappedBytes) * 2;  // offload and reload of each swapped byte
    ms += s.copyMs;
  }
  cal.swapBytesPerMs = ms > 0 ? bytes / ms : 0;
  return Status::ok();
}

// The steps the medians are over (all but the first when there are several) and the step time.
Result<std::vector<int64_t>> readSteps(storage::TraceReader& reader, const storage::RunRow& run,
                                       const std::string& path, Calibration& cal) {
  MOEWB_ASSIGN_OR_RETURN(auto stepRows, reader.steps(run.id));
  std::map<int64_t, std::pair<int64_t, int64_t>> span;  // step -> (start, end) over ranks
  for (const storage::StepRow& s : stepRows) {
    auto [it, fresh] = span.try_emplace(s.step, s.startNs, s.endNs);
    if (!fresh) {
      it->second.first = std::min(it->second.first, s.startNs);
      it->second.second = std::max(it->second.second, s.endNs);
    }
    cal.peakBytes = std::max(cal.peakBytes, s.peakBytes);
  }
  if (span.empty()) return missing(path, "no completed step");
  std::vector<int64_t> steps;
  std::vector<double> stepMs;
  for (const auto& [step, se] : span) {
    if (step == span.begin()->first && span.size() > 1) continue;  // one-time costs
    steps.push_back(step);
    stepMs.push_back(double(se.second - se.first) / 1e6);
  }
  cal.stepsUsed = int64_t(steps.size());
  cal.stepMs = median(stepMs);
  return steps;
}

// Phase compute times per step (median over `steps`) from one pass over the slices.
Status readPhases(storage::TraceReader& reader, const std::vector<int64_t>& steps,
                  const std::string& path, Calibration& cal) {
  MOEWB_ASSIGN_OR_RETURN(auto tracks, reader.tracks());
  std::map<int64_t, int32_t> rankOf;
  for (const auto& t : tracks) rankOf[t.id.value] = t.rank;
  const std::set<int64_t> used(steps.begin(), steps.end());
  std::map<std::pair<int64_t, int32_t>, RankStep> byRankStep;
  bool anyKernel = false;
  MOEWB_RETURN_IF_ERROR(reader.forEachSliceWithGpuWork(
      [&](const storage::SliceRow& s, const storage::GpuWorkRow* gpu) {
        if (!used.count(s.step)) return true;
        RankStep& rs = byRankStep[{s.step, rankOf[s.track.value]}];
        const Interval iv{s.startNs, s.startNs + std::max<int64_t>(0, s.durNs)};
        if (gpu != nullptr && gpu->kernel && !gpu->kernel->phase.empty()) {
          rs.kernelMs[gpu->kernel->phase] += double(iv.endNs - iv.startNs) / 1e6;
          anyKernel = true;
        } else if (s.category == storage::kCategoryPhase && s.name != "forward" &&
                   s.name != "backward") {
          rs.phases.emplace_back(s.name, iv);
        } else if (s.category == storage::kCategoryCollective) {
          rs.collectives.push_back(iv);
        }
        return true;
      }));
  cal.fromKernels = anyKernel;
  const auto perStep = phaseMsPerStep(byRankStep, cal.worldSize, anyKernel);
  std::set<std::string> names;
  for (const auto& [step, phases] : perStep) {
    for (const auto& [name, ms] : phases) names.insert(name);
  }
  if (names.empty()) return missing(path, "no phase slices (category 'phase')");
  for (const std::string& name : names) {
    std::vector<double> v;
    for (int64_t step : steps) {
      auto it = perStep.find(step);
      const bool has = it != perStep.end() && it->second.count(name);
      v.push_back(has ? it->second.at(name) : 0.0);
    }
    cal.phaseMs[name] = median(v);
  }
  return Status::ok();
}

}  // namespace

Result<Calibration> calibrate(const std::string& path) {
  MOEWB_ASSIGN_OR_RETURN(auto reader, storage::TraceReader::open(path));
  Calibration cal;
  cal.tracePath = path;
  cal.hardwareThreads = int32_t(std::max(1u, std::thread::hardware_concurrency()));
  MOEWB_ASSIGN_OR_RETURN(auto runs, reader->runs());
  if (runs.empty()) return missing(path, "no run row");
  const storage::RunRow& run = runs.front();
  MOEWB_ASSIGN_OR_RETURN(cal.config, engine::parseConfigToml(run.configToml, path));
  cal.backend = run.backend;
  cal.worldSize = std::max(1, run.worldSize);
  MOEWB_ASSIGN_OR_RETURN(auto meta, reader->meta());
  for (const auto& [key, value] : meta) {
    if (key.rfind("clock_offset_ns.rank", 0) == 0) cal.devices = cal.worldSize;  // merged
  }
  MOEWB_ASSIGN_OR_RETURN(std::vector<int64_t> steps, readSteps(*reader, run, path, cal));
  MOEWB_RETURN_IF_ERROR(readPhases(*reader, steps, path, cal));
  MOEWB_RETURN_IF_ERROR(readCollectives(*reader, steps, cal.worldSize, cal));
  double compute = 0;
  for (const auto& [name, ms] : cal.phaseMs) compute += ms;
  // Medians do not add: on a noisy machine the phases' medians can sum past the step's median
  // (0.7% seen on a shared 2-core CI machine). Then they are scaled to fill the step exactly, so
  // the traced config's own prediction stays its measured step.
  const double busy = compute + cal.a2aMs + cal.collectiveMs;
  if (compute > 0 && busy > cal.stepMs) {
    const double scale = std::max(0.0, cal.stepMs - cal.a2aMs - cal.collectiveMs) / compute;
    for (auto& [name, ms] : cal.phaseMs) ms *= scale;
  }
  cal.idleMs = std::max(0.0, cal.stepMs - busy);
  MOEWB_RETURN_IF_ERROR(readMemory(*reader, path, cal));
  MOEWB_RETURN_IF_ERROR(readRouting(*reader, path, cal));
  return cal;
}

}  // namespace moewb::tuner
