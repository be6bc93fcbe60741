// `moewb tune --apply`: a study's trial applied live to a running `moewb run --control` (see
// tune_apply.h). Three requests to the run (status, keys, apply) and two read-only files (the
// study, the run's trace); the plan itself is tuner::planLiveRetune.
#include "tune_apply.h"

#include <charconv>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "commands.h"
#include "moewb/base/text.h"
#include "moewb/run/control_client.h"
#include "moewb/run/control_protocol.h"
#include "moewb/storage/trace_reader.h"
#include "moewb/tuner/live_retune.h"
#include "moewb/tuner/study.h"
#include "moewb/tuner/study_store.h"

namespace moewb::cli {
namespace {

// What a failed step ends with: its message on stderr and the exit code.
struct Failure {
  std::string message;
  int exitCode = kExitFailure;
};

int report(const Failure& failure) {
  std::fprintf(stderr, "moewb tune: %s\n", failure.message.c_str());
  return failure.exitCode;
}

// The trial to apply and its study, or why not (exit 2: the study is bad input).
struct ChosenTrial {
  tuner::TrialRecord trial;
  bool isPick = false;
};

Result<ChosenTrial> chooseTrial(const TuneApplyArgs& args) {
  MOEWB_ASSIGN_OR_RETURN(auto store, tuner::StudyStore::open(args.studyPath, false));
  MOEWB_ASSIGN_OR_RETURN(const std::vector<tuner::TrialRecord> trials, store->trials());
  MOEWB_ASSIGN_OR_RETURN(const tuner::Objective objective,
                         tuner::parseObjective(store->info().objective));
  MOEWB_ASSIGN_OR_RETURN(tuner::TrialRecord trial,
                         tuner::pickStudyTrial(trials, objective, args.trial, args.studyPath));
  return ChosenTrial{std::move(trial), !args.trial.has_value()};
}

// One request to the run; an "error: ..." answer is returned as the answer, not as a failure.
Result<std::string> ask(const TuneApplyArgs& args, const std::string& request, Failure* failure) {
  Result<std::string> answer =
      run::askControlSocket(args.controlPath, request, int64_t(args.timeoutSeconds * 1000));
  if (!answer.isOk()) {
    failure->message = answer.status().message();  // the messages `moewb ctl` prints
    failure->exitCode =
        answer.status().code() == StatusCode::kInvalidArgument ? kExitBadInput : kExitFailure;
  }
  return answer;
}

// The run's config now: the start config of its trace with the trace's config_change rows.
Result<engine::RunConfig> currentConfig(const std::string& tracePath) {
  MOEWB_ASSIGN_OR_RETURN(auto reader, storage::TraceReader::open(tracePath));
  MOEWB_ASSIGN_OR_RETURN(const std::vector<storage::RunRow> runs, reader->runs());
  if (runs.empty()) return dataLoss(tracePath + " holds no run yet");
  MOEWB_ASSIGN_OR_RETURN(engine::RunConfig start,
                         engine::parseConfigToml(runs.front().configToml, tracePath));
  MOEWB_ASSIGN_OR_RETURN(const std::vector<storage::ConfigChangeRow> changes,
                         reader->configChanges());
  return tuner::configAfterChanges(std::move(start), changes);
}

// A TOML value for people: a float with the fewest digits that read back exactly ("0.003", not
// engine::toToml's "0.0030000000000000001"); any other value as it is.
std::string forPeople(const std::string& value) {
  if (value.find_first_of(".eE") == std::string::npos) return value;
  double number = 0;
  const auto parsed = std::from_chars(value.data(), value.data() + value.size(), number);
  if (parsed.ec != std::errc() || parsed.ptr != value.data() + value.size()) return value;
  char buf[64];
  const auto written = std::to_chars(buf, buf + sizeof buf, number);
  std::string text(buf, written.ptr);
  if (text.find_first_of(".e") == std::string::npos) text += ".0";
  return text;
}

void printSettings(const char* title, const std::vector<tuner::LiveSetting>& settings) {
  if (settings.empty()) return;
  std::printf("%s\n", title);
  for (const tuner::LiveSetting& s : settings) {
    std::printf("  %s = %s (the run has %s)\n", s.key.c_str(), forPeople(s.trialValue).c_str(),
                forPeople(s.runValue).c_str());
  }
}

void printPlan(const tuner::LiveRetunePlan& plan) {
  printSettings("send (one live patch, source tuner):", plan.send);
  printSettings("needs a restart (not live on this run; never sent):", plan.restart);
  if (!plan.unchanged.empty()) {
    std::printf("unchanged (the run has them): %s\n", joinText(plan.unchanged, ", ").c_str());
  }
}

}  // namespace

int tuneApplyCommand(const TuneApplyArgs& args) {
  Result<ChosenTrial> chosen = chooseTrial(args);
  if (!chosen.isOk()) return report({chosen.status().message(), kExitBadInput});
  Failure failure;
  Result<std::string> status = ask(args, "status", &failure);
  if (!status.isOk()) return report(failure);
  Result<std::string> trace = run::controlStatusTrace(*status);
  if (!trace.isOk()) return report({trace.status().message(), kExitFailure});
  Result<engine::RunConfig> now = currentConfig(*trace);
  if (!now.isOk()) return report({now.status().message(), kExitFailure});
  Result<std::string> keysAnswer = ask(args, "keys", &failure);
  if (!keysAnswer.isOk()) return report(failure);
  Result<std::vector<std::string>> keys = run::controlKeyList(*keysAnswer);
  if (!keys.isOk()) return report({keys.status().message(), kExitFailure});
  const tuner::TrialRecord& trial = chosen->trial;
  Result<tuner::LiveRetunePlan> plan = tuner::planLiveRetune(*now, trial.settings, *keys);
  if (!plan.isOk()) {
    return report({"trial " + std::to_string(trial.id) + " of " + args.studyPath +
                       " does not fit the run: " + plan.status().message(),
                   kExitBadInput});
  }
  std::printf("trial %lld of %s%s: %s\n", static_cast<long long>(trial.id), args.studyPath.c_str(),
              chosen->isPick ? " (the pick)" : "", trial.settings.c_str());
  std::printf("run at %s, trace %s\n", args.controlPath.c_str(), trace->c_str());
  printPlan(*plan);
  if (plan->send.empty()) {
    std::printf("nothing to send: the run already has every live setting of the trial\n");
    return kExitOk;
  }
  std::vector<std::string> assignments;
  for (const tuner::LiveSetting& s : plan->send) assignments.push_back(s.assignment());
  const std::string request = "apply " + joinText(assignments, " ");
  if (args.dryRun) {
    std::printf("dry run: nothing sent (would send: %s)\n", request.c_str());
    return kExitOk;
  }
  Result<std::string> answer = ask(args, request, &failure);
  if (!answer.isOk()) return report(failure);
  std::printf("sent: %s\nrun: %s\n", request.c_str(), answer->c_str());
  return run::isControlOk(*answer) ? kExitOk : kExitFailure;
}

}  // namespace moewb::cli
