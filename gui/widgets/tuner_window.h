// TunerWindow: the workbench's Tuner panel, a top-level window beside the main one that shows a
// tuning study (a `moewb tune` study file, docs/TUNER.md): a header naming the study (base config,
// objective, strategy, trials, the pick), the trials table (TunerStudyModel: every trial with its
// settings changed from the base, verdict, steps, step time, tokens/s, peak memory and the
// verdict's reason; sortable; the pick in bold), the chart of step time vs peak memory of the
// measured candidates with the Pareto front and the pick (TunerScatterView), beside it the cost
// model's predicted vs measured step time of the trials that carry a prediction (strategy
// "model"; hidden otherwise; TunerPredictionView), a "why not" line for
// the selected trial (whyNotText) and Export buttons (our TOML, Megatron-Core flags, torchtitan
// TOML) that write the selected trial (the pick when none, or when the selection cannot be
// exported) through the tuner's exporters to a file chosen in a dialog.
// A file that is not a study, a damaged study or a study of a newer schema is refused by the
// tuner's study reader: the window shows its message in plain words (userMessage), shows no
// trials and writes nothing; the file is only ever opened read-only.
// addTunerActions() adds File > "Open study..." to the main window's menu. GUI thread only.
#pragma once

#include <QString>
#include <QWidget>
#include <optional>

#include "moewb/base/status.h"
#include "moewb/gui/tuner_study_model.h"

class QLabel;
class QMenu;
class QPushButton;
class QSortFilterProxyModel;
class QTableView;

namespace moewb::gui {

class TunerPredictionView;
class TunerScatterView;

class TunerWindow : public QWidget {
  Q_OBJECT

 public:
  explicit TunerWindow(QWidget* parent = nullptr);

  // Reads the study at `path` (read-only, on the calling thread: a study is a few hundred rows)
  // and shows it, selecting the pick. On error the window shows the message (the previous study
  // is cleared) and returns the reader's Status (kNotFound, kDataLoss, kInvalidArgument).
  Status openStudy(const QString& path);
  // Writes the trial the Export buttons would export (exportTrial) in `format` to `outPath`
  // (writeStudyExport). kFailedPrecondition when no study or no exportable trial is shown.
  Status exportTo(tuner::ExportFormat format, const QString& outPath);
  // The trial the Export buttons write: the selected trial when it can be exported (ok, pruned),
  // else the pick; none when neither exists.
  std::optional<int64_t> exportTrial() const;
  // Selects trial `trialId` in the table and the chart and updates the "why not" line; false
  // when the study has no such trial.
  bool selectTrial(int64_t trialId);

  TunerStudyModel* model() const { return m_model; }
  QTableView* table() const { return m_table; }
  TunerScatterView* chart() const { return m_chart; }
  TunerPredictionView* predictionChart() const { return m_prediction; }
  QString headerText() const;
  QString whyNotLine() const;
  // The message shown for a refused file ("" when a study is shown).
  QString errorText() const { return m_error; }

 private:
  void exportDialog(tuner::ExportFormat format);
  void onCurrentRowChanged();
  void showStudy();
  int selectedModelRow() const;

  TunerStudyModel* m_model = nullptr;
  QSortFilterProxyModel* m_proxy = nullptr;
  QTableView* m_table = nullptr;
  TunerScatterView* m_chart = nullptr;
  TunerPredictionView* m_prediction = nullptr;
  QLabel* m_header = nullptr;
  QLabel* m_whyNot = nullptr;
  std::vector<QPushButton*> m_exportButtons;
  QString m_error;
};

// Adds File > "Open study..." to `file`: a file dialog, then a new TunerWindow (deleted when
// closed) with `parent` showing the chosen study (or its error).
void addTunerActions(QMenu* file, QWidget* parent);

// Opens a new TunerWindow (deleted when closed, child window of `parent`) on the study at `path`
// and shows it; the window shows the error when the file is refused. For the command line.
TunerWindow* openStudyWindow(const QString& path, QWidget* parent);

}  // namespace moewb::gui
