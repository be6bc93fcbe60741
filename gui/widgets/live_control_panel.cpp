// LiveControlPanel: layout, the command buttons, reply polling and the run state line.
#include "live_control_panel.h"

#include <QFileInfo>
#include <QGridLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QScrollArea>
#include <QStyle>
#include <QTimer>
#include <QVBoxLayout>
#include <algorithm>
#include <chrono>

#include "moewb/base/text.h"
#include "moewb/gui/config_change_model.h"
#include "moewb/gui/trace_document.h"
#include "run_controller.h"
#include "theme.h"

namespace moewb::gui {

namespace {

using Kind = engine::TrainerCommand::Kind;

constexpr int kReplyPollMs = 20;
constexpr int kStatePollMs = 100;

QString kindName(Kind kind) {
  switch (kind) {
    case Kind::kPause:
      return LiveControlPanel::tr("Pause");
    case Kind::kResume:
      return LiveControlPanel::tr("Resume");
    case Kind::kStep:
      return LiveControlPanel::tr("Step");
    case Kind::kStop:
      return LiveControlPanel::tr("Stop");
    case Kind::kApplyPatch:
      return LiveControlPanel::tr("Apply");
  }
  return {};
}

QLabel* dimLabel(const QString& text) {
  auto* label = new QLabel(text);
  QPalette p = label->palette();
  p.setColor(QPalette::WindowText, theme::dimText());
  label->setPalette(p);
  return label;
}

}  // namespace

LiveControlPanel::LiveControlPanel(QWidget* parent) : QWidget(parent) {
  m_replyTimer = new QTimer(this);
  m_replyTimer->setInterval(kReplyPollMs);
  connect(m_replyTimer, &QTimer::timeout, this, &LiveControlPanel::pollReplies);
  m_stateTimer = new QTimer(this);
  m_stateTimer->setInterval(kStatePollMs);
  connect(m_stateTimer, &QTimer::timeout, this, &LiveControlPanel::pollState);
  buildLayout();
  updateControls();
}

LiveControlPanel::~LiveControlPanel() = default;

void LiveControlPanel::buildLayout() {
  auto* outer = new QVBoxLayout(this);
  outer->setContentsMargins(10, 8, 10, 8);
  outer->setSpacing(8);
  m_state = new QLabel;
  m_state->setTextFormat(Qt::RichText);
  outer->addWidget(m_state);

  m_controls = new QWidget;
  auto* controls = new QVBoxLayout(m_controls);
  controls->setContentsMargins(0, 0, 0, 0);
  controls->setSpacing(8);
  controls->addLayout(buildButtons());

  auto* heading = new QLabel(tr("<b>Settings</b>"));
  heading->setToolTip(tr("The keys a run can change while it goes on"));
  controls->addWidget(heading);
  auto* grid = new QGridLayout;
  grid->setHorizontalSpacing(10);
  grid->setVerticalSpacing(4);
  buildEditors(grid);
  auto* gridHost = new QWidget;
  auto* gridOuter = new QVBoxLayout(gridHost);
  gridOuter->setContentsMargins(0, 0, 4, 0);
  gridOuter->addLayout(grid);
  gridOuter->addStretch(1);
  auto* scroll = new QScrollArea;
  scroll->setWidget(gridHost);
  scroll->setWidgetResizable(true);
  scroll->setFrameShape(QFrame::NoFrame);
  scroll->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
  // A few rows at least (the list scrolls), so the window fits 1280x720 with every dock.
  scroll->setMinimumHeight(std::min(gridHost->sizeHint().height(), 120));
  controls->addWidget(scroll, 1);

  auto* applyRow = new QHBoxLayout;
  auto* hint = dimLabel(tr("Takes effect at the next step;\nat once while paused."));
  applyRow->addWidget(hint, 1);
  m_revert = new QPushButton(tr("Revert"));
  m_revert->setToolTip(tr("Put the current values back into the editors"));
  connect(m_revert, &QPushButton::clicked, this, &LiveControlPanel::revert);
  m_apply = new QPushButton(style()->standardIcon(QStyle::SP_DialogApplyButton), tr("Apply"));
  m_apply->setToolTip(tr("Send every edited setting as one patch"));
  m_apply->setDefault(true);
  connect(m_apply, &QPushButton::clicked, this, &LiveControlPanel::apply);
  applyRow->addWidget(m_revert);
  applyRow->addWidget(m_apply);
  controls->addLayout(applyRow);
  outer->addWidget(m_controls, 1);

  m_result = new QLabel;
  m_result->setWordWrap(true);
  m_result->setTextInteractionFlags(Qt::TextSelectableByMouse);
  m_result->setMinimumHeight(QFontMetrics(font()).height() * 2 + 4);
  m_result->setAlignment(Qt::AlignLeft | Qt::AlignTop);
  outer->addWidget(m_result);
}

QHBoxLayout* LiveControlPanel::buildButtons() {
  auto* buttons = new QHBoxLayout;
  buttons->setSpacing(6);
  auto button = [&](const QString& text, QStyle::StandardPixmap icon, const QString& tip,
                    void (LiveControlPanel::*slot)()) {
    auto* b = new QPushButton(style()->standardIcon(icon), text);
    b->setToolTip(tip);
    connect(b, &QPushButton::clicked, this, slot);
    buttons->addWidget(b);
    return b;
  };
  m_pause =
      button(tr("Pause"), QStyle::SP_MediaPause,
             tr("Pause between steps (after the step in progress)"), &LiveControlPanel::pause);
  m_resume = button(tr("Resume"), QStyle::SP_MediaPlay, tr("Continue training"),
                    &LiveControlPanel::resume);
  m_step = button(tr("Step"), QStyle::SP_MediaSkipForward,
                  tr("Run exactly one step, then stay paused"), &LiveControlPanel::stepOnce);
  m_stop = button(tr("Stop"), QStyle::SP_MediaStop, tr("End the run after the step in progress"),
                  &LiveControlPanel::stop);
  return buttons;
}

void LiveControlPanel::setRunController(RunController* runner) {
  if (m_runner) disconnect(m_runner, nullptr, this, nullptr);
  m_runner = runner;
  if (m_runner) {
    connect(m_runner, &RunController::started, this, &LiveControlPanel::onRunStarted);
    connect(m_runner, &RunController::finished, this, &LiveControlPanel::onRunFinished);
    if (m_runner->isRunning()) onRunStarted();
  }
  updateControls();
}

void LiveControlPanel::setDocument(TraceDocument* document) {
  if (m_document) disconnect(m_document->configChangeModel(), nullptr, this, nullptr);
  m_document = document;
  if (!m_document) return;
  ConfigChangeModel* changes = m_document->configChangeModel();
  connect(changes, &QAbstractItemModel::rowsInserted, this,
          [this](const QModelIndex&, int first, int last) { onChangeRowsInserted(first, last); });
  connect(changes, &QAbstractItemModel::modelReset, this,
          [this] { onChangeRowsInserted(0, m_document->configChangeModel()->rowCount() - 1); });
}

bool LiveControlPanel::documentShowsRun() const {
  if (!m_document || !m_runner || !m_document->isOpen()) return false;
  return QFileInfo(m_document->path()) == QFileInfo(m_runner->tracePath());
}

void LiveControlPanel::onRunStarted() {
  m_running = true;
  m_paused = false;
  const std::map<std::string, std::string> values =
      tomlKeyValues(engine::toToml(m_runner->startConfig()));
  // The parallel layout is live only where the engine says so for this run (several in-process
  // ranks, which re-shard their state at the step boundary); on one rank there is nothing to
  // re-shard.
  const std::vector<std::string> live = engine::Trainer::liveKeysFor(m_runner->startConfig());
  for (KeyEditor& e : m_editors) {
    auto it = values.find(e.key.toStdString());
    setCurrent(e, it == values.end() ? std::string() : it->second, true);
    if (!e.layout) continue;
    const bool reshards = std::find(live.begin(), live.end(), e.key.toStdString()) != live.end();
    e.line->setEnabled(reshards);
    e.line->setToolTip(reshards ? tr("Applying it re-shards the weights, gradients and optimizer "
                                     "state into the new layout at the step boundary")
                                : tr("Live only on a run of several in-process ranks "
                                     "(parallel.world_size > 1); this run has one"));
  }
  setResult({}, false);
  m_stateTimer->start();
  updateControls();
}

void LiveControlPanel::onRunFinished() {
  m_running = false;
  m_paused = false;
  m_stateTimer->stop();
  updateControls();
}

void LiveControlPanel::onChangeRowsInserted(int first, int last) {
  if (!m_running || !documentShowsRun()) return;
  loadChangeRows(first, last);
}

void LiveControlPanel::loadChangeRows(int first, int last) {
  const auto& rows = m_document->configChangeModel()->rows();
  for (int i = std::max(first, 0); i <= last && size_t(i) < rows.size(); ++i) {
    const storage::ConfigChangeRow& row = rows[size_t(i)];
    if (KeyEditor* e = find(QString::fromStdString(row.key))) setCurrent(*e, row.newValue, false);
  }
}

void LiveControlPanel::pause() {
  post(Kind::kPause);
}
void LiveControlPanel::resume() {
  post(Kind::kResume);
}
void LiveControlPanel::stepOnce() {
  post(Kind::kStep);
}
void LiveControlPanel::stop() {
  post(Kind::kStop);
}

void LiveControlPanel::apply() {
  const QStringList assignments = editedAssignments();
  if (assignments.isEmpty() || !m_running) return;
  post(Kind::kApplyPatch, assignments);
  setResult(tr("Sending %1 ...").arg(assignments.join(QStringLiteral(", "))), false);
}

void LiveControlPanel::post(Kind kind, QStringList assignments) {
  if (!m_runner || !m_running) return;
  engine::TrainerCommand command;
  command.kind = kind;
  command.source = "gui";
  for (const QString& a : assignments) command.assignments.push_back(a.toStdString());
  m_pending.push_back({kind, std::move(assignments), m_runner->post(std::move(command))});
  m_replyTimer->start();
  updateControls();
}

void LiveControlPanel::pollReplies() {
  for (size_t i = 0; i < m_pending.size();) {
    Pending& pending = m_pending[i];
    if (pending.reply.wait_for(std::chrono::seconds(0)) != std::future_status::ready) {
      ++i;
      continue;
    }
    Status status = Status::ok();
    try {
      status = pending.reply.get();
    } catch (const std::future_error&) {
      status = failedPrecondition("the run ended before the command was handled");
    }
    Pending done = std::move(pending);
    m_pending.erase(m_pending.begin() + ptrdiff_t(i));
    finishCommand(done, status);
  }
  if (m_pending.empty()) m_replyTimer->stop();
  pollState();
}

void LiveControlPanel::finishCommand(Pending& pending, const Status& status) {
  const QString error = status.isOk() ? QString() : QString::fromStdString(status.message());
  if (pending.kind == Kind::kApplyPatch) {
    if (status.isOk()) {
      QStringList changed;
      for (const QString& a : pending.assignments) {
        const QString key = a.section(QLatin1Char('='), 0, 0);
        const std::string value = a.section(QLatin1Char('='), 1).toStdString();
        KeyEditor* e = find(key);
        if (!e) continue;
        changed << tr("%1 %2 -> %3")
                       .arg(key, formatConfigValue(e->currentToml), formatConfigValue(value));
        setCurrent(*e, value, false);
      }
      const QString text =
          tr("Applied (from the next step): %1").arg(changed.join(QStringLiteral(", ")));
      setResult(text, false);
      emit message(text, false);
    } else {
      const QString text = tr("Refused: %1").arg(error);
      setResult(text, true);
      emit message(text, true);
    }
  } else if (!status.isOk()) {
    const QString text = tr("%1 failed: %2").arg(kindName(pending.kind), error);
    setResult(text, true);
    emit message(text, true);
  } else {
    const QString text = pending.kind == Kind::kPause    ? tr("Paused.")
                         : pending.kind == Kind::kResume ? tr("Resumed.")
                         : pending.kind == Kind::kStep   ? tr("Running one step.")
                                                       : tr("Stopping after the step in progress.");
    emit message(text, false);
  }
  emit commandFinished(int(pending.kind), status.isOk(), error);
}

void LiveControlPanel::pollState() {
  m_paused = m_runner && m_running && m_runner->isPaused();
  updateControls();
}

void LiveControlPanel::updateControls() {
  bool waitingControl = false, waitingPatch = false;
  for (const Pending& p : m_pending) {
    (p.kind == Kind::kApplyPatch ? waitingPatch : waitingControl) = true;
  }
  m_controls->setEnabled(m_running);
  m_pause->setEnabled(m_running && !m_paused && !waitingControl);
  m_resume->setEnabled(m_running && m_paused && !waitingControl);
  m_step->setEnabled(m_running && m_paused && !waitingControl);
  m_stop->setEnabled(m_running);
  bool edited = false;
  for (const KeyEditor& e : m_editors) edited = edited || isEdited(e);
  m_apply->setEnabled(m_running && edited && !waitingPatch);
  m_revert->setEnabled(m_running && edited);

  QString state;
  if (!m_running) {
    state = tr("<span style='color:%1'>&#9679;</span> No run in progress. "
               "<span style='color:%2'>Run &gt; Start run trains with live control.</span>")
                .arg(theme::dimText().name(), theme::dimText().name());
  } else {
    const bool showsRun = documentShowsRun();
    const int committed = showsRun ? m_document->stepModel()->rowCount() : 0;
    const qint64 planned = m_runner ? m_runner->plannedSteps() : 0;
    const QString progress =
        showsRun ? tr("%1 of %2 steps done").arg(committed).arg(planned) : tr("starting");
    state = m_paused ? tr("<span style='color:#f2a541'>&#10073;&#10073;</span> <b>Paused</b>"
                          " &middot; %1")
                           .arg(progress)
                     : tr("<span style='color:#6cc57c'>&#9679;</span> <b>Running</b> &middot; %1")
                           .arg(progress);
  }
  if (m_state->text() != state) m_state->setText(state);
}

void LiveControlPanel::setResult(const QString& text, bool error) {
  QPalette p = m_result->palette();
  p.setColor(QPalette::WindowText, error ? QColor(0xf0, 0x7a, 0x7a) : QColor(0x8f, 0xd1, 0x9e));
  m_result->setPalette(p);
  m_result->setText(text);
  m_result->setToolTip(text);
}

QString LiveControlPanel::resultText() const {
  return m_result->text();
}

}  // namespace moewb::gui
