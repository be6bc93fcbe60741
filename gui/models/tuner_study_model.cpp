// loadTunerStudy, the Pareto front, the "why not" line, exports and TunerStudyModel (see
// tuner_study_model.h).
#include "moewb/gui/tuner_study_model.h"

#include <QFont>
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>

#include "moewb/engine/config.h"
#include "moewb/tuner/search_space.h"

namespace moewb::gui {
namespace {

bool measured(const tuner::TrialRecord& t) {
  return exportable(t.verdict) && t.stepTimeMs > 0;
}

// The base candidate's settings: those of the first trial whose settings leave the study's stored
// base config as it is (every knob at the base value); "" when no trial has them (or the stored
// config cannot be read), so every row then shows its settings in full.
std::string baseSettingsOf(const tuner::StudyInfo& info, const std::string& path,
                           const std::vector<tuner::TrialRecord>& trials) {
  auto base = engine::parseConfigToml(info.configToml, path);
  if (!base.isOk()) return {};
  const std::string baseToml = engine::toToml(*base);
  for (const tuner::TrialRecord& t : trials) {
    auto settings = tuner::parseSettingsText(t.settings);
    if (!settings.isOk()) continue;
    auto applied = tuner::applySettings(*base, *settings);
    if (applied.isOk() && engine::toToml(applied->get()) == baseToml) return t.settings;
  }
  return {};
}

// Marks chart points (each candidate's furthest measured trial) and the Pareto front among them.
void markPoints(std::vector<TunerTrialRow>& rows) {
  std::map<std::string, size_t> furthest;
  for (size_t i = 0; i < rows.size(); ++i) {
    auto [it, added] = furthest.emplace(rows[i].trial.settings, i);
    if (!added && rows[i].trial.rung > rows[it->second].trial.rung) it->second = i;
  }
  std::vector<size_t> pointRows;
  std::vector<TunerPoint> points;
  for (const auto& [settings, i] : furthest) {
    if (!measured(rows[i].trial)) continue;
    rows[i].isPoint = true;
    pointRows.push_back(i);
    points.push_back({rows[i].trial.stepTimeMs, double(rows[i].trial.peakBytes)});
  }
  for (size_t p : paretoFront(points)) rows[pointRows[p]].onPareto = true;
}

QString percent(double ratio) {
  return QString::number((ratio - 1.0) * 100.0, 'f', 1) + "%";
}

QString mib(double bytes) {
  return QString::number(bytes / (1 << 20), 'f', 2) + " MiB";
}

// How a measured trial compares with the pick on step time and peak memory.
QString comparison(const tuner::TrialRecord& t, const tuner::TrialRecord& pick,
                   tuner::Objective objective) {
  QStringList parts;
  const QString pickName = QString("the pick (trial %1)").arg(pick.id);
  if (t.stepTimeMs > pick.stepTimeMs && pick.stepTimeMs > 0) {
    parts << QString("slower by %1 than %2: %3 vs %4 ms per step")
                 .arg(percent(t.stepTimeMs / pick.stepTimeMs), pickName)
                 .arg(t.stepTimeMs, 0, 'f', 2)
                 .arg(pick.stepTimeMs, 0, 'f', 2);
  }
  if (t.peakBytes > pick.peakBytes && pick.peakBytes > 0) {
    parts << QString("%1 more peak memory%2: %3 vs %4")
                 .arg(percent(double(t.peakBytes) / double(pick.peakBytes)),
                      parts.isEmpty() ? " than " + pickName : QString(), mib(double(t.peakBytes)),
                      mib(double(pick.peakBytes)));
  }
  if (!parts.isEmpty()) return parts.join("; ");
  if (t.steps != pick.steps) {
    return QString("measured over %1 steps, %2 over %3; the longer measurement ranks first")
        .arg(t.steps)
        .arg(pickName)
        .arg(pick.steps);
  }
  return objective == tuner::Objective::kPeakMemory
             ? QString("ties with %1 on peak memory; fewer tokens/s").arg(pickName)
             : QString("not faster than %1 (ties are broken by trial id)").arg(pickName);
}

}  // namespace

bool exportable(tuner::Verdict verdict) {
  return verdict == tuner::Verdict::kOk || verdict == tuner::Verdict::kPruned;
}

QString settingsChange(const std::string& settings, const std::string& baseSettings) {
  auto mine = tuner::parseSettingsText(settings);
  auto theirs = tuner::parseSettingsText(baseSettings);
  if (!mine.isOk() || !theirs.isOk() || mine->size() != theirs->size()) {
    return QString::fromStdString(settings);
  }
  tuner::Settings diff;
  for (size_t i = 0; i < mine->size(); ++i) {
    if ((*mine)[i].first != (*theirs)[i].first) return QString::fromStdString(settings);
    if ((*mine)[i] != (*theirs)[i]) diff.push_back((*mine)[i]);
  }
  return diff.empty() ? QString("(base)") : QString::fromStdString(tuner::settingsText(diff));
}

std::vector<size_t> paretoFront(const std::vector<TunerPoint>& points) {
  std::vector<size_t> order(points.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (points[a].stepTimeMs != points[b].stepTimeMs) {
      return points[a].stepTimeMs < points[b].stepTimeMs;
    }
    return points[a].peakBytes < points[b].peakBytes;
  });
  // Sweep groups of equal step time in ascending order: a point is on the front when its peak is
  // the smallest of its group and below every peak at a strictly smaller step time.
  std::vector<size_t> front;
  double bestPeakBefore = std::numeric_limits<double>::infinity();
  for (size_t g = 0; g < order.size();) {
    size_t end = g;
    while (end < order.size() && points[order[end]].stepTimeMs == points[order[g]].stepTimeMs) {
      ++end;
    }
    const double groupPeak = points[order[g]].peakBytes;
    for (size_t k = g; k < end && points[order[k]].peakBytes == groupPeak; ++k) {
      if (groupPeak < bestPeakBefore) front.push_back(order[k]);
    }
    bestPeakBefore = std::min(bestPeakBefore, groupPeak);
    g = end;
  }
  return front;
}

QString whyNotText(const TunerStudy& study, int row) {
  if (row < 0 || size_t(row) >= study.rows.size()) return {};
  const TunerTrialRow& r = study.rows[size_t(row)];
  const tuner::TrialRecord& t = r.trial;
  const QString verdict = tuner::verdictName(t.verdict);
  if (r.isPick) {
    return QString("trial %1 is the pick: the best passing trial by %2")
        .arg(t.id)
        .arg(tuner::objectiveName(study.objective));
  }
  if (!exportable(t.verdict)) {
    return QString("trial %1 cannot be picked: %2%3")
        .arg(t.id)
        .arg(verdict, t.message.empty() ? QString() : ": " + QString::fromStdString(t.message));
  }
  if (study.pickRow < 0) return QString("no trial passed, so there is no pick to compare with");
  const tuner::TrialRecord& pick = study.rows[size_t(study.pickRow)].trial;
  QString prefix = QString("trial %1: ").arg(t.id);
  if (t.settings == pick.settings) {
    return prefix + QString(
                        "an earlier rung (%1 steps) of the pick's candidate (trial %2, %3 "
                        "steps)")
                        .arg(t.steps)
                        .arg(pick.id)
                        .arg(pick.steps);
  }
  if (!r.isPoint) prefix += QString("an earlier rung (%1 steps) of its candidate; ").arg(t.steps);
  if (t.verdict == tuner::Verdict::kPruned) {
    prefix += QString("pruned at rung %1 (successive halving did not promote it); ").arg(t.rung);
  }
  return prefix + comparison(t, pick, study.objective);
}

Result<TunerStudy> loadTunerStudy(const std::string& path) {
  MOEWB_ASSIGN_OR_RETURN(auto store, tuner::StudyStore::open(path, false));
  MOEWB_ASSIGN_OR_RETURN(std::vector<tuner::TrialRecord> trials, store->trials());
  TunerStudy study;
  study.path = path;
  study.info = store->info();
  auto objective = tuner::parseObjective(study.info.objective);
  if (!objective.isOk()) {
    return dataLoss(path + ": the study's objective '" + study.info.objective +
                    "' is not one this workbench knows (tokens_per_s, peak_memory)");
  }
  study.objective = *objective;
  study.baseSettings = baseSettingsOf(study.info, path, trials);
  int64_t pickId = -1;
  for (const tuner::StudyRow& row : tuner::rankTrials(trials, study.objective, "")) {
    if (row.trial.verdict == tuner::Verdict::kOk) {
      pickId = row.trial.id;
      break;
    }
  }
  for (tuner::TrialRecord& t : trials) {
    TunerTrialRow row;
    row.changes = settingsChange(t.settings, study.baseSettings);
    row.isBase = !study.baseSettings.empty() && t.settings == study.baseSettings;
    row.isPick = t.id == pickId;
    if (row.isPick) study.pickRow = int(study.rows.size());
    row.trial = std::move(t);
    study.rows.push_back(std::move(row));
  }
  markPoints(study.rows);
  return study;
}

Status writeStudyExport(const std::string& studyPath, int64_t trialId, tuner::ExportFormat format,
                        const std::string& outPath) {
  std::error_code ec;
  if (std::filesystem::equivalent(studyPath, outPath, ec)) {
    return invalidArgument("the export would replace the study " + studyPath +
                           "; choose another file");
  }
  MOEWB_ASSIGN_OR_RETURN(tuner::StudyExport exported,
                         tuner::exportStudyTrial(studyPath, trialId, format));
  const std::string tmp = outPath + ".moewb-tmp";
  {
    std::ofstream file(tmp, std::ios::binary | std::ios::trunc);
    file << exported.text.text;
    if (!file.flush()) {
      std::filesystem::remove(tmp, ec);
      return internalError("cannot write " + outPath);
    }
  }
  std::filesystem::rename(tmp, outPath, ec);
  if (ec) {
    std::filesystem::remove(tmp, ec);
    return internalError("cannot write " + outPath + ": " + ec.message());
  }
  return Status();
}

TunerStudyModel::TunerStudyModel(QObject* parent) : QAbstractTableModel(parent) {}

void TunerStudyModel::setStudy(TunerStudy study) {
  beginResetModel();
  m_study = std::move(study);
  endResetModel();
}

void TunerStudyModel::clear() {
  setStudy(TunerStudy{});
}

int TunerStudyModel::rowOfTrial(int64_t trialId) const {
  for (size_t i = 0; i < m_study.rows.size(); ++i) {
    if (m_study.rows[i].trial.id == trialId) return int(i);
  }
  return -1;
}

int TunerStudyModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : int(m_study.rows.size());
}

int TunerStudyModel::columnCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : kColumnCount;
}

QVariant TunerStudyModel::display(const TunerTrialRow& row, int column) const {
  const tuner::TrialRecord& t = row.trial;
  const bool ran = measured(t) || t.verdict == tuner::Verdict::kPrecisionFail;
  switch (column) {
    case kTrial:
      return row.isPick ? QString("%1 (pick)").arg(t.id) : QString::number(t.id);
    case kSettings:
      return row.changes;
    case kVerdict:
      return QString(tuner::verdictName(t.verdict));
    case kSteps:
      return ran ? QVariant(qint64(t.steps)) : QVariant(QString("-"));
    case kStepTime:
      return ran ? QString::number(t.stepTimeMs, 'f', 2) : QString("-");
    case kPredictedStepTime:
      return t.predictedStepTimeMs > 0 ? QString::number(t.predictedStepTimeMs, 'f', 2)
                                       : QString("-");
    case kTokens:
      return ran ? QString::number(t.tokensPerSecond, 'f', 0) : QString("-");
    case kPeak:
      return ran ? QString::number(double(t.peakBytes) / (1 << 20), 'f', 2) : QString("-");
    case kPredictedPeak:
      return t.predictedPeakBytes > 0
                 ? QString::number(double(t.predictedPeakBytes) / (1 << 20), 'f', 2)
                 : QString("-");
    case kReason:
      return QString::fromStdString(t.message);
  }
  return {};
}

QVariant TunerStudyModel::sortValue(const TunerTrialRow& row, int column) const {
  const tuner::TrialRecord& t = row.trial;
  switch (column) {
    case kTrial:
      return qint64(t.id);
    case kSteps:
      return qint64(t.steps);
    case kStepTime:
      return t.stepTimeMs;
    case kPredictedStepTime:
      return t.predictedStepTimeMs;
    case kTokens:
      return t.tokensPerSecond;
    case kPeak:
      return qint64(t.peakBytes);
    case kPredictedPeak:
      return qint64(t.predictedPeakBytes);
    default:
      return display(row, column);
  }
}

QVariant TunerStudyModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid() || index.row() >= rowCount() || index.column() >= kColumnCount) return {};
  const TunerTrialRow& row = m_study.rows[size_t(index.row())];
  switch (role) {
    case Qt::DisplayRole:
      return display(row, index.column());
    case kSortRole:
      return sortValue(row, index.column());
    case kPickRole:
      return row.isPick;
    case kTrialIdRole:
      return qint64(row.trial.id);
    case Qt::ToolTipRole:
      return index.column() == kSettings ? QString::fromStdString(row.trial.settings)
                                         : whyNotText(m_study, index.row());
    case Qt::FontRole:
      if (row.isPick) {
        QFont font;
        font.setBold(true);
        return font;
      }
      return {};
    case Qt::TextAlignmentRole:
      if (index.column() >= kSteps && index.column() <= kPredictedPeak) {
        return int(Qt::AlignRight | Qt::AlignVCenter);
      }
      return {};
  }
  return {};
}

QVariant TunerStudyModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation != Qt::Horizontal || role != Qt::DisplayRole) return {};
  static const char* const kNames[kColumnCount] = {
      "Trial",          "Settings (change from base)", "Verdict",    "Steps",
      "Step time (ms)", "Predicted (ms)",              "Tokens/s",   "Peak (MiB)",
      "Predicted (MiB)", "Reason"};
  return section >= 0 && section < kColumnCount ? QString(kNames[section]) : QVariant();
}

}  // namespace moewb::gui
