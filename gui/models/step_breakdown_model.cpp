// StepBreakdownModel: the step breakdown read on a worker thread (see step_breakdown_model.h).
#include "moewb/gui/step_breakdown_model.h"

#include <QMetaObject>
#include <QTimer>
#include <algorithm>
#include <chrono>

#include "moewb/gui/trace_document.h"
#include "moewb/gui/trace_loader.h"

namespace moewb::gui {

StepBreakdownModel::StepBreakdownModel(QObject* parent) : QObject(parent) {}

StepBreakdownModel::~StepBreakdownModel() {
  if (m_cancel) m_cancel->store(true);
  if (m_worker.joinable()) m_worker.join();
}

void StepBreakdownModel::setDocument(TraceDocument* document) {
  if (m_document) disconnect(m_document, nullptr, this, nullptr);
  m_document = document;
  clear();
  if (!m_document) return;
  connect(m_document, &TraceDocument::opening, this, &StepBreakdownModel::clear);
  connect(m_document, &TraceDocument::closed, this, &StepBreakdownModel::clear);
  connect(m_document, &TraceDocument::opened, this, &StepBreakdownModel::reload);
  connect(m_document, &TraceDocument::refreshed, this, [this](int newSteps, int, int) {
    // While a load streams in, refreshed() comes often: wait for opened().
    if (newSteps > 0 && !m_document->isLoading()) reload();
  });
  if (m_document->isOpen() && !m_document->isLoading()) reload();
}

void StepBreakdownModel::clear() {
  ++m_generation;
  m_again = false;
  m_delayed = false;  // a new file is read at once
  if (m_cancel) m_cancel->store(true);
  if (m_data.steps.empty()) return;
  m_data = {};
  emit changed();
}

void StepBreakdownModel::reload() {
  if (!m_document || !m_document->isOpen()) return;
  m_again = true;
  start();
}

void StepBreakdownModel::start() {
  if (m_workerRunning || m_delayed || !m_again) return;  // onAnswer starts it again
  if (m_worker.joinable()) m_worker.join();
  m_again = false;
  m_workerRunning = true;
  m_cancel = std::make_shared<std::atomic<bool>>(false);
  const uint64_t generation = m_generation;
  const std::string path = m_document->path().toStdString();
  m_readTimer.start();
  m_worker = std::thread([this, generation, path, cancel = m_cancel] {
    auto answer = std::make_shared<Answer>(cancelled("not read"));
    auto reader = storage::TraceReader::open(path);
    if (!reader.isOk()) {
      *answer = reader.status();
    } else {
      *answer = readStepBreakdowns(**reader, cancel.get());
    }
    // Queued to this object: dropped by Qt if the model is gone (its destructor joins first).
    QMetaObject::invokeMethod(
        this, [this, generation, answer] { onAnswer(generation, answer); },
        Qt::QueuedConnection);
  });
}

void StepBreakdownModel::onAnswer(uint64_t generation, const std::shared_ptr<Answer>& answer) {
  if (m_worker.joinable()) m_worker.join();
  m_workerRunning = false;
  m_lastReadMs = m_readTimer.elapsed();
  if (generation == m_generation) {
    if (answer->isOk()) {
      m_data = std::move(answer->value());
      emit changed();
    } else if (answer->status().code() != StatusCode::kCancelled) {
      emit failed(userMessage(answer->status()));
    }
  }
  // A request that came meanwhile (a live run's refresh) waits as long as this read took, at
  // least kPauseMs, so a long live run keeps the worker busy half the time at most.
  if (!m_again) return;
  m_delayed = true;
  const std::chrono::milliseconds pause{std::max<int64_t>(kPauseMs, m_lastReadMs)};
  QTimer::singleShot(pause, this, [this] {
    m_delayed = false;
    start();
  });
}

}  // namespace moewb::gui
