// runStudy: exhaustive and successive-halving studies over real short runs (see study.h).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>

#include "moewb/tuner/study.h"

namespace moewb::tuner {
namespace {

std::string hostDescription(const engine::RunConfig& base) {
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) != 0) name[0] = '\0';
  return std::string(name[0] ? name : "unknown") + " (" + base.run.backend + ", " +
         std::to_string(base.parallel.worldSize) + " rank" +
         (base.parallel.worldSize == 1 ? "" : "s") + ")";
}

// The study's fields that must match for a resume, with the name of the first that differs.
Status checkSameStudy(const StudyInfo& stored, const StudyInfo& now, const std::string& path) {
  const std::pair<const char*, bool> checks[] = {
      {"base config", stored.configToml == now.configToml},
      {"--knobs", stored.knobs == now.knobs},
      {"--objective", stored.objective == now.objective},
      {"--steps", stored.trialSteps == now.trialSteps},
      {"strategy", stored.strategy == now.strategy},
  };
  for (const auto& [what, same] : checks) {
    if (!same) {
      return invalidArgument(path + " is a study with another " + std::string(what) +
                             "; resume it with the same arguments or choose a new -o file");
    }
  }
  return Status::ok();
}

class StudyRun {
 public:
  StudyRun(const StudyOptions& options, SearchSpace space, StudyStore& store)
      : m_options(options),
        m_space(std::move(space)),
        m_store(store),
        m_start(std::chrono::steady_clock::now()) {}

  Status loadExisting() {
    MOEWB_ASSIGN_OR_RETURN(std::vector<TrialRecord> trials, m_store.trials());
    for (TrialRecord& t : trials) {
      if (t.verdict != Verdict::kInvalid) m_runs++;
      m_recorded[{t.settings, t.rung}] = std::move(t);
    }
    for (const Candidate& c : m_space.candidates) {
      if (c.valid() || m_recorded.count({settingsText(c.settings), 0})) continue;
      TrialRecord t;
      t.settings = settingsText(c.settings);
      t.verdict = Verdict::kInvalid;
      t.message = c.rejection;
      t.startedAt = t.endedAt = utcNow();
      MOEWB_RETURN_IF_ERROR(record(t, false));
    }
    return Status::ok();
  }

  Status exhaustive(int64_t plannedRuns) {
    m_planned = plannedRuns;
    for (size_t i = 0; i < m_space.candidates.size(); ++i) {
      if (!m_space.candidates[i].valid()) continue;
      MOEWB_ASSIGN_OR_RETURN(const TrialRecord* t, trial(i, 0, m_options.steps));
      if (t == nullptr) break;
    }
    return Status::ok();
  }

  Status halving() {
    std::vector<size_t> alive;
    for (size_t i = 0; i < m_space.candidates.size(); ++i) {
      if (m_space.candidates[i].valid()) alive.push_back(i);
    }
    return halvingOver(std::move(alive));
  }

  // The model strategy (see study.h): calibrate, score every valid candidate, halve over the best.
  Status model(ModelSummary& summary) {
    m_planned = 1;  // the calibrating base run; the halving's plan follows the scoring
    MOEWB_ASSIGN_OR_RETURN(const TrialRecord* base, trial(0, 0, m_options.steps));
    if (base == nullptr) return Status::ok();
    summary.used = true;
    summary.calibrationTrace =
        m_options.calibrationTrace.empty() ? base->tracePath : m_options.calibrationTrace;
    if (m_options.calibrationTrace.empty() && base->verdict == Verdict::kFailed) {
      return failedPrecondition(
          "the base config's trial failed, so the cost model has no trace "
          "to calibrate from: " +
          base->message);
    }
    MOEWB_ASSIGN_OR_RETURN(Calibration cal, calibrate(summary.calibrationTrace));
    const CostModel model(std::move(cal), m_options.interconnect);
    const auto start = std::chrono::steady_clock::now();
    std::vector<std::pair<double, size_t>> ranked;
    for (size_t i = 0; i < m_space.candidates.size(); ++i) {
      if (!m_space.candidates[i].valid()) continue;
      MOEWB_ASSIGN_OR_RETURN(engine::ValidConfig config,
                             applySettings(m_space.base, m_space.candidates[i].settings));
      PredictOptions options;
      options.withAssumptions = i == 0;
      MOEWB_ASSIGN_OR_RETURN(Prediction p, model.predict(config.get(), options));
      if (i == 0) summary.assumptions = p.assumptions;
      m_predicted[i] = {p.stepMs, p.peakHbmBytes};
      ranked.emplace_back(m_options.objective == Objective::kTokensPerSecond
                              ? p.stepMs / double(std::max<int64_t>(1, config->tokensPerStep()))
                              : double(p.peakHbmBytes),
                          i);
    }
    summary.scored = ranked.size();
    summary.scoreSeconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::stable_sort(ranked.begin(), ranked.end());
    std::set<size_t> chosen = {0};
    for (size_t r = 0; r < ranked.size() && chosen.size() < m_options.modelTopK + 1; ++r) {
      chosen.insert(ranked[r].second);
    }
    for (size_t i : std::vector<size_t>(chosen.begin(), chosen.end())) {
      const std::string ref = settingsText(referenceOf(m_space.candidates[i]));
      for (size_t j = 0; j < m_space.candidates.size(); ++j) {
        if (settingsText(m_space.candidates[j].settings) == ref) chosen.insert(j);
      }
    }
    return halvingOver(std::vector<size_t>(chosen.begin(), chosen.end()));
  }

  Status halvingOver(std::vector<size_t> alive) {
    m_planned = 0;
    for (size_t n = alive.size(), s = m_options.steps; n > 0; n = (n + 1) / 2 + 1, s *= 2) {
      m_planned += int64_t(n);
      if (n <= 2 || int64_t(s * 2) > m_options.maxSteps) break;
    }
    int64_t steps = m_options.steps;
    for (int32_t rung = 0;; ++rung) {
      std::vector<std::pair<double, size_t>> passing;
      for (size_t i : alive) {
        MOEWB_ASSIGN_OR_RETURN(const TrialRecord* t, trial(i, rung, steps));
        if (t == nullptr) return Status::ok();
        if (t->verdict == Verdict::kOk || t->verdict == Verdict::kPruned) {
          passing.emplace_back(score(*t), i);
        }
      }
      const bool onlyBaseLeft =
          passing.size() == 2 && (passing[0].second == 0 || passing[1].second == 0);
      if (passing.size() <= 1 || onlyBaseLeft || steps * 2 > m_options.maxSteps) {
        return Status::ok();
      }
      std::stable_sort(passing.begin(), passing.end(),
                       [](const auto& a, const auto& b) { return a.first > b.first; });
      const size_t keep = (passing.size() + 1) / 2;
      alive.clear();
      for (size_t r = 0; r < passing.size(); ++r) {
        // The base (candidate 0) always runs on, so every rung has the reference of the ratio.
        if (r < keep || passing[r].second == 0) {
          alive.push_back(passing[r].second);
          continue;
        }
        TrialRecord& t =
            m_recorded[{settingsText(m_space.candidates[passing[r].second].settings), rung}];
        if (t.verdict != Verdict::kOk) continue;
        t.verdict = Verdict::kPruned;
        t.message = "not in the better half of rung " + std::to_string(rung) + " (" +
                    std::to_string(r + 1) + " of " + std::to_string(passing.size()) + ")";
        MOEWB_RETURN_IF_ERROR(m_store.setVerdict(t.id, t.verdict, t.message));
      }
      std::sort(alive.begin(), alive.end());  // candidate order: references stay first
      steps *= 2;
    }
  }

  int64_t newRuns() const { return m_newRuns; }
  bool exhausted() const { return m_exhausted; }

 private:
  double score(const TrialRecord& t) const {
    return m_options.objective == Objective::kTokensPerSecond ? t.tokensPerSecond
                                                              : -double(t.peakBytes);
  }

  bool budgetLeft() {
    const Budget& b = m_options.budget;
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - m_start).count();
    const bool left = !(m_options.stop && m_options.stop->load()) &&
                      !(b.trials > 0 && m_runs >= b.trials) &&
                      !(b.seconds > 0 && elapsed >= b.seconds);
    if (!left) m_exhausted = true;
    return left;
  }

  Status record(TrialRecord& t, bool isRun) {
    MOEWB_ASSIGN_OR_RETURN(t.id, m_store.addTrial(t));
    if (isRun) {
      m_runs++;
      m_newRuns++;
      if (m_options.onTrial) m_options.onTrial(t, m_newRuns, m_planned);
    }
    m_recorded[{t.settings, t.rung}] = t;
    return Status::ok();
  }

  // The settings of candidate `c` with every gated knob at the base value: its gate reference.
  Settings referenceOf(const Candidate& c) const {
    Settings ref = c.settings;
    for (size_t k = 0; k < m_space.knobs.size(); ++k) {
      if (m_space.knobs[k].gated) ref[k].second = m_space.knobs[k].values.front();
    }
    return ref;
  }

  void gate(const Candidate& c, TrialRecord& t) const {
    const Settings ref = referenceOf(c);
    if (ref == c.settings) return;
    auto found = m_recorded.find({settingsText(ref), 0});
    if (found == m_recorded.end() ||
        (found->second.verdict != Verdict::kOk && found->second.verdict != Verdict::kPruned)) {
      t.verdict = Verdict::kPrecisionFail;
      t.message = "not checked: its reference " + settingsText(ref) + " was not measured";
      return;
    }
    GateTolerance tol = gateToleranceFor(m_space.base, m_options.gate);
    tol.steps = std::min(tol.steps, m_options.steps);
    std::string finding = precisionFinding(found->second, t, tol);
    if (!finding.empty()) {
      t.verdict = Verdict::kPrecisionFail;
      t.message = finding + " against " + settingsText(ref);
    }
  }

  // The trial of candidate `index` at `rung`: recorded before, or run now. nullptr when the
  // budget is spent.
  Result<const TrialRecord*> trial(size_t index, int32_t rung, int64_t steps) {
    const Candidate& c = m_space.candidates[index];
    const std::string key = settingsText(c.settings);
    if (auto it = m_recorded.find({key, rung}); it != m_recorded.end()) return &it->second;
    if (!budgetLeft()) return static_cast<const TrialRecord*>(nullptr);
    MOEWB_ASSIGN_OR_RETURN(engine::ValidConfig config, applySettings(m_space.base, c.settings));
    const std::string dir = trialDirectory(m_options.studyPath);
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    const std::string trace =
        dir + "/c" + std::to_string(index) + "-r" + std::to_string(rung) + ".sqlite";
    const std::string started = utcNow();
    Result<TrialRecord> measured = runTrial(config, steps, trace);
    TrialRecord t;
    if (measured.isOk()) {
      t = std::move(measured).value();
      if (rung == 0) gate(c, t);
      if (!t.device.empty() && t.device != m_store.info().device) {
        MOEWB_RETURN_IF_ERROR(m_store.setDevice(t.device));  // the exports' provenance
      }
    } else {
      t.verdict = Verdict::kFailed;
      t.message = measured.status().toString();
      t.tracePath = trace;
      t.startedAt = started;
      t.endedAt = utcNow();
    }
    t.settings = key;
    t.rung = rung;
    if (auto p = m_predicted.find(index); p != m_predicted.end()) {
      t.predictedStepTimeMs = p->second.first;
      t.predictedPeakBytes = p->second.second;
    }
    MOEWB_RETURN_IF_ERROR(record(t, true));
    return &m_recorded[{key, rung}];
  }

  const StudyOptions& m_options;
  SearchSpace m_space;
  StudyStore& m_store;
  std::chrono::steady_clock::time_point m_start;
  std::map<std::pair<std::string, int32_t>, TrialRecord> m_recorded;
  std::map<size_t, std::pair<double, int64_t>> m_predicted;  // candidate -> (step ms, peak)
  int64_t m_runs = 0;                                        // runs in the study (all calls)
  int64_t m_newRuns = 0;                                     // runs of this call
  int64_t m_planned = 0;
  bool m_exhausted = false;
};

double medianOf(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Relative errors of the predictions over the measured trials that have one.
void compareWithMeasured(const std::vector<TrialRecord>& trials, ModelSummary& summary) {
  std::vector<double> step, peak;
  for (const TrialRecord& t : trials) {
    const bool measured = t.verdict == Verdict::kOk || t.verdict == Verdict::kPruned ||
                          t.verdict == Verdict::kPrecisionFail;
    if (!measured || t.predictedStepTimeMs <= 0 || t.stepTimeMs <= 0) continue;
    step.push_back(std::abs(t.predictedStepTimeMs - t.stepTimeMs) / t.stepTimeMs);
    if (t.peakBytes > 0 && t.predictedPeakBytes > 0) {
      peak.push_back(std::abs(double(t.predictedPeakBytes - t.peakBytes)) / double(t.peakBytes));
    }
  }
  summary.compared = int64_t(step.size());
  summary.stepErrorMedian = medianOf(step);
  summary.stepErrorMax = step.empty() ? 0 : *std::max_element(step.begin(), step.end());
  summary.peakErrorMedian = medianOf(peak);
  summary.peakErrorMax = peak.empty() ? 0 : *std::max_element(peak.begin(), peak.end());
}

}  // namespace

Result<StudyResult> runStudy(const StudyOptions& options) {
  if (options.steps < 1 || options.maxSteps < options.steps) {
    return invalidArgument("--steps " + std::to_string(options.steps) +
                           " is not accepted; accepted: 1.." + std::to_string(options.maxSteps));
  }
  if (options.strategy != "auto" && options.strategy != "exhaustive" &&
      options.strategy != "halving" && options.strategy != "model") {
    return invalidArgument("--strategy " + options.strategy +
                           " is not accepted; accepted: auto, exhaustive, halving, model");
  }
  if (options.modelTopK < 1) {
    return invalidArgument("--model-top 0 is not accepted; accepted: 1 or more");
  }
  MOEWB_ASSIGN_OR_RETURN(engine::ValidConfig base, engine::ValidConfig::validate(options.base));
  const auto knobs = options.knobs.empty() ? defaultKnobs(base) : options.knobs;
  MOEWB_ASSIGN_OR_RETURN(SearchSpace space, buildSearchSpace(base, knobs));
  StudyResult result;
  result.strategy = options.strategy != "auto"                      ? options.strategy
                    : !options.calibrationTrace.empty()             ? "model"
                    : space.validCount() <= options.exhaustiveLimit ? "exhaustive"
                                                                    : "halving";
  StudyInfo info;
  info.configPath = options.configPath;
  info.configToml = engine::toToml(base);
  info.objective = objectiveName(options.objective);
  info.budget = options.budget.text;
  info.knobs = options.knobsText;
  info.strategy = result.strategy;
  info.trialSteps = options.steps;
  const GateTolerance gate = gateToleranceFor(base, options.gate);
  info.gateSteps = std::min(gate.steps, options.steps);
  info.gateLossRel = gate.lossRel;
  info.gateGradNormRel = gate.gradNormRel;
  info.startedAt = utcNow();
  info.gitCommit = MOEWB_GIT_COMMIT;
  info.host = hostDescription(base);
  std::unique_ptr<StudyStore> store;
  std::error_code ec;
  if (std::filesystem::exists(options.studyPath, ec)) {
    MOEWB_ASSIGN_OR_RETURN(store, StudyStore::open(options.studyPath, true));
    MOEWB_RETURN_IF_ERROR(checkSameStudy(store->info(), info, options.studyPath));
  } else {
    MOEWB_ASSIGN_OR_RETURN(store, StudyStore::create(options.studyPath, info));
  }
  const std::string baseKey = settingsText(space.candidates.front().settings);
  const int64_t valid = int64_t(space.validCount());
  result.candidates = space.candidates.size();
  result.validCandidates = size_t(valid);
  StudyRun run(options, std::move(space), *store);
  MOEWB_RETURN_IF_ERROR(run.loadExisting());
  MOEWB_RETURN_IF_ERROR(result.strategy == "exhaustive" ? run.exhaustive(valid)
                        : result.strategy == "model"    ? run.model(result.model)
                                                        : run.halving());
  result.newRuns = run.newRuns();
  result.budgetExhausted = run.exhausted();
  MOEWB_ASSIGN_OR_RETURN(std::vector<TrialRecord> trials, store->trials());
  result.table = rankTrials(trials, options.objective, baseKey);
  if (result.model.used) compareWithMeasured(trials, result.model);
  for (const StudyRow& row : result.table) {
    if (row.trial.verdict == Verdict::kOk) {
      result.best = row;
      break;
    }
  }
  return result;
}

}  // namespace moewb::tuner
