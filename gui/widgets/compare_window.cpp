// CompareWindow and the File menu's compare actions (compare_window.h).
#include "compare_window.h"

#include <QAction>
#include <QEventLoop>
#include <QFileDialog>
#include <QFileInfo>
#include <QHeaderView>
#include <QLabel>
#include <QMenu>
#include <QSortFilterProxyModel>
#include <QSplitter>
#include <QTableView>
#include <QThread>
#include <QVBoxLayout>

#include "chart_view.h"
#include "moewb/base/units.h"
#include "moewb/gui/trace_loader.h"
#include "theme.h"

namespace moewb::gui {
namespace {

QTableView* makeTable(CompareModel* model, bool sortable, QWidget* parent) {
  auto* table = new QTableView(parent);
  if (sortable) {
    auto* proxy = new QSortFilterProxyModel(table);
    proxy->setSourceModel(model);
    proxy->setSortRole(CompareModel::kSortRole);
    table->setModel(proxy);
    table->setSortingEnabled(true);
    // |delta| largest first, as `moewb diff` prints it.
    table->sortByColumn(CompareModel::kDelta, Qt::DescendingOrder);
  } else {
    table->setModel(model);
  }
  table->verticalHeader()->hide();
  table->setSelectionBehavior(QAbstractItemView::SelectRows);
  table->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
  table->horizontalHeader()->setSectionResizeMode(CompareModel::kName, QHeaderView::Stretch);
  return table;
}

QString sampleLine(const char* label, const storage::TraceSample& s) {
  QString line =
      QStringLiteral("%1  %2  run %3  steps %4..%5 (%6 steps)")
          .arg(QLatin1String(label), QFileInfo(QString::fromStdString(s.path)).fileName(),
               QString::fromStdString(s.runName))
          .arg(s.firstStep)
          .arg(s.lastStep)
          .arg(s.phaseSteps);
  if (s.worldSize > 1) line += QStringLiteral(", rank %1 of %2").arg(s.rank).arg(s.worldSize);
  if (s.gpuSteps > 0) line += QStringLiteral(", %1 with GPU work").arg(s.gpuSteps);
  return line;
}

std::vector<QPointF> lossPoints(const storage::TraceSample& s) {
  std::vector<QPointF> points;
  for (const storage::SampleStep& p : s.series) points.emplace_back(double(p.step), p.loss);
  return points;
}

std::vector<QPointF> stepMsPoints(const storage::TraceSample& s) {
  std::vector<QPointF> points;
  for (const storage::SampleStep& p : s.series) {
    points.emplace_back(double(p.step), double(p.stepNs) / double(kNsPerMs));
  }
  return points;
}

}  // namespace

CompareWindow::CompareWindow(QWidget* parent) : QWidget(parent, Qt::Window) {
  setWindowTitle(tr("Compare runs - MoE Workbench"));
  m_names = new CompareModel(this);
  m_summary = new CompareModel(this);
  m_header = new QLabel(tr("No comparison yet"));
  m_header->setTextInteractionFlags(Qt::TextSelectableByMouse);
  m_header->setWordWrap(true);
  m_namesTable = makeTable(m_names, true, this);
  m_summaryTable = makeTable(m_summary, false, this);
  m_lossChart = new ChartView;
  m_lossChart->setTitle(tr("Loss"));
  m_lossChart->setAxisTitles(tr("step"), tr("loss"));
  m_stepChart = new ChartView;
  m_stepChart->setTitle(tr("Step time"));
  m_stepChart->setAxisTitles(tr("step"), tr("ms"));
  m_stepChart->setYFromZero(true);
  for (ChartView* chart : {m_lossChart, m_stepChart}) chart->setEmptyText(tr("no comparison"));

  auto* charts = new QSplitter(Qt::Horizontal);
  charts->addWidget(m_lossChart);
  charts->addWidget(m_stepChart);
  auto* split = new QSplitter(Qt::Vertical);
  split->addWidget(m_namesTable);
  split->addWidget(m_summaryTable);
  split->addWidget(charts);
  split->setStretchFactor(0, 3);
  split->setStretchFactor(1, 2);
  split->setStretchFactor(2, 2);
  auto* layout = new QVBoxLayout(this);
  layout->addWidget(m_header);
  layout->addWidget(split, 1);
  resize(1100, 760);
}

CompareWindow::~CompareWindow() {
  for (QThread* worker : m_workers) {
    worker->wait();
    delete worker;
  }
}

void CompareWindow::beginCompare(const CompareRequest& request) {
  const quint64 generation = ++m_generation;
  const QString b = request.pathB.isEmpty() ? tr("itself (before/after)") : request.pathB;
  m_header->setText(tr("Comparing %1 with %2...").arg(request.pathA, b));
  auto result = std::make_shared<Result<ComparisonResult>>(internalError("not computed"));
  QThread* worker = QThread::create([request, result] { *result = loadComparison(request); });
  m_workers.push_back(worker);
  connect(worker, &QThread::finished, this, [this, worker, generation, result] {
    std::erase(m_workers, worker);
    worker->deleteLater();
    onResult(generation, result);
  });
  worker->start();
}

Status CompareWindow::compare(const CompareRequest& request) {
  QEventLoop loop;
  connect(this, &CompareWindow::finished, &loop, &QEventLoop::quit);
  beginCompare(request);
  loop.exec();
  return m_lastStatus;
}

QString CompareWindow::headerText() const {
  return m_header->text();
}

void CompareWindow::onResult(quint64 generation, std::shared_ptr<Result<ComparisonResult>> result) {
  if (generation != m_generation) return;  // a newer request replaced this one
  m_lastStatus = result->status();
  if (!result->isOk()) {
    m_names->clear();
    m_summary->clear();
    m_lossChart->setSeries({});
    m_stepChart->setSeries({});
    m_header->setText(tr("Cannot compare: %1").arg(userMessage(result->status())));
    emit finished(false);
    return;
  }
  showResult(result->value());
  emit finished(true);
}

void CompareWindow::showResult(const ComparisonResult& r) {
  QString header = sampleLine("A", r.a) + QLatin1Char('\n') + sampleLine("B", r.b);
  if (!r.splitNote.isEmpty()) header += QLatin1Char('\n') + r.splitNote;
  header += QLatin1Char('\n') +
            tr("Time per step: mean ± stddev over steps. Noise = 2 standard errors of the "
               "delta; * = significant (|delta| > noise and >= %1% of the larger mean).")
                .arg(100.0 * storage::kMinRelativeDelta, 0, 'f', 0);
  m_header->setText(header);
  layout()->activate();  // the header grows to its lines before the next paint
  m_names->setNames(r.comparison);
  m_summary->setSummary(r.comparison);
  const QColor colorA = theme::series(0), colorB = theme::series(1);
  m_lossChart->setSeries(
      {{tr("A"), colorA, lossPoints(r.a), false}, {tr("B"), colorB, lossPoints(r.b), true}});
  m_stepChart->setSeries(
      {{tr("A"), colorA, stepMsPoints(r.a), false}, {tr("B"), colorB, stepMsPoints(r.b), true}});
}

void addCompareActions(QMenu* file, QWidget* parent, std::function<QString()> currentPath) {
  const QString filter = QObject::tr("MoE Workbench traces (*.sqlite *.db *.moewb);;All files (*)");
  auto open = [parent](const CompareRequest& request) {
    auto* window = new CompareWindow(parent);
    window->setAttribute(Qt::WA_DeleteOnClose);
    window->show();
    window->beginCompare(request);
  };
  QAction* with = file->addAction(QObject::tr("&Compare with..."));
  with->setToolTip(QObject::tr("Compare the open trace (A) with another trace (B)"));
  QObject::connect(with, &QAction::triggered, parent, [=] {
    QString a = currentPath();
    if (a.isEmpty()) {
      a = QFileDialog::getOpenFileName(parent, QObject::tr("Trace A"), {}, filter);
      if (a.isEmpty()) return;
    }
    const QString b = QFileDialog::getOpenFileName(
        parent, QObject::tr("Compare %1 with").arg(QFileInfo(a).fileName()),
        QFileInfo(a).absolutePath(), filter);
    if (!b.isEmpty()) open({.pathA = a, .pathB = b});
  });
  QAction* split = file->addAction(QObject::tr("Compare before/after config &change"));
  split->setToolTip(
      QObject::tr("The open trace's steps before its first live config change (A) "
                  "against the steps after it (B)"));
  QObject::connect(split, &QAction::triggered, parent, [=] {
    const QString a = currentPath();
    if (!a.isEmpty()) open({.pathA = a, .splitAtPatch = true});
  });
}

}  // namespace moewb::gui
