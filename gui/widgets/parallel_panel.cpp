// ParallelPanel: selectors, summary, traffic matrix, per-rank table and collectives table.
#include "parallel_panel.h"

#include <QComboBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QSortFilterProxyModel>
#include <QSplitter>
#include <QTableView>
#include <QVBoxLayout>

#include "moewb/base/units.h"
#include "moewb/gui/parallel_model.h"
#include "moewb/gui/trace_loader.h"
#include "parallel_matrix_view.h"

namespace moewb::gui {

namespace {

QTableView* makeTable(QWidget* parent) {
  auto* table = new QTableView(parent);
  table->verticalHeader()->hide();
  table->verticalHeader()->setDefaultSectionSize(22);
  table->setAlternatingRowColors(true);
  table->setSelectionBehavior(QAbstractItemView::SelectRows);
  table->setSelectionMode(QAbstractItemView::SingleSelection);
  table->horizontalHeader()->setStretchLastSection(true);
  table->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
  table->setWordWrap(false);
  return table;
}

// A titled block for the splitter: a bold label above `body`. The title wraps, so a narrow dock
// (a 1280-px screen) takes its lines instead of the window's width.
QWidget* titled(QLabel* title, QWidget* body) {
  title->setWordWrap(true);
  auto* box = new QWidget;
  auto* layout = new QVBoxLayout(box);
  layout->setContentsMargins(0, 4, 0, 0);
  layout->setSpacing(3);
  layout->addWidget(title);
  layout->addWidget(body, 1);
  return box;
}

QString groupText(const std::vector<int32_t>& ranks) {
  QStringList parts;
  for (int32_t r : ranks) parts << QString::number(r);
  return QStringLiteral("{%1}").arg(parts.join(QLatin1Char(',')));
}

}  // namespace

ParallelPanel::ParallelPanel(QWidget* parent) : QWidget(parent) {
  m_step = new QComboBox(this);
  m_step->setToolTip(tr("Step of the matrix, the rank table and the collectives"));
  m_layer = new QComboBox(this);
  m_layer->setToolTip(tr("Decoder layer of the matrix and the rank table"));
  m_phase = new QComboBox(this);
  m_phase->setToolTip(tr("All-to-all of the matrix: forward dispatch / combine, or backward"));
  m_summary = new QLabel(this);
  m_summary->setWordWrap(true);
  m_hover = new QLabel(tr("Hover a cell for its numbers."), this);
  m_hover->setWordWrap(true);  // a cell's numbers wrap rather than widen the window
  m_hover->setStyleSheet(QStringLiteral("color: #9aa0ac;"));
  m_matrix = new ParallelMatrixView(this);
  m_rankTable = makeTable(this);
  m_collectiveTable = makeTable(this);
  m_collectiveProxy = new QSortFilterProxyModel(this);
  m_collectiveProxy->setSortRole(ParallelCollectiveModel::kSortRole);
  m_collectiveTable->setModel(m_collectiveProxy);
  m_collectiveTable->setSortingEnabled(true);
  m_collectiveTable->setToolTip(tr("Click a collective to outline it on every rank's comm track"));
  m_collectiveTitle = new QLabel(this);

  auto* selectors = new QHBoxLayout;
  selectors->addWidget(new QLabel(tr("<b>All-to-all</b>"), this));
  selectors->addStretch(1);
  selectors->addWidget(m_step);
  selectors->addWidget(m_layer);
  selectors->addWidget(m_phase);

  auto* matrixBox = new QWidget;
  auto* matrixLayout = new QVBoxLayout(matrixBox);
  matrixLayout->setContentsMargins(0, 0, 0, 0);
  matrixLayout->setSpacing(2);
  matrixLayout->addWidget(m_matrix, 1);
  matrixLayout->addWidget(m_hover);
  auto* split = new QSplitter(Qt::Vertical, this);
  split->addWidget(matrixBox);
  split->addWidget(
      titled(new QLabel(tr("<b>Tokens per rank</b> (routed rows and the load of the experts "
                           "each rank hosts)")),
             m_rankTable));
  split->addWidget(titled(m_collectiveTitle, m_collectiveTable));
  split->setStretchFactor(0, 3);
  split->setStretchFactor(1, 2);
  split->setStretchFactor(2, 3);
  split->setChildrenCollapsible(false);

  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(6, 6, 6, 4);
  layout->addLayout(selectors);
  layout->addWidget(m_summary);
  layout->addWidget(split, 1);

  auto report = [this](const Status& status) {
    if (!status.isOk()) emit message(userMessage(status));
  };
  connect(m_step, &QComboBox::currentIndexChanged, this, [this, report](int index) {
    if (m_syncing || !m_model || index < 0) return;
    const QVariant v = m_step->itemData(index);
    report(m_model->setStep(v.isValid() ? std::optional<int64_t>(v.toLongLong()) : std::nullopt));
  });
  connect(m_layer, &QComboBox::currentIndexChanged, this, [this, report](int index) {
    if (m_syncing || !m_model || index < 0) return;
    const QVariant v = m_layer->itemData(index);
    report(m_model->setLayer(v.isValid() ? std::optional<int32_t>(v.toInt()) : std::nullopt));
  });
  connect(m_phase, &QComboBox::currentIndexChanged, this, [this, report](int index) {
    if (m_syncing || !m_model || index < 0) return;
    report(m_model->setPhase(m_phase->itemData(index).toString().toStdString()));
  });
  connect(m_matrix, &ParallelMatrixView::hoverTextChanged, this, [this](const QString& text) {
    m_hover->setText(text.isEmpty() ? tr("Hover a cell for its numbers.") : text);
  });
  connect(m_collectiveTable, &QTableView::clicked, this, &ParallelPanel::onCollectiveClicked);
  syncControls();
}

void ParallelPanel::setModel(ParallelModel* model) {
  if (m_model) disconnect(m_model, nullptr, this, nullptr);
  m_model = model;
  m_matrix->setModel(model ? model->trafficModel() : nullptr);
  m_rankTable->setModel(model ? model->rankModel() : nullptr);
  m_collectiveProxy->setSourceModel(model ? model->collectiveModel() : nullptr);
  m_collectiveTable->sortByColumn(ParallelCollectiveModel::kTotalWait, Qt::DescendingOrder);
  if (m_model) connect(m_model, &ParallelModel::changed, this, &ParallelPanel::syncControls);
  syncControls();
}

QString ParallelPanel::summaryText() const {
  return m_summary->text();
}

void ParallelPanel::syncControls() {
  m_syncing = true;
  const storage::ParallelOverview empty;
  const storage::ParallelOverview& o = m_model ? m_model->overview() : empty;
  const storage::ParallelFilter filter = m_model ? m_model->filter() : storage::ParallelFilter{};
  m_step->clear();
  m_step->addItem(tr("All steps"));
  for (int64_t s : o.steps) m_step->addItem(tr("step %1").arg(s), qlonglong(s));
  m_step->setCurrentIndex(filter.step ? m_step->findData(qlonglong(*filter.step)) : 0);
  m_layer->clear();
  m_layer->addItem(tr("All layers"));
  for (int32_t l : o.layers) m_layer->addItem(tr("layer %1").arg(l), l);
  m_layer->setCurrentIndex(filter.layer ? m_layer->findData(*filter.layer) : 0);
  m_phase->clear();
  m_phase->addItem(tr("All phases"), QString());
  for (const std::string& phase : o.phases) {
    m_phase->addItem(QString::fromStdString(phase), QString::fromStdString(phase));
  }
  m_phase->setCurrentIndex(std::max(0, m_phase->findData(QString::fromStdString(filter.phase))));
  for (QComboBox* box : {m_step, m_layer, m_phase}) box->setEnabled(o.hasParallelData());

  QString summary;
  if (!m_model || !m_model->isOpen()) {
    summary = tr("No trace open.");
  } else if (!m_model->isParallel()) {
    summary = tr("This trace ran on one rank: no collectives or all-to-all traffic.");
  } else {
    const storage::A2aTrafficMatrix& m = m_model->trafficModel()->matrix();
    QStringList groups;
    for (const auto& g : o.epGroups) groups << groupText(g);
    const int64_t total = m.totalBytes(), cross = m.crossRankBytes();
    summary = tr("%1 ranks, EP groups %2. Selection: %3 crossed ranks (%4% of %5; the rest "
                 "stayed on its rank).")
                  .arg(o.worldSize)
                  .arg(groups.isEmpty() ? tr("none") : groups.join(QLatin1Char(' ')))
                  .arg(QString::fromStdString(formatBytes(cross)))
                  .arg(total > 0 ? 100.0 * double(cross) / double(total) : 0.0, 0, 'f', 0)
                  .arg(QString::fromStdString(formatBytes(total)));
    const double balance = m_model->rankModel()->receivedMaxOverMean();
    if (balance > 0) summary += tr(" Busiest rank receives %1x the mean.").arg(balance, 0, 'f', 2);
  }
  m_summary->setText(summary);
  const int64_t step = m_model ? m_model->collectiveStep() : -1;
  const int count = m_model ? m_model->collectiveModel()->rowCount() : 0;
  m_collectiveTitle->setText(
      step >= 0 ? tr("<b>Collectives of step %1</b> (%2, matched across peers by group and seq; "
                     "sorted by wait)")
                      .arg(step)
                      .arg(count)
                : tr("<b>Collectives</b> (none)"));
  m_syncing = false;
}

void ParallelPanel::showCollective(const storage::MatchedCollective& match) {
  if (!m_model) return;
  if (m_model->collectiveStep() != match.step) {
    const Status status = m_model->setStep(match.step);
    if (!status.isOk()) emit message(userMessage(status));
  }
  const int row = m_model->collectiveModel()->rowOf(match);
  if (row < 0) {
    m_collectiveTable->clearSelection();
    return;
  }
  const QModelIndex index =
      m_collectiveProxy->mapFromSource(m_model->collectiveModel()->index(row, 0));
  m_collectiveTable->selectRow(index.row());
  m_collectiveTable->scrollTo(index);
}

void ParallelPanel::onCollectiveClicked(const QModelIndex& index) {
  if (!m_model || !index.isValid()) return;
  const QModelIndex source = m_collectiveProxy->mapToSource(index);
  if (const storage::MatchedCollective* c = m_model->collectiveModel()->collective(source.row())) {
    emit collectiveActivated(*c);
  }
}

}  // namespace moewb::gui
