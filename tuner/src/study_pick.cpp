// Objectives, budgets and the ranking of a study's trials (see study.h).
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <map>

#include "moewb/tuner/study.h"

namespace moewb::tuner {
namespace {

int verdictOrder(Verdict v) {
  switch (v) {
    case Verdict::kOk:
      return 0;
    case Verdict::kPruned:
      return 1;
    case Verdict::kPrecisionFail:
      return 2;
    case Verdict::kFailed:
      return 3;
    case Verdict::kInvalid:
      return 4;
  }
  return 5;
}

bool measured(const TrialRecord& t) {
  return t.verdict == Verdict::kOk || t.verdict == Verdict::kPruned;
}

// The objective as "larger is better".
double score(const TrialRecord& t, Objective objective) {
  return objective == Objective::kTokensPerSecond ? t.tokensPerSecond : -double(t.peakBytes);
}

double objectiveValue(const TrialRecord& t, Objective objective) {
  return objective == Objective::kTokensPerSecond ? t.tokensPerSecond : double(t.peakBytes);
}

}  // namespace

const char* objectiveName(Objective objective) {
  return objective == Objective::kTokensPerSecond ? "tokens_per_s" : "peak_memory";
}

Result<Objective> parseObjective(const std::string& name) {
  if (name == "tokens_per_s") return Objective::kTokensPerSecond;
  if (name == "peak_memory") return Objective::kPeakMemory;
  return invalidArgument("--objective " + name +
                         " is not accepted; accepted: tokens_per_s, "
                         "peak_memory");
}

Result<Budget> parseBudget(const std::string& text) {
  Budget budget;
  budget.text = text;
  if (text.empty()) return budget;
  const Status bad = invalidArgument("--budget " + text +
                                     " is not accepted; accepted: a number of "
                                     "trials (30trials, 30t) or a duration (90s, 10m, 2h)");
  size_t digits = 0;
  while (digits < text.size() &&
         (std::isdigit(static_cast<unsigned char>(text[digits])) || text[digits] == '.')) {
    ++digits;
  }
  if (digits == 0) return bad;
  char* end = nullptr;
  const std::string number = text.substr(0, digits);
  const double value = std::strtod(number.c_str(), &end);
  if (*end != '\0' || !(value > 0) || !std::isfinite(value)) return bad;
  const std::string unit = text.substr(digits);
  if (unit == "trials" || unit == "trial" || unit == "t") {
    if (value != std::floor(value)) return bad;
    budget.trials = int64_t(value);
  } else if (unit == "s") {
    budget.seconds = value;
  } else if (unit == "m" || unit == "min") {
    budget.seconds = value * 60;
  } else if (unit == "h") {
    budget.seconds = value * 3600;
  } else {
    return bad;
  }
  return budget;
}

std::vector<StudyRow> rankTrials(const std::vector<TrialRecord>& trials, Objective objective,
                                 const std::string& baseSettings) {
  std::map<std::pair<std::string, int32_t>, const TrialRecord*> byKey;
  std::map<std::string, const TrialRecord*> furthest;
  for (const TrialRecord& t : trials) {
    byKey[{t.settings, t.rung}] = &t;
    const TrialRecord*& f = furthest[t.settings];
    if (f == nullptr || t.rung > f->rung) f = &t;
  }
  auto ratio = [&](const TrialRecord& t) {
    for (int32_t rung : {t.rung, 0}) {
      auto cand = byKey.find({t.settings, rung});
      auto base = byKey.find({baseSettings, rung});
      if (cand == byKey.end() || base == byKey.end()) continue;
      if (!measured(*cand->second) || !measured(*base->second)) continue;
      const double b = objectiveValue(*base->second, objective);
      return b > 0 ? objectiveValue(*cand->second, objective) / b : 0.0;
    }
    return 0.0;
  };
  std::vector<StudyRow> rows;
  for (const auto& [settings, t] : furthest) {
    rows.push_back({*t, measured(*t) ? ratio(*t) : 0.0, settings == baseSettings});
  }
  std::sort(rows.begin(), rows.end(), [&](const StudyRow& a, const StudyRow& b) {
    const int va = verdictOrder(a.trial.verdict), vb = verdictOrder(b.trial.verdict);
    if (va != vb) return va < vb;
    if (a.trial.rung != b.trial.rung) return a.trial.rung > b.trial.rung;
    const double sa = score(a.trial, objective), sb = score(b.trial, objective);
    if (sa != sb) return sa > sb;
    if (a.trial.tokensPerSecond != b.trial.tokensPerSecond) {
      return a.trial.tokensPerSecond > b.trial.tokensPerSecond;
    }
    return a.trial.id < b.trial.id;
  });
  return rows;
}

Result<TrialRecord> pickStudyTrial(const std::vector<TrialRecord>& trials, Objective objective,
                                   std::optional<int64_t> trialId, const std::string& studyPath) {
  if (trialId) {
    const auto found = std::find_if(trials.begin(), trials.end(),
                                    [&](const TrialRecord& t) { return t.id == *trialId; });
    if (found == trials.end()) {
      return notFound("--trial " + std::to_string(*trialId) + ": no such trial in " + studyPath);
    }
    if (found->verdict != Verdict::kOk && found->verdict != Verdict::kPruned) {
      return failedPrecondition("trial " + std::to_string(*trialId) + " has verdict " +
                                verdictName(found->verdict) +
                                "; only trials that passed (ok, pruned) are exported");
    }
    return *found;
  }
  for (const StudyRow& row : rankTrials(trials, objective, "")) {
    if (row.trial.verdict == Verdict::kOk) return row.trial;
  }
  return failedPrecondition(studyPath + " has no passing trial to export");
}

std::string trialDirectory(const std::string& studyPath) {
  std::string stem = studyPath;
  const std::string ext = ".sqlite";
  if (stem.size() > ext.size() && stem.compare(stem.size() - ext.size(), ext.size(), ext) == 0) {
    stem.resize(stem.size() - ext.size());
  }
  return stem + "-trials";
}

}  // namespace moewb::tuner
