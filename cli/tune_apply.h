// `moewb tune --apply STUDY --control PATH [--trial ID] [--dry-run]`: a study's pick (or trial
// ID) applied live to a run started with `moewb run --control PATH`, as ONE patch with source
// "tuner" (the `apply` request of run/control_protocol.h). The plan is the tuner's
// (moewb/tuner/live_retune.h), the same one the GUI's Tuner window uses for "Apply live".
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace moewb::cli {

struct TuneApplyArgs {
  std::string studyPath;         // the study file (opened read-only)
  std::string controlPath;       // the run's control socket
  std::optional<int64_t> trial;  // the trial to apply; none = the pick (as --export takes it)
  bool dryRun = false;           // print the plan, send nothing
  double timeoutSeconds = 60;    // per request to the run
};

// Opens the study, asks the run for its status (its trace) and live keys, reads the run's
// current config from the trace (start config + config_change rows), prints the plan (sent,
// needing a restart, unchanged) and, unless `dryRun`, sends the live settings as one `apply`
// and prints the run's answer. Returns 0 when the run accepted or there was nothing to send, 1
// when the run refused or could not be reached, 2 for bad arguments, a study file that is
// missing, damaged or has no such trial (the file is never modified).
int tuneApplyCommand(const TuneApplyArgs& args);

}  // namespace moewb::cli
