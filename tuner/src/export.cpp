// exportConfig and exportStudyTrial; our own TOML (see exports.h).
#include <algorithm>
#include <cstdio>

#include "knob_values.h"
#include "moewb/tuner/exports.h"
#include "moewb/tuner/search_space.h"
#include "moewb/tuner/study.h"

namespace moewb::tuner {
namespace {

std::string formatNumber(const char* fmt, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, v);
  return buf;
}

}  // namespace

const char* exportFormatName(ExportFormat format) {
  switch (format) {
    case ExportFormat::kToml:
      return "toml";
    case ExportFormat::kMegatron:
      return "megatron";
    case ExportFormat::kTorchtitan:
      return "torchtitan";
  }
  return "toml";
}

Result<ExportFormat> parseExportFormat(const std::string& name) {
  for (ExportFormat f : {ExportFormat::kToml, ExportFormat::kMegatron, ExportFormat::kTorchtitan}) {
    if (name == exportFormatName(f)) return f;
  }
  return invalidArgument("--format " + name +
                         " is not accepted; accepted: toml, megatron, "
                         "torchtitan");
}

namespace detail {

std::string provenanceComment(const Provenance& p, const char* target) {
  std::string out =
      std::string("# ") + target + " exported by `moewb tune --export` (MoE Workbench)\n";
  out += "# study: " + p.studyPath + ", trial " + std::to_string(p.trialId) + "\n";
  out +=
      "# settings: " + (p.settings.empty() ? std::string("(the base config)") : p.settings) + "\n";
  out += "# measured: step time " + formatNumber("%.3f", p.stepTimeMs) + " ms (median of " +
         std::to_string(p.steps) + " steps), " + formatNumber("%.1f", p.tokensPerSecond) +
         " tokens/s, peak " + std::to_string(p.peakBytes) + " bytes\n";
  if (p.predictedStepTimeMs > 0) {
    out += "# predicted by the cost model: step time " + formatNumber("%.3f", p.predictedStepTimeMs) +
           " ms, peak " + std::to_string(p.predictedPeakBytes) + " bytes\n";
  }
  out += "# git commit: " + p.gitCommit + "\n";
  out += "# machine: " + p.machine + "\n";
  if (!p.device.empty()) out += "# device: " + p.device + "\n";
  return out;
}

std::vector<std::string> unexpressedKeys(
    const engine::RunConfig& config, const std::vector<std::string>& mapped,
    const std::vector<std::pair<std::string, std::string>>& notes) {
  std::vector<std::string> out;
  for (const auto& info : engine::configKeys()) {
    if (std::find(mapped.begin(), mapped.end(), info.key) != mapped.end()) continue;
    std::string line = info.key + " = " + detail::currentValue(config, info.key);
    for (const auto& [key, note] : notes) {
      if (key == info.key) line += " (" + note + ")";
    }
    out.push_back(std::move(line));
  }
  return out;
}

std::string unexpressedComment(const std::vector<std::string>& unexpressed, const char* target) {
  if (unexpressed.empty()) return std::string("# every setting is expressed in ") + target + "\n";
  std::string out =
      std::string("# not expressible in ") + target + " (set by hand or dropped " + "knowingly):\n";
  for (const auto& line : unexpressed) out += "#   " + line + "\n";
  return out;
}

}  // namespace detail

ExportText exportConfig(const engine::RunConfig& config, const Provenance& provenance,
                        ExportFormat format) {
  ExportText out;
  switch (format) {
    case ExportFormat::kToml:
      out.text = detail::provenanceComment(provenance, "MoE Workbench engine config") +
                 detail::unexpressedComment({}, "this TOML") + "\n" + engine::toToml(config);
      break;
    case ExportFormat::kMegatron: {
      std::string body = detail::megatronFlags(config, out.unexpressed);
      out.text = detail::provenanceComment(provenance, "Megatron-Core command-line flags") +
                 "# use: pretrain_gpt.py $(grep -v '^#' THIS_FILE)\n" +
                 detail::unexpressedComment(out.unexpressed, "Megatron-Core") + body;
      break;
    }
    case ExportFormat::kTorchtitan: {
      std::string body = detail::torchtitanToml(config, out.unexpressed);
      out.text =
          detail::provenanceComment(provenance, "torchtitan job config (legacy TOML, v0.2.x)") +
          detail::unexpressedComment(out.unexpressed, "torchtitan's TOML") + "\n" + body;
      break;
    }
  }
  return out;
}

Result<StudyExport> exportStudyTrial(const std::string& studyPath, std::optional<int64_t> trialId,
                                     ExportFormat format) {
  MOEWB_ASSIGN_OR_RETURN(auto store, StudyStore::open(studyPath, false));
  MOEWB_ASSIGN_OR_RETURN(std::vector<TrialRecord> trials, store->trials());
  MOEWB_ASSIGN_OR_RETURN(Objective objective, parseObjective(store->info().objective));
  MOEWB_ASSIGN_OR_RETURN(const TrialRecord chosen,
                         pickStudyTrial(trials, objective, trialId, studyPath));
  MOEWB_ASSIGN_OR_RETURN(engine::RunConfig base,
                         engine::parseConfigToml(store->info().configToml, studyPath));
  MOEWB_ASSIGN_OR_RETURN(Settings settings, parseSettingsText(chosen.settings));
  MOEWB_ASSIGN_OR_RETURN(engine::ValidConfig config, applySettings(base, settings));
  Provenance p;
  p.studyPath = studyPath;
  p.trialId = chosen.id;
  p.settings = chosen.settings;
  p.steps = chosen.steps;
  p.stepTimeMs = chosen.stepTimeMs;
  p.tokensPerSecond = chosen.tokensPerSecond;
  p.peakBytes = chosen.peakBytes;
  p.gitCommit = store->info().gitCommit;
  p.machine = store->info().host;
  p.device = store->info().device;
  p.predictedStepTimeMs = chosen.predictedStepTimeMs;
  p.predictedPeakBytes = chosen.predictedPeakBytes;
  return StudyExport{exportConfig(config, p, format), chosen};
}

}  // namespace moewb::tuner
