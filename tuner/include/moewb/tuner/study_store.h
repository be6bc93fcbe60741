// StudyStore: one tuning study in its own SQLite file (schema below, version kStudySchemaVersion).
//
// Tables: meta(key, value) with format = "moewb-tuner-study" and schema_version; tuner_study, one
// row: the base config (TOML), objective, budget, knobs, strategy, trial steps, ranks, gate
// tolerances, start time, git commit and host; tuner_trial, one row per finished trial: settings
// (the override list "key=value,..."), rung and steps, measured step time (ms), tokens/s, peak
// bytes, final loss, verdict (ok / invalid / failed / precision_fail / pruned), message, the
// trial's trace file, start and end time; tuner_trial_step, per trial and step: loss, gradient
// norm and step time (what the precision gate compares).
//
// A trial row and its steps are written in one transaction after the trial ends, so a study killed
// mid-trial keeps every finished trial and loses only the one in progress (rollback journal, no
// WAL: the file is complete between transactions). open() checks that a file is a study before
// anything could write to it (and before a version-1 file is migrated): the SQLite header, a
// read-only integrity check (PRAGMA quick_check) and the meta rows. A file that fails any check is
// refused (kDataLoss or kInvalidArgument) and left byte-identical. (One exception: a file with a
// hot "-journal" beside it, left by a process killed inside a commit, is first rolled back by
// SQLite's own recovery.) One thread at a time; each call is a few milliseconds (studies hold
// hundreds of rows).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "moewb/base/status.h"

namespace moewb::tuner {

// Version 2 added tuner_trial.predicted_step_time_ms and predicted_peak_bytes (the cost model's
// prediction; NULL = none). Version 1 files are read (no predictions); opening one writable
// migrates it to version 2 first (two ALTER TABLE ... ADD COLUMN in one transaction).
inline constexpr int kStudySchemaVersion = 2;

enum class Verdict {
  kOk,             // measured, passed the gate (or needs none)
  kInvalid,        // refused by the engine's validation; never run (message = the refusal)
  kFailed,         // the training run failed (message = its error)
  kPrecisionFail,  // losses or gradient norms left the tolerance against the reference
  kPruned,         // measured and passed, but not promoted by successive halving
};

// "ok", "invalid", "failed", "precision_fail", "pruned".
const char* verdictName(Verdict verdict);
// The inverse of verdictName; kDataLoss for any other text.
Result<Verdict> parseVerdict(const std::string& name);

struct StudyInfo {
  std::string configPath;      // the --config file as given
  std::string configToml;      // the base config, full TOML (engine::toToml)
  std::string objective;       // "tokens_per_s" or "peak_memory"
  std::string budget;          // as given: "30trials", "10m", "" = none
  std::string knobs;           // the --knobs text ("" = defaults)
  std::string strategy;        // "exhaustive" or "halving"
  int64_t trialSteps = 0;      // steps of a trial (the first rung for halving)
  int64_t gateSteps = 0;       // steps the precision gate compares
  double gateLossRel = 0;      // tolerated relative loss difference
  double gateGradNormRel = 0;  // tolerated relative gradient-norm difference
  std::string startedAt;       // UTC, ISO 8601
  std::string gitCommit;       // of the tool that made the study, "unknown" if not known
  std::string host;            // hostname and backend, e.g. "box (cpu)"
  // What the trials ran on, from the first trial on (meta key 'device'): "CPU, 2 threads" or
  // "NVIDIA H200 (device 0, ...; driver 580.95.05, CUDA 13.0)"; "" before any trial ran.
  std::string device;
  int schemaVersion = kStudySchemaVersion;  // of the file as opened (read back; 1 or 2)
};

struct TrialRecord {
  int64_t id = 0;              // row id (assigned by addTrial)
  std::string settings;        // "fusion.permute_into_experts=true,loss.kind=cce"
  int32_t rung = 0;            // successive-halving rung (0 for exhaustive)
  int64_t steps = 0;           // steps the trial trained
  double stepTimeMs = 0;       // median step time over steps but the first, ms
  double tokensPerSecond = 0;  // tokens of a step / that step time
  int64_t peakBytes = 0;       // peak bytes of engine-owned tensors, largest over steps and ranks
  double finalLoss = 0;        // loss of the last step (mean over ranks)
  Verdict verdict = Verdict::kOk;
  std::string message;    // why: the refusal, the error, the gate's finding; "" for ok
  std::string tracePath;  // the trial's trace file ("" when it did not run)
  std::string startedAt;  // UTC, ISO 8601
  std::string endedAt;
  double predictedStepTimeMs = 0;  // the cost model's step time for it, ms; 0 = no prediction
  int64_t predictedPeakBytes = 0;  // the cost model's peak bytes per rank; 0 = no prediction
  std::vector<double> losses;      // [steps] loss per step (mean over ranks)
  std::vector<double> gradNorms;   // [steps] global gradient norm before clipping
  std::vector<double> stepMs;      // [steps] step time, ms
  std::string device;              // what it ran on (not a column: the study's meta 'device')
};

class StudyStore {
 public:
  // Creates a new study file at `path` with `info`; kAlreadyExists when the path exists, a
  // kInternal with SQLite's message when it cannot be written (nothing is left behind).
  static Result<std::unique_ptr<StudyStore>> create(const std::string& path, const StudyInfo& info);
  // Opens an existing study (read-only unless `writable`). kNotFound when missing; kDataLoss when
  // the file is not SQLite, is damaged or is not a study; kInvalidArgument for a study of another
  // schema version. Never modifies a file it refuses.
  static Result<std::unique_ptr<StudyStore>> open(const std::string& path, bool writable);
  ~StudyStore();
  StudyStore(const StudyStore&) = delete;
  StudyStore& operator=(const StudyStore&) = delete;

  const StudyInfo& info() const { return m_info; }
  const std::string& path() const { return m_path; }

  // Every trial with its steps, in id order. kDataLoss for a row that cannot be read.
  Result<std::vector<TrialRecord>> trials() const;
  // Appends `trial` (its id is ignored) with its steps in one transaction; returns the new id.
  Result<int64_t> addTrial(const TrialRecord& trial);
  // Records what the trials run on (StudyInfo::device). kInternal when it cannot be written.
  Status setDevice(const std::string& device);
  // Changes the verdict and message of trial `id` (kNotFound when there is none).
  Status setVerdict(int64_t id, Verdict verdict, const std::string& message);

 private:
  struct Db;
  StudyStore(std::string path, std::unique_ptr<Db> db, StudyInfo info);
  std::string m_path;
  std::unique_ptr<Db> m_db;
  StudyInfo m_info;
};

// The current time as UTC ISO 8601 ("2026-12-01T12:00:00Z").
std::string utcNow();

}  // namespace moewb::tuner
