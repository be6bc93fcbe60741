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
// "Apply live" sends the same trial's settings to the run in progress in the main window (the
// RunController the Live control dock uses, setRunController) as ONE config patch
// (engine::TrainerCommand kApplyPatch, source "tuner"), which the trainer takes at the next step
// boundary (at once while paused) and records as config_change rows with source "tuner". Only
// the settings that differ from the run's current config (its start config with the trace's
// config_change rows applied) and that the engine lists as live are sent (tuner_live_plan.h);
// the others are listed in the window as needing a restart ("needs a restart: parallel.ep = 2
// (the run has 1)") and stay exportable. On a run of several in-process ranks the parallel
// layout (parallel.ep, .fsdp, .replicate, .a2a_chunks) is live: sent, and re-sharded by the run.
// The trainer's refusal of the patch (naming the key and what is accepted) is shown in the
// window; a refused patch changes nothing. The button is
// enabled only while a run is in progress and a trial can be applied; its tooltip says why not.
// The reply is polled from a 20 ms timer, so the window never blocks.
// A file that is not a study, a damaged study or a study of a newer schema is refused by the
// tuner's study reader: the window shows its message in plain words (userMessage), shows no
// trials and writes nothing; the file is only ever opened read-only.
// addTunerActions() adds File > "Open study..." to the main window's menu; windows opened by it
// or by openStudyWindow on a MainWindow follow that window's RunController. GUI thread only.
#pragma once

#include <QString>
#include <QStringList>
#include <QWidget>
#include <future>
#include <optional>

#include "moewb/base/status.h"
#include "moewb/gui/tuner_live_plan.h"
#include "moewb/gui/tuner_study_model.h"

class QBoxLayout;
class QLabel;
class QMenu;
class QPushButton;
class QSortFilterProxyModel;
class QTableView;
class QTimer;

namespace moewb::gui {

class RunController;
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

  // Follows `runner`'s runs (started / finished) for Apply live and posts the patch through it.
  // Not owned; nullptr: Apply live stays disabled.
  void setRunController(RunController* runner);
  // What Apply live would do now with exportTrial() on the run in progress: kFailedPrecondition
  // when no run goes on or no trial can be applied, the trace's or the plan's errors otherwise.
  // Reads the run's trace (its config_change rows) on the calling thread: milliseconds.
  Result<LiveRetunePlan> livePlan() const;
  // Sends livePlan()'s live settings as ONE patch with source "tuner"; the reply arrives later
  // (liveApplyFinished). Errors (nothing sent): livePlan()'s, kFailedPrecondition while an
  // earlier patch waits for its reply or when every live setting already matches the run.
  Status applyLive();
  // Recomputes the Apply live line and button from the run's trace now (the main window calls it
  // when its document reads new config_change rows, e.g. from the Live control dock). It is also
  // recomputed on a new selection, a run's start and end, and a patch's reply.
  void refreshLive() { updateLive(); }
  // The Apply live line: the plan while a run goes on, then the outcome of the last patch.
  QString liveText() const;
  QPushButton* applyLiveButton() const { return m_applyLive; }
  // True while a patch sent by Apply live waits for the trainer's reply.
  bool liveApplyPending() const { return m_livePending.valid(); }

  TunerStudyModel* model() const { return m_model; }
  QTableView* table() const { return m_table; }
  TunerScatterView* chart() const { return m_chart; }
  TunerPredictionView* predictionChart() const { return m_prediction; }
  QString headerText() const;
  QString whyNotLine() const;
  // The message shown for a refused file ("" when a study is shown).
  QString errorText() const { return m_error; }

 signals:
  // The trainer's reply to a patch sent by Apply live: accepted, or refused with its message.
  void liveApplyFinished(bool ok, const QString& error);

 private:
  void exportDialog(tuner::ExportFormat format);
  // Apply live (tuner_window_live.cpp).
  void buildLive(QBoxLayout* buttons, QBoxLayout* outer);
  void updateLive();
  void pollLiveReply();
  void setLiveText(const QString& text, bool error);
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
  RunController* m_runner = nullptr;
  QPushButton* m_applyLive = nullptr;
  QLabel* m_live = nullptr;
  QTimer* m_liveTimer = nullptr;      // polls m_livePending every 20 ms while it waits
  std::future<Status> m_livePending;  // the reply to the patch sent last; invalid when none
  int64_t m_liveTrial = -1;           // the trial of that patch
  QStringList m_liveSent;             // its settings, described ("optim.lr = 0.001 (...)")
  QString m_liveOutcome;              // the last outcome, shown until another trial is chosen
  bool m_liveOutcomeError = false;    // m_liveOutcome is a refusal or an error
};

// Adds File > "Open study..." to `file`: a file dialog, then a new TunerWindow (deleted when
// closed) with `parent` showing the chosen study (or its error).
void addTunerActions(QMenu* file, QWidget* parent);

// Opens a new TunerWindow (deleted when closed, child window of `parent`) on the study at `path`
// and shows it; the window shows the error when the file is refused. For the command line.
TunerWindow* openStudyWindow(const QString& path, QWidget* parent);

}  // namespace moewb::gui
