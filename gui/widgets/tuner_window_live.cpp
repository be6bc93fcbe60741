// TunerWindow's Apply live: the selected trial's live settings sent to the run in progress as one
// patch with source "tuner" (tuner_window.h, tuner_live_plan.h).
#include <QBoxLayout>
#include <QLabel>
#include <QPushButton>
#include <QStyle>
#include <QTimer>
#include <chrono>

#include "moewb/engine/trainer.h"
#include "moewb/gui/trace_loader.h"
#include "moewb/storage/trace_reader.h"
#include "run_controller.h"
#include "theme.h"
#include "tuner_window.h"

namespace moewb::gui {
namespace {

constexpr int kReplyPollMs = 20;

QStringList described(const std::vector<LiveSetting>& settings) {
  QStringList out;
  for (const LiveSetting& s : settings) out << describeSetting(s);
  return out;
}

}  // namespace

void TunerWindow::buildLive(QBoxLayout* buttons, QBoxLayout* outer) {
  m_applyLive =
      new QPushButton(style()->standardIcon(QStyle::SP_DialogApplyButton), tr("Apply live"), this);
  m_applyLive->setEnabled(false);
  connect(m_applyLive, &QPushButton::clicked, this, [this] { (void)applyLive(); });
  buttons->addWidget(m_applyLive);
  m_live = new QLabel(this);
  m_live->setWordWrap(true);
  m_live->setTextInteractionFlags(Qt::TextSelectableByMouse);
  outer->addWidget(m_live);
  m_liveTimer = new QTimer(this);
  m_liveTimer->setInterval(kReplyPollMs);
  connect(m_liveTimer, &QTimer::timeout, this, &TunerWindow::pollLiveReply);
  updateLive();
}

void TunerWindow::setRunController(RunController* runner) {
  if (m_runner) disconnect(m_runner, nullptr, this, nullptr);
  m_runner = runner;
  if (m_runner) {
    connect(m_runner, &RunController::started, this, [this] {
      m_liveOutcome.clear();
      updateLive();
    });
    connect(m_runner, &RunController::finished, this, [this] { updateLive(); });
    connect(m_runner, &QObject::destroyed, this, [this] {
      m_runner = nullptr;
      updateLive();
    });
  }
  updateLive();
}

Result<LiveRetunePlan> TunerWindow::livePlan() const {
  if (!m_runner || !m_runner->isRunning()) {
    return failedPrecondition(
        "no run in progress; start one with Run > Start run in the main window, then Apply "
        "live changes it");
  }
  const auto trial = exportTrial();
  if (!trial) return failedPrecondition("no trial of this study passed; nothing to apply");
  const TunerStudy& s = m_model->study();
  const TunerTrialRow& row = s.rows[size_t(m_model->rowOfTrial(*trial))];
  const std::string trace = m_runner->tracePath().toStdString();
  MOEWB_ASSIGN_OR_RETURN(auto reader, storage::TraceReader::open(trace));
  MOEWB_ASSIGN_OR_RETURN(const std::vector<storage::ConfigChangeRow> changes,
                         reader->configChanges());
  MOEWB_ASSIGN_OR_RETURN(const engine::RunConfig now,
                         configAfterChanges(m_runner->startConfig(), changes));
  // The run is in this process: on several ranks the layout keys are live too (re-sharded).
  return planLiveRetune(now, row.trial.settings, engine::Trainer::liveKeysFor(now));
}

Status TunerWindow::applyLive() {
  if (m_livePending.valid()) {
    return failedPrecondition("the last patch from Apply live waits for the run's reply");
  }
  auto plan = livePlan();
  if (!plan.isOk()) {
    m_liveOutcome = tr("Not applied: %1").arg(userMessage(plan.status()));
    m_liveOutcomeError = true;
    updateLive();
    return plan.status();
  }
  const int64_t trial = *exportTrial();
  if (plan->send.empty()) {
    m_liveOutcome = tr("Nothing sent: the run already has trial %1's live settings.").arg(trial);
    m_liveOutcomeError = false;
    updateLive();
    return failedPrecondition(m_liveOutcome.toStdString());
  }
  engine::TrainerCommand command;
  command.kind = engine::TrainerCommand::Kind::kApplyPatch;
  command.source = "tuner";
  for (const LiveSetting& s : plan->send) command.assignments.push_back(s.assignment());
  m_liveTrial = trial;
  m_liveSent = described(plan->send);
  m_livePending = m_runner->post(std::move(command));
  m_liveOutcome = tr("Sending trial %1 as one patch: %2 ...")
                      .arg(trial)
                      .arg(m_liveSent.join(QStringLiteral(", ")));
  m_liveOutcomeError = false;
  m_liveTimer->start();
  updateLive();
  return Status();
}

void TunerWindow::pollLiveReply() {
  if (!m_livePending.valid()) {
    m_liveTimer->stop();
    return;
  }
  if (m_livePending.wait_for(std::chrono::seconds(0)) != std::future_status::ready) return;
  m_liveTimer->stop();
  Status status = Status();
  try {
    status = m_livePending.get();  // get() leaves the future invalid: nothing pending
  } catch (const std::future_error&) {
    status = failedPrecondition("the run ended before it took the patch");
  }
  m_liveOutcomeError = !status.isOk();
  if (status.isOk()) {
    m_liveOutcome = tr("Applied trial %1 live (from the next step, source tuner): %2")
                        .arg(m_liveTrial)
                        .arg(m_liveSent.join(QStringLiteral(", ")));
  } else {
    m_liveOutcome =
        tr("Refused by the run, nothing changed: %1").arg(QString::fromStdString(status.message()));
  }
  updateLive();
  emit liveApplyFinished(status.isOk(), QString::fromStdString(status.message()));
}

void TunerWindow::updateLive() {
  if (!m_applyLive) return;  // called while the window is being built
  const bool running = m_runner && m_runner->isRunning();
  const bool pending = m_livePending.valid();
  const auto trial = exportTrial();
  if (trial != std::optional<int64_t>(m_liveTrial) && !pending) m_liveOutcome.clear();
  QString planText;
  QString tip;
  bool error = false, sendable = false;
  if (!running) {
    tip =
        tr("No run in progress: start one with Run > Start run in the main window; "
           "Apply live changes that run at its next step");
    planText = tr("Apply live: no run in progress.");
  } else if (!trial) {
    tip = tr("No trial of this study passed; nothing to apply");
    planText = tip;
  } else if (auto plan = livePlan(); !plan.isOk()) {
    tip = tr("Trial %1 cannot be applied: %2").arg(*trial).arg(userMessage(plan.status()));
    planText = tip;
    error = true;
  } else {
    sendable = !plan->send.empty();
    planText = sendable ? tr("Apply live sends trial %1 as one patch: %2.")
                              .arg(*trial)
                              .arg(described(plan->send).join(QStringLiteral(", ")))
                        : tr("The run already has trial %1's live settings.").arg(*trial);
    const QStringList restart = described(plan->restart);
    if (!restart.isEmpty()) {
      planText +=
          QStringLiteral("\n") +
          tr("Not sent, needs a restart (Export it): %1").arg(restart.join(QStringLiteral("; ")));
    }
    tip = sendable
              ? tr("Send trial %1's live settings to the running run as one patch (taken at "
                   "its next step; at once while paused)")
                    .arg(*trial)
              : tr("Nothing to send: the run already has trial %1's live settings").arg(*trial);
  }
  if (pending) tip = tr("Waiting for the run to take the last patch");
  m_applyLive->setEnabled(running && sendable && !pending);
  m_applyLive->setToolTip(tip);
  setLiveText(m_liveOutcome.isEmpty() ? planText : m_liveOutcome + QStringLiteral("\n") + planText,
              error || (!m_liveOutcome.isEmpty() && m_liveOutcomeError));
}

void TunerWindow::setLiveText(const QString& text, bool error) {
  QPalette p = m_live->palette();
  p.setColor(QPalette::WindowText, error ? QColor(0xf0, 0x7a, 0x7a) : theme::dimText());
  m_live->setPalette(p);
  m_live->setText(text);
}

QString TunerWindow::liveText() const {
  return m_live->text();
}

}  // namespace moewb::gui
