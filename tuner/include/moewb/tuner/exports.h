// Exports of a tuned config: our TOML, Megatron-Core command-line flags, torchtitan's legacy TOML
// (v0.2.x sections). Each starts with a provenance comment (study file, trial id, measured step
// time, git commit, machine) and lists, in a comment, every setting the target cannot express
// (every config key the writer neither maps to an option nor finds irrelevant, e.g. kda.* without
// KDA layers), with the nearest option where there is one: nothing is dropped silently.
//
// Megatron output is one flag (with its value) per line after the comment lines, so
// `pretrain_gpt.py $(grep -v '^#' FILE)` passes it. Option names follow Megatron-LM main
// (megatron/training/arguments.py and the config dataclasses it turns into flags) and torchtitan
// v0.2.2 (torchtitan/config/job_config.py); docs/TUNER.md lists the mapping. Pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "moewb/base/status.h"
#include "moewb/engine/config.h"
#include "moewb/tuner/study_store.h"

namespace moewb::tuner {

enum class ExportFormat { kToml, kMegatron, kTorchtitan };

// "toml", "megatron", "torchtitan" and back; kInvalidArgument naming the accepted names.
const char* exportFormatName(ExportFormat format);
Result<ExportFormat> parseExportFormat(const std::string& name);

struct Provenance {
  std::string studyPath;
  int64_t trialId = 0;
  std::string settings;        // the trial's override list
  int64_t steps = 0;           // steps the trial measured
  double stepTimeMs = 0;       // measured median step time
  double tokensPerSecond = 0;  // measured
  int64_t peakBytes = 0;       // measured
  std::string gitCommit;       // of the tool that ran the study
  std::string machine;         // host and backend of the study
  std::string device;          // what the trials ran on, with the GPU driver ("" = unknown)
  double predictedStepTimeMs = 0;  // the cost model's prediction for the trial (0 = none)
  int64_t predictedPeakBytes = 0;
};

struct ExportText {
  std::string text;                      // the file's contents
  std::vector<std::string> unexpressed;  // "key = value (why / nearest option)"
};

// Writes `config` in `format` with `provenance` in the header comment.
ExportText exportConfig(const engine::RunConfig& config, const Provenance& provenance,
                        ExportFormat format);

// Exports trial `trialId` of the study at `studyPath` (opened read-only), or its best passing
// trial when `trialId` is empty. kNotFound for a missing trial; kFailedPrecondition for a trial
// whose verdict is not ok or pruned (invalid, failed and precision_fail trials are never
// exported) or a study without a passing trial; the study's errors as StudyStore::open gives them.
struct StudyExport {
  ExportText text;
  TrialRecord trial;
};
Result<StudyExport> exportStudyTrial(const std::string& studyPath, std::optional<int64_t> trialId,
                                     ExportFormat format);

namespace detail {
// Shared by the writers: the provenance lines, each starting with "# ".
std::string provenanceComment(const Provenance& provenance, const char* target);
// Unexpressed settings: every key of engine::configKeys() not in `mapped` (expressed, or
// irrelevant to this config), as "key = value"; `notes` adds " (note)" to the keys it names.
std::vector<std::string> unexpressedKeys(
    const engine::RunConfig& config, const std::vector<std::string>& mapped,
    const std::vector<std::pair<std::string, std::string>>& notes);
// The comment block that lists `unexpressed` for `target`.
std::string unexpressedComment(const std::vector<std::string>& unexpressed, const char* target);
std::string megatronFlags(const engine::RunConfig& config, std::vector<std::string>& unexpressed);
std::string torchtitanToml(const engine::RunConfig& config, std::vector<std::string>& unexpressed);
}  // namespace detail

}  // namespace moewb::tuner
