// The Tuner window's data: a tuning study (a `moewb tune` study file) read once through the tuner
// library's StudyStore (read-only; a file that is not a study, a damaged study or a study of
// another schema is refused with the store's message and left untouched), and TunerStudyModel,
// the table of its trials (one row per tuner_trial row, id order; sort with a proxy on
// kSortRole).
//
// What loadTunerStudy adds to the stored rows: each trial's settings that differ from the base
// config's (the base candidate is the first trial whose settings leave the study's stored base
// config unchanged, i.e. every knob at the base value), the pick (the best passing trial by the
// study's objective: the trial `moewb tune --export` exports when no --trial is given), the chart
// points (each candidate's furthest-rung measured trial: what the final table ranks) and which of
// them are on the Pareto front of step time vs peak memory. whyNotText explains, for any trial,
// why it is not the pick. writeStudyExport writes a trial through the tuner's exporters.
// Costs: loading is O(trials) config applications plus the store's reads (milliseconds for
// studies of hundreds of trials); the model's calls are O(1) per cell. GUI thread only for the
// model; the free functions are pure or touch only the files they name.
#pragma once

#include <QAbstractTableModel>
#include <QString>
#include <cstdint>
#include <string>
#include <vector>

#include "moewb/base/status.h"
#include "moewb/tuner/exports.h"
#include "moewb/tuner/study.h"
#include "moewb/tuner/study_store.h"

namespace moewb::gui {

struct TunerTrialRow {
  tuner::TrialRecord trial;
  QString changes;        // settings that differ from the base, "k=v,..."; "(base)" for the base
  bool isBase = false;    // the base config's candidate (any rung)
  bool isPick = false;    // the best passing trial (one row at most)
  bool isPoint = false;   // a chart point: its candidate's furthest-rung trial, measured (ok or
                          // pruned, step time > 0)
  bool onPareto = false;  // a chart point no other point beats on both step time and peak
};

struct TunerStudy {
  std::string path;       // as opened
  tuner::StudyInfo info;  // the study's stored description
  tuner::Objective objective = tuner::Objective::kTokensPerSecond;
  std::string baseSettings;         // the base candidate's settings text ("" when none is known)
  std::vector<TunerTrialRow> rows;  // every trial, id order
  int pickRow = -1;                 // index into rows; -1 when no trial passed
};

// Reads the study at `path` (read-only). Errors: StudyStore::open's (kNotFound, kDataLoss for a
// file that is not a study or is damaged, kInvalidArgument for another schema version) and its
// row reads; the file is never modified.
Result<TunerStudy> loadTunerStudy(const std::string& path);

// The settings of `settings` that differ from `baseSettings` (both "k=v,..." over the same knobs),
// "(base)" when none does; `settings` itself when either cannot be parsed or the knobs differ.
QString settingsChange(const std::string& settings, const std::string& baseSettings);

// A chart point: step time (ms) and peak memory (bytes), both lower = better.
struct TunerPoint {
  double stepTimeMs = 0;
  double peakBytes = 0;
};
// Indices of the points that no other point dominates (<= on both, < on one), by ascending step
// time (ties by peak). Identical points are all on the front. O(n log n).
std::vector<size_t> paretoFront(const std::vector<TunerPoint>& points);

// One line on why trial row `row` of `study` is not the pick: "the pick", the verdict's reason for
// trials that cannot be picked, and for measured ones how much slower (and how much more memory)
// than the pick, or that it is an earlier rung or was pruned. "" for a row out of range.
QString whyNotText(const TunerStudy& study, int row);

// Whether a trial of this verdict can be exported (ok and pruned: measured and passed the gate).
bool exportable(tuner::Verdict verdict);

// Writes trial `trialId` of the study at `studyPath` in `format` to `outPath` through
// tuner::exportStudyTrial: the same bytes `moewb tune --export STUDY --format F --trial ID -o
// OUT` writes. The file is written beside `outPath` and renamed over it (an existing file is
// replaced; nothing half-written is left). kInvalidArgument when `outPath` is the study itself;
// the exporter's errors (kNotFound, kFailedPrecondition for an unexportable verdict, the study's
// errors); kInternal when the file cannot be written. The study is only read.
Status writeStudyExport(const std::string& studyPath, int64_t trialId, tuner::ExportFormat format,
                        const std::string& outPath);

class TunerStudyModel : public QAbstractTableModel {
  Q_OBJECT

 public:
  enum Column {
    kTrial,
    kSettings,
    kVerdict,
    kSteps,
    kStepTime,
    kPredictedStepTime,  // the cost model's step time for the trial's settings ("-": none)
    kTokens,
    kPeak,
    kPredictedPeak,      // the cost model's peak per rank
    kReason,
    kColumnCount
  };
  // Numbers for numeric columns, text otherwise (a proxy's sortRole).
  static constexpr int kSortRole = Qt::UserRole + 1;
  // The row's TunerTrialRow::isPick (bool), on every column.
  static constexpr int kPickRole = Qt::UserRole + 2;
  // The trial id (qint64), on every column.
  static constexpr int kTrialIdRole = Qt::UserRole + 3;

  explicit TunerStudyModel(QObject* parent = nullptr);

  // Replaces the study shown (a model reset).
  void setStudy(TunerStudy study);
  // Shows no study.
  void clear();
  const TunerStudy& study() const { return m_study; }
  // The row of trial `trialId`, or -1.
  int rowOfTrial(int64_t trialId) const;

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation,
                      int role = Qt::DisplayRole) const override;

 private:
  QVariant display(const TunerTrialRow& row, int column) const;
  QVariant sortValue(const TunerTrialRow& row, int column) const;

  TunerStudy m_study;
};

}  // namespace moewb::gui
