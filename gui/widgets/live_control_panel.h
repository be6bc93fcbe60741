// LiveControlPanel: the "Live control" dock, which steers a run started from this window while
// it goes on (DESIGN.md: GUI -> validated config patch -> engine command queue -> applied at the
// next step boundary -> a config_change row marks it).
//
// Pause / Resume / Step / Stop post engine::TrainerCommand kPause, kResume, kStep, kStop through
// the RunController; their enabled state follows the trainer's paused() (polled every 100 ms) and
// the commands still waiting for a reply. Below them, one editor per key of
// run::TrainingRun::liveKeys() and of the parallel layout (engine::Trainer::layoutKeys(): enabled
// only for a run of several in-process ranks, which re-shards at the step boundary; built from
// those lists, typed and ranged from
// engine::configKeys(): a line edit whose validator takes integers, floats such as "1e-3", or any
// string, with the key's choices offered as completions) shows the current value. An edited value
// is tinted; one outside the key's typed bounds (engine::ConfigKeyInfo min / max, whole numbers,
// choices; true / false for booleans) is tinted red and its tooltip names what is accepted, but
// it is still sent: the engine's validateConfig is the one judge, rules between keys included.
// Apply sends ONE kApplyPatch with every edited key (source "gui"); Revert restores the current
// values.
//
// Replies are std::futures polled from a 20 ms timer while any is pending, so the UI never
// blocks. The trainer handles commands at the next step boundary, at once while paused. Each
// reply goes to the panel's result line and to message() (the main window's status bar).
// Current values start from the run's config and follow every accepted patch and the trace's
// config_change rows (from any source) while the document shows this run's trace.
// The controls are enabled only while the RunController has a run in progress. GUI thread only.
// Files: live_control_panel.cpp (layout, commands, replies, state), live_control_panel_editors.cpp
// (the per-key editors and their values).
#pragma once

#include <QString>
#include <QStringList>
#include <QWidget>
#include <future>
#include <string>
#include <vector>

#include "moewb/base/status.h"
#include "moewb/engine/trainer.h"
#include "moewb/gui/live_settings.h"

class QGridLayout;
class QHBoxLayout;
class QLabel;
class QLineEdit;
class QPushButton;
class QTimer;

namespace moewb::gui {

class RunController;
class TraceDocument;

class LiveControlPanel : public QWidget {
  Q_OBJECT

 public:
  explicit LiveControlPanel(QWidget* parent = nullptr);
  ~LiveControlPanel() override;

  // Follows `runner`'s runs (started / finished) and sends commands through it. Not owned.
  void setRunController(RunController* runner);
  // Reads the step count and the config_change rows of `document` while it shows the run's
  // trace. Not owned.
  void setDocument(TraceDocument* document);

  // The live keys shown, in liveKeys() order.
  QStringList keys() const;
  // The editor of `key`, or nullptr for a key that is not live.
  QLineEdit* editor(const QString& key) const;
  // Puts `text` into the editor of `key` as if typed (the validator is not asked, so tests and
  // scripts can try refused values); false for an unknown key.
  bool setValueText(const QString& key, const QString& text);
  // Current value of `key` as shown ("0.003"), "" when unknown.
  QString currentValue(const QString& key) const;
  // True when the editor of `key` holds an edited value outside the key's typed bounds (tinted
  // red); false for an unknown key.
  bool isFlagged(const QString& key) const;
  // "key=value" (TOML value) for every edited key, in key order: what Apply would send.
  QStringList editedAssignments() const;
  // The last result line ("Applied ...", "Refused: ...").
  QString resultText() const;
  // Commands sent whose reply has not arrived yet.
  int pendingCount() const { return int(m_pending.size()); }
  // True when the trainer reported paused at the last poll.
  bool isPaused() const { return m_paused; }

  QPushButton* pauseButton() const { return m_pause; }
  QPushButton* resumeButton() const { return m_resume; }
  QPushButton* stepButton() const { return m_step; }
  QPushButton* stopButton() const { return m_stop; }
  QPushButton* applyButton() const { return m_apply; }
  QPushButton* revertButton() const { return m_revert; }

 public slots:
  void pause();
  void resume();
  void stepOnce();
  void stop();
  // Sends one kApplyPatch with every edited key; no-op when nothing is edited or no run goes on.
  void apply();
  // Puts the current values back into every editor.
  void revert();

 signals:
  // A one-line outcome for the status bar; `error` for a refused or failed command.
  void message(const QString& text, bool error);
  // A reply arrived: the command's kind (engine::TrainerCommand::Kind as int), whether it was
  // accepted, and the refusal message ("" when accepted).
  void commandFinished(int kind, bool ok, const QString& error);

 private:
  // One live key's row: label, editor and current value.
  struct KeyEditor {
    QString key;           // "optim.lr"
    QString type;          // "integer", "float", "string", "boolean" (ConfigKeyInfo::type)
    KeyBounds bounds;      // engine::ConfigKeyInfo's typed bounds (true / false for booleans)
    QString acceptedText;  // as the engine words it
    bool flagged = false;  // edited and outside `bounds`
    QString description;
    bool layout = false;   // a parallel layout key: live only on a run of several ranks
    QLabel* label = nullptr;
    QLineEdit* line = nullptr;
    QLabel* now = nullptr;
    std::string currentToml;  // current value as TOML text
  };
  struct Pending {
    engine::TrainerCommand::Kind kind;
    QStringList assignments;  // for kApplyPatch
    std::future<Status> reply;
  };

  void buildLayout();
  QHBoxLayout* buildButtons();
  void buildEditors(QGridLayout* grid);
  void post(engine::TrainerCommand::Kind kind, QStringList assignments = {});
  void pollReplies();
  void finishCommand(Pending& pending, const Status& status);
  void pollState();
  void updateControls();
  void onRunStarted();
  void onRunFinished();
  void onChangeRowsInserted(int first, int last);
  void loadChangeRows(int first, int last);
  bool documentShowsRun() const;

  // Editors (live_control_panel_editors.cpp).
  KeyEditor* find(const QString& key);
  const KeyEditor* find(const QString& key) const;
  // Sets the current value of `e`; the editor follows unless the user edited it to something
  // else (`resetEditor` discards such an edit, for a new run).
  void setCurrent(KeyEditor& e, const std::string& toml, bool resetEditor);
  void showCurrentInEditor(KeyEditor& e);
  bool isEdited(const KeyEditor& e) const;
  // The edited value as TOML text for an assignment ("" when not edited).
  std::string editedToml(const KeyEditor& e) const;
  void updateEditorLook(KeyEditor& e);
  void onEditorChanged();
  void setResult(const QString& text, bool error);

  RunController* m_runner = nullptr;
  TraceDocument* m_document = nullptr;
  QLabel* m_state = nullptr;
  QPushButton* m_pause = nullptr;
  QPushButton* m_resume = nullptr;
  QPushButton* m_step = nullptr;
  QPushButton* m_stop = nullptr;
  QPushButton* m_apply = nullptr;
  QPushButton* m_revert = nullptr;
  QWidget* m_controls = nullptr;  // buttons and editors, enabled while a run goes on
  QLabel* m_result = nullptr;
  QTimer* m_replyTimer = nullptr;
  QTimer* m_stateTimer = nullptr;
  std::vector<KeyEditor> m_editors;
  std::vector<Pending> m_pending;
  bool m_running = false;
  bool m_paused = false;
  bool m_loadingValues = false;  // editors are being filled by code, not typed
};

}  // namespace moewb::gui
