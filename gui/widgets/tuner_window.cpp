// TunerWindow and the File menu's "Open study..." action (tuner_window.h).
#include "tuner_window.h"

#include <QAction>
#include <QFileDialog>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QItemSelectionModel>
#include <QLabel>
#include <QLayout>
#include <QMenu>
#include <QPushButton>
#include <QSortFilterProxyModel>
#include <QSplitter>
#include <QTableView>
#include <QVBoxLayout>

#include "main_window.h"
#include "moewb/gui/config_change_model.h"
#include "moewb/gui/trace_document.h"
#include "moewb/gui/trace_loader.h"
#include "tuner_prediction_view.h"
#include "tuner_scatter_view.h"

namespace moewb::gui {
namespace {

QString exportFilter(tuner::ExportFormat format) {
  switch (format) {
    case tuner::ExportFormat::kToml:
      return QObject::tr("MoE Workbench config (*.toml);;All files (*)");
    case tuner::ExportFormat::kMegatron:
      return QObject::tr("Megatron-Core flags (*.megatron *.txt);;All files (*)");
    case tuner::ExportFormat::kTorchtitan:
      return QObject::tr("torchtitan TOML (*.toml);;All files (*)");
  }
  return {};
}

QString exportLabel(tuner::ExportFormat format) {
  switch (format) {
    case tuner::ExportFormat::kToml:
      return QObject::tr("Export our TOML...");
    case tuner::ExportFormat::kMegatron:
      return QObject::tr("Export Megatron flags...");
    case tuner::ExportFormat::kTorchtitan:
      return QObject::tr("Export torchtitan TOML...");
  }
  return {};
}

}  // namespace

TunerWindow::TunerWindow(QWidget* parent) : QWidget(parent, Qt::Window) {
  setWindowTitle(tr("Tuner - MoE Workbench"));
  m_model = new TunerStudyModel(this);
  m_proxy = new QSortFilterProxyModel(this);
  m_proxy->setSourceModel(m_model);
  m_proxy->setSortRole(TunerStudyModel::kSortRole);

  m_header = new QLabel(tr("No study open (File > Open study...)"), this);
  // Not word-wrapped: a wrapped label gets one line's height in the layout, cutting the rest.
  m_header->setTextInteractionFlags(Qt::TextSelectableByMouse);

  m_table = new QTableView(this);
  m_table->setModel(m_proxy);
  m_table->setSortingEnabled(true);
  m_table->sortByColumn(TunerStudyModel::kTrial, Qt::AscendingOrder);
  m_table->verticalHeader()->hide();
  m_table->setSelectionBehavior(QAbstractItemView::SelectRows);
  m_table->setSelectionMode(QAbstractItemView::SingleSelection);
  m_table->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
  m_table->horizontalHeader()->setStretchLastSection(true);
  connect(m_table->selectionModel(), &QItemSelectionModel::currentRowChanged, this,
          &TunerWindow::onCurrentRowChanged);

  m_chart = new TunerScatterView(this);
  connect(m_chart, &TunerScatterView::trialClicked, this, [this](qint64 id) { selectTrial(id); });
  m_prediction = new TunerPredictionView(this);
  connect(m_prediction, &TunerPredictionView::trialClicked, this,
          [this](qint64 id) { selectTrial(id); });

  m_whyNot = new QLabel(this);
  m_whyNot->setWordWrap(true);
  m_whyNot->setTextInteractionFlags(Qt::TextSelectableByMouse);

  auto* buttons = new QHBoxLayout;
  for (tuner::ExportFormat f : {tuner::ExportFormat::kToml, tuner::ExportFormat::kMegatron,
                                tuner::ExportFormat::kTorchtitan}) {
    auto* button = new QPushButton(exportLabel(f), this);
    button->setToolTip(tr("Write the selected trial (or the pick) as moewb tune --export does"));
    button->setEnabled(false);
    connect(button, &QPushButton::clicked, this, [this, f] { exportDialog(f); });
    buttons->addWidget(button);
    m_exportButtons.push_back(button);
  }
  buttons->addStretch();
  auto* layout = new QVBoxLayout(this);

  auto* split = new QSplitter(Qt::Vertical, this);
  auto* charts = new QSplitter(Qt::Horizontal, this);
  charts->addWidget(m_chart);
  charts->addWidget(m_prediction);
  charts->setStretchFactor(0, 3);
  charts->setStretchFactor(1, 2);
  split->addWidget(m_table);
  split->addWidget(charts);
  split->setStretchFactor(0, 3);
  split->setStretchFactor(1, 2);

  layout->addWidget(m_header);
  layout->addWidget(split, 1);
  layout->addWidget(m_whyNot);
  layout->addLayout(buttons);
  buildLive(buttons, layout);  // the Apply live button and its line (tuner_window_live.cpp)
  resize(1000, 720);
}

Status TunerWindow::openStudy(const QString& path) {
  auto study = loadTunerStudy(path.toStdString());
  if (!study.isOk()) {
    m_model->clear();
    m_error = tr("Cannot open the study: %1").arg(userMessage(study.status()));
    showStudy();
    return study.status();
  }
  m_error.clear();
  m_model->setStudy(std::move(*study));
  showStudy();
  const TunerStudy& s = m_model->study();
  if (s.pickRow >= 0) selectTrial(s.rows[size_t(s.pickRow)].trial.id);
  return Status();
}

void TunerWindow::showStudy() {
  const TunerStudy& s = m_model->study();
  const bool shown = m_error.isEmpty() && !s.path.empty();
  setWindowTitle(shown ? tr("Tuner: %1 - MoE Workbench")
                             .arg(QFileInfo(QString::fromStdString(s.path)).fileName())
                       : tr("Tuner - MoE Workbench"));
  if (!m_error.isEmpty()) {
    m_header->setText(m_error);
  } else {
    QString pick = tr("no trial passed; nothing to export");
    if (s.pickRow >= 0) {
      const TunerTrialRow& p = s.rows[size_t(s.pickRow)];
      pick = tr("pick: trial %1 (%2)").arg(p.trial.id).arg(p.changes);
    }
    m_header->setText(
        tr("%1\nbase config %2, objective %3, strategy %4, %5 trials, tool commit "
           "%6, %7\n%8")
            .arg(QString::fromStdString(s.path), QString::fromStdString(s.info.configPath),
                 QString::fromStdString(s.info.objective), QString::fromStdString(s.info.strategy))
            .arg(s.rows.size())
            .arg(QString::fromStdString(s.info.gitCommit).left(12),
                 QString::fromStdString(s.info.host), pick));
  }
  std::vector<TunerScatterPoint> points;
  for (const TunerTrialRow& r : s.rows) {
    if (!r.isPoint) continue;
    points.push_back({r.trial.id, r.trial.stepTimeMs, double(r.trial.peakBytes) / (1 << 20),
                      r.onPareto, r.isPick});
  }
  m_chart->setPoints(std::move(points));
  std::vector<TunerPredictionPoint> predicted;
  for (const TunerTrialRow& r : s.rows) {
    const auto v = r.trial.verdict;
    const bool measured = v == tuner::Verdict::kOk || v == tuner::Verdict::kPruned ||
                          v == tuner::Verdict::kPrecisionFail;
    if (!measured || r.trial.predictedStepTimeMs <= 0 || r.trial.stepTimeMs <= 0) continue;
    predicted.push_back({r.trial.id, r.trial.predictedStepTimeMs, r.trial.stepTimeMs, r.isPick});
  }
  // Studies without predictions (strategies other than "model", schema 1 files) hide the chart.
  m_prediction->setVisible(!predicted.empty());
  m_prediction->setPoints(std::move(predicted));
  m_whyNot->clear();
  for (QPushButton* b : m_exportButtons) b->setEnabled(exportTrial().has_value());
  updateLive();
  layout()->activate();  // the header's line count changed: lay out now, not on the next event
}

int TunerWindow::selectedModelRow() const {
  const QModelIndex current = m_table->selectionModel()->currentIndex();
  return current.isValid() ? m_proxy->mapToSource(current).row() : -1;
}

std::optional<int64_t> TunerWindow::exportTrial() const {
  const TunerStudy& s = m_model->study();
  const int row = selectedModelRow();
  if (row >= 0 && size_t(row) < s.rows.size() && exportable(s.rows[size_t(row)].trial.verdict)) {
    return s.rows[size_t(row)].trial.id;
  }
  if (s.pickRow >= 0) return s.rows[size_t(s.pickRow)].trial.id;
  return std::nullopt;
}

bool TunerWindow::selectTrial(int64_t trialId) {
  const int row = m_model->rowOfTrial(trialId);
  if (row < 0) return false;
  const QModelIndex index = m_proxy->mapFromSource(m_model->index(row, 0));
  m_table->selectionModel()->setCurrentIndex(
      index, QItemSelectionModel::ClearAndSelect | QItemSelectionModel::Rows);
  m_table->scrollTo(index);
  onCurrentRowChanged();
  return true;
}

void TunerWindow::onCurrentRowChanged() {
  const int row = selectedModelRow();
  const TunerStudy& s = m_model->study();
  m_whyNot->setText(row >= 0 ? whyNotText(s, row) : QString());
  const auto selected =
      row >= 0 ? std::optional<int64_t>(s.rows[size_t(row)].trial.id) : std::nullopt;
  m_chart->setSelectedTrial(selected);
  m_prediction->setSelectedTrial(selected);
  const auto trial = exportTrial();
  for (QPushButton* b : m_exportButtons) {
    b->setEnabled(trial.has_value());
    b->setToolTip(trial ? tr("Write trial %1 as moewb tune --export does").arg(*trial)
                        : tr("No trial passed; nothing to export"));
  }
  updateLive();
}

Status TunerWindow::exportTo(tuner::ExportFormat format, const QString& outPath) {
  const auto trial = exportTrial();
  if (!trial) return failedPrecondition("no study with a passing trial is open; nothing to export");
  return writeStudyExport(m_model->study().path, *trial, format, outPath.toStdString());
}

void TunerWindow::exportDialog(tuner::ExportFormat format) {
  const auto trial = exportTrial();
  if (!trial) return;
  const QString dir = QFileInfo(QString::fromStdString(m_model->study().path)).absolutePath();
  const QString out = QFileDialog::getSaveFileName(
      this, tr("Export trial %1 (%2)").arg(*trial).arg(tuner::exportFormatName(format)), dir,
      exportFilter(format));
  if (out.isEmpty()) return;
  const Status written = exportTo(format, out);
  m_whyNot->setText(
      written.isOk()
          ? tr("Wrote %1 (trial %2, %3)").arg(out).arg(*trial).arg(tuner::exportFormatName(format))
          : tr("Export failed: %1").arg(userMessage(written)));
}

QString TunerWindow::headerText() const {
  return m_header->text();
}

QString TunerWindow::whyNotLine() const {
  return m_whyNot->text();
}

TunerWindow* openStudyWindow(const QString& path, QWidget* parent) {
  auto* window = new TunerWindow(parent);
  window->setAttribute(Qt::WA_DeleteOnClose);
  // Apply live reaches the run the main window started (the Live control dock's controller).
  if (auto* mainWindow = qobject_cast<MainWindow*>(parent)) {
    window->setRunController(mainWindow->runController());
    // A change from the Live control dock (or any source) changes what Apply live would send.
    QAbstractItemModel* changes = mainWindow->document()->configChangeModel();
    QObject::connect(changes, &QAbstractItemModel::rowsInserted, window, &TunerWindow::refreshLive);
    QObject::connect(changes, &QAbstractItemModel::modelReset, window, &TunerWindow::refreshLive);
  }
  window->show();
  // A refused file is shown in the window itself (errorText); nothing else to do with it here.
  (void)window->openStudy(path);
  return window;
}

void addTunerActions(QMenu* file, QWidget* parent) {
  QAction* open = file->addAction(QObject::tr("Open &study..."));
  open->setToolTip(QObject::tr("Open a moewb tune study file in the Tuner window"));
  QObject::connect(open, &QAction::triggered, parent, [parent] {
    const QString path =
        QFileDialog::getOpenFileName(parent, QObject::tr("Open tuning study"), {},
                                     QObject::tr("Tuning studies (*.sqlite *.db);;All files (*)"));
    if (!path.isEmpty()) openStudyWindow(path, parent);
  });
}

}  // namespace moewb::gui
