// A tuning study: the strategies that pick which candidates to run, with how many steps, over real
// short training runs, and the ranking of what they measured.
//
// Strategies: exhaustive (every valid candidate, `steps` steps each) for spaces of at most
// exhaustiveLimit valid candidates; successive halving otherwise: every candidate runs `steps`
// steps (rung 0), the better half by the objective runs twice as many (rung 1), and so on until
// one candidate is left or a rung would exceed maxSteps; those not promoted become `pruned`.
// Candidates that move a gated knob are compared with their reference (the same settings with
// the gated knobs at the base values, run before them) by the precision gate in rung 0; a
// candidate outside the tolerance becomes `precision_fail` and is never promoted, picked or
// exported. Invalid candidates are recorded with the engine's refusal and never run.
//
// Model strategy: the base config runs rung 0 first; the cost model (cost_model.h) is
// calibrated from its trace (or StudyOptions::calibrationTrace), predicts every valid candidate,
// and only the modelTopK best predicted (plus the base and the gate references they need) run
// real trials, by successive halving among them. Every trial row carries the prediction of its
// candidate (the calibrating base trial at rung 0 has none), and the result compares predicted
// with measured step time and peak memory (ModelSummary).
//
// Resume: with an existing study file the study continues where it stopped: the trials already
// recorded (same settings and rung) are not run again; the base config, knobs, objective, steps
// and strategy must be those of the study (kInvalidArgument otherwise). The budget counts the
// study's runs in total (trial budget) or this call's wall time (minute budget).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "moewb/base/status.h"
#include "moewb/engine/config.h"
#include "moewb/tuner/cost_model.h"
#include "moewb/tuner/search_space.h"
#include "moewb/tuner/study_store.h"
#include "moewb/tuner/trial_runner.h"

namespace moewb::tuner {

enum class Objective { kTokensPerSecond, kPeakMemory };

// "tokens_per_s" / "peak_memory" and back; kInvalidArgument naming the accepted names.
const char* objectiveName(Objective objective);
Result<Objective> parseObjective(const std::string& name);

struct Budget {
  int64_t trials = 0;  // runs in the whole study; 0 = no limit
  double seconds = 0;  // wall time of this call; 0 = no limit
  std::string text;    // as given ("30trials", "10m"); "" = no budget
};
// Parses "N trials" forms ("30trials", "30t") and durations ("90s", "10m", "2h");
// kInvalidArgument naming the accepted forms otherwise.
Result<Budget> parseBudget(const std::string& text);

struct StudyOptions {
  std::string studyPath;        // the study file: created, or resumed when it exists
  std::string configPath;       // recorded in the study
  engine::RunConfig base;       // the base config (run.steps is ignored)
  std::vector<KnobSpec> knobs;  // empty = defaultKnobs(base)
  std::string knobsText;        // as given, recorded in the study
  Objective objective = Objective::kTokensPerSecond;
  Budget budget;
  std::string strategy = "auto";  // "auto", "exhaustive", "halving" or "model"
  size_t exhaustiveLimit = 8;     // auto: exhaustive up to this many valid candidates
  // model: the trace to calibrate from; "" = the base config's own rung-0 trial. auto picks
  // "model" when this is set.
  std::string calibrationTrace;
  Interconnect interconnect;  // model: links beyond the calibrated ranks
  size_t modelTopK = 6;       // model: candidates (best predicted) that run real trials
  int64_t steps = 6;          // steps of a trial (rung 0)
  int64_t maxSteps = 48;      // halving: no rung trains more steps than this
  GateTolerance gate;         // gate.steps is capped at `steps`; negative tolerances:
                              // the backend's (gateToleranceFor)
  // Called after every trial recorded by this call (on the calling thread), with the trial's
  // 1-based number among this call's runs and the number of runs the strategy plans at most.
  std::function<void(const TrialRecord&, int64_t runNumber, int64_t plannedRuns)> onTrial;
  const std::atomic<bool>* stop = nullptr;  // set: no new trial starts (a clean interrupt)
};

// One row of the final table: a candidate's furthest trial.
struct StudyRow {
  TrialRecord trial;
  double ratioToBase = 0;  // objective value / the base config's at the same rung (0 = unknown)
  bool isBase = false;
};

// The model strategy's scoring and how its predictions compared with the trials.
struct ModelSummary {
  bool used = false;
  std::string calibrationTrace;          // the trace the model was calibrated from
  size_t scored = 0;                     // candidates predicted
  double scoreSeconds = 0;               // wall time of scoring them
  std::vector<std::string> assumptions;  // of the base config's prediction
  int64_t compared = 0;                  // measured trials with a prediction
  double stepErrorMedian = 0;            // |predicted - measured| / measured step time
  double stepErrorMax = 0;
  double peakErrorMedian = 0;  // the same for peak bytes
  double peakErrorMax = 0;
};

struct StudyResult {
  std::string strategy;          // "exhaustive", "halving" or "model"
  size_t candidates = 0;         // in the search space
  size_t validCandidates = 0;    // of those, accepted by the engine's validation
  std::vector<StudyRow> table;   // best first: ok, pruned, precision_fail, failed, invalid
  std::optional<StudyRow> best;  // the best passing trial; none when nothing passed
  int64_t newRuns = 0;           // trials this call ran
  bool budgetExhausted = false;  // the budget or a stop ended the study before its plan
  ModelSummary model;            // strategy "model" only
};

// Runs (or resumes) the study described by `options`. Errors: a bad base config, knob or budget
// (kInvalidArgument), a study file that is not a study or belongs to another study (kDataLoss /
// kInvalidArgument, the file untouched), SQLite failures (kInternal). A failing trial is a
// verdict, not an error. Trace files go to "<study path without .sqlite>-trials/".
Result<StudyResult> runStudy(const StudyOptions& options);

// The final table of a study's trials (see StudyResult::table) under `objective`; `baseSettings`
// names the base candidate. Pure.
std::vector<StudyRow> rankTrials(const std::vector<TrialRecord>& trials, Objective objective,
                                 const std::string& baseSettings);

// The trial `moewb tune --export` (and --apply) takes from a study whose trials are `trials`:
// trial `trialId` when given, else the first trial with verdict ok in rankTrials' order under
// `objective` (the pick). Errors: kNotFound when no trial has id `trialId`, kFailedPrecondition
// when it did not pass (only ok and pruned trials are taken) or when no trial passed; `studyPath`
// names the study in the messages. Pure.
Result<TrialRecord> pickStudyTrial(const std::vector<TrialRecord>& trials, Objective objective,
                                   std::optional<int64_t> trialId, const std::string& studyPath);

// The folder that holds the trace files of the study at `studyPath`.
std::string trialDirectory(const std::string& studyPath);

}  // namespace moewb::tuner
