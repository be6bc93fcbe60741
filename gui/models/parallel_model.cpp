// ParallelModel: the Parallelism dock's reader, selection and table models.
#include "moewb/gui/parallel_model.h"

#include "moewb/gui/trace_document.h"

namespace moewb::gui {

ParallelModel::ParallelModel(QObject* parent) : QObject(parent) {}

ParallelModel::~ParallelModel() = default;

void ParallelModel::setDocument(TraceDocument* document) {
  if (m_document) disconnect(m_document, nullptr, this, nullptr);
  m_document = document;
  close();
  if (!m_document) return;
  connect(m_document, &TraceDocument::opened, this,
          [this](const QString& path) { (void)open(path); });
  connect(m_document, &TraceDocument::refreshed, this, [this] { (void)refresh(); });
  connect(m_document, &TraceDocument::closed, this, &ParallelModel::close);
  if (m_document->isOpen()) (void)open(m_document->path());
}

Status ParallelModel::fail(const Status& status) {
  emit failed(userMessage(status));
  return status;
}

Status ParallelModel::open(const QString& path) {
  close();
  auto reader = storage::TraceReader::open(path.toStdString());
  if (!reader.isOk()) return fail(reader.status());
  auto overview = (*reader)->parallelOverview();
  if (!overview.isOk()) return fail(overview.status().withContext(path.toStdString()));
  m_reader = std::move(reader).value();
  m_overview = std::move(overview).value();
  m_filter = {};
  if (!m_overview.steps.empty()) m_filter.step = m_overview.steps.back();
  if (!m_overview.phases.empty()) m_filter.phase = m_overview.phases.front();
  m_followLastStep = true;
  const Status status = reload();
  emit changed();
  return status;
}

void ParallelModel::close() {
  m_reader.reset();
  m_overview = {};
  m_filter = {};
  m_followLastStep = true;
  m_traffic.setMatrix({});
  m_ranks.setLoads({});
  m_collectives.setCollectives(-1, {});
  emit changed();
}

Status ParallelModel::refresh(bool force) {
  if (!isOpen()) return Status::ok();
  auto overview = m_reader->parallelOverview();
  if (!overview.isOk()) return fail(overview.status());
  const bool newSteps = overview->steps != m_overview.steps;
  const bool firstPhases = m_overview.phases.empty() && !overview->phases.empty();
  m_overview = std::move(overview).value();
  // Also the first step of a live run opened before it had one ("all" was never chosen then).
  if (m_followLastStep && !m_overview.steps.empty()) m_filter.step = m_overview.steps.back();
  if (firstPhases && m_filter.phase.empty()) m_filter.phase = m_overview.phases.front();
  Status status = Status::ok();
  if (newSteps || firstPhases || force) status = reload();
  emit changed();
  return status;
}

Status ParallelModel::setStep(std::optional<int64_t> step) {
  m_filter.step = step;
  m_followLastStep = step && !m_overview.steps.empty() && *step == m_overview.steps.back();
  const Status status = reload();
  emit changed();
  return status;
}

Status ParallelModel::setLayer(std::optional<int32_t> layer) {
  m_filter.layer = layer;
  const Status status = reload();
  emit changed();
  return status;
}

Status ParallelModel::setPhase(const std::string& phase) {
  m_filter.phase = phase;
  const Status status = reload();
  emit changed();
  return status;
}

int64_t ParallelModel::collectiveStep() const {
  if (m_filter.step) return *m_filter.step;
  return m_overview.steps.empty() ? -1 : m_overview.steps.back();
}

Result<std::optional<storage::MatchedCollective>> ParallelModel::collectiveAt(TrackId track,
                                                                              int64_t startNs) {
  if (!isOpen()) return std::optional<storage::MatchedCollective>{};
  return m_reader->collectiveAt(track, startNs);
}

Status ParallelModel::reload() {
  if (!isParallel()) {
    m_traffic.setMatrix({});
    m_ranks.setLoads({});
    m_collectives.setCollectives(-1, {});
    return Status::ok();
  }
  auto matrix = m_reader->a2aTrafficMatrix(m_filter);
  if (!matrix.isOk()) return fail(matrix.status());
  auto loads = m_reader->rankLoads(m_filter);
  if (!loads.isOk()) return fail(loads.status());
  const int64_t step = collectiveStep();
  std::vector<storage::MatchedCollective> collectives;
  if (!m_overview.steps.empty()) {
    auto read = m_reader->stepCollectives(step);
    if (!read.isOk()) return fail(read.status());
    collectives = std::move(read).value();
  }
  m_traffic.setMatrix(std::move(matrix).value());
  m_ranks.setLoads(std::move(loads).value());
  m_collectives.setCollectives(step, std::move(collectives));
  return Status::ok();
}

}  // namespace moewb::gui
