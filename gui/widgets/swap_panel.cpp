// SwapPanel: watermark and PCIe charts, the per-layer table and the what-if of the Swap dock.
#include "swap_panel.h"

#include <QDoubleSpinBox>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QScrollArea>
#include <QSlider>
#include <QSortFilterProxyModel>
#include <QSpinBox>
#include <QTabWidget>
#include <QTableView>
#include <QVBoxLayout>
#include <cmath>

#include "chart_view.h"
#include "moewb/gui/swap_model.h"
#include "moewb/gui/trace_loader.h"

namespace moewb::gui {

namespace {

constexpr double kSliderGbPerTick = 0.001;  // the budget slider moves in 1 MB ticks

QTableView* sortableTable(QAbstractItemModel* model, int sortRole, int sortColumn,
                          Qt::SortOrder order, QObject* parent) {
  auto* proxy = new QSortFilterProxyModel(parent);
  proxy->setSourceModel(model);
  proxy->setSortRole(sortRole);
  proxy->setDynamicSortFilter(true);
  auto* table = new QTableView;
  table->setModel(proxy);
  table->setSortingEnabled(true);
  table->sortByColumn(sortColumn, order);
  table->verticalHeader()->hide();
  table->verticalHeader()->setDefaultSectionSize(22);
  table->setAlternatingRowColors(true);
  table->setSelectionBehavior(QAbstractItemView::SelectRows);
  table->horizontalHeader()->setStretchLastSection(true);
  table->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
  table->horizontalHeader()->setResizeContentsPrecision(0);
  table->setMinimumSize(120, 40);
  return table;
}

// `page` in a scroll area that lets it shrink below its minimum height (it scrolls then).
QScrollArea* scrolling(QWidget* page) {
  auto* area = new QScrollArea;
  area->setWidget(page);
  area->setWidgetResizable(true);
  area->setFrameShape(QFrame::NoFrame);
  area->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
  area->setMinimumSize(120, 40);
  return area;
}

// 3 significant digits: "146 GB" for an H200 run, "0.0206 GB" for a CPU-sized one.
QString gb(double value) { return QString::number(value, 'g', 3) + QStringLiteral(" GB"); }

}  // namespace

SwapPanel::SwapPanel(QWidget* parent) : QWidget(parent) {
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 2, 0, 0);
  m_tabs = new QTabWidget;
  m_tabs->setDocumentMode(true);
  layout->addWidget(m_tabs);
  // The chart and what-if pages scroll when the dock is short (the window must fit
  // 1280x720 with every dock shown).
  m_tabs->addTab(scrolling(createMemoryTab()), tr("Memory"));
  m_tabs->addTab(scrolling(createPcieTab()), tr("PCIe"));
  m_layerTable = new QTableView;  // its model is set in setModel
  m_tabs->addTab(m_layerTable, tr("Layers"));
  m_tabs->addTab(scrolling(createWhatIfTab()), tr("What-if"));
}

QWidget* SwapPanel::createMemoryTab() {
  auto* page = new QWidget;
  auto* layout = new QVBoxLayout(page);
  layout->setContentsMargins(0, 0, 0, 0);
  m_hbmChart = new ChartView;
  m_hbmChart->setTitle(tr("HBM peak per step: with swap vs without"));
  m_hbmChart->setAxisTitles(tr("step"), tr("GB"));
  m_hbmChart->setYFromZero(true);
  m_hbmChart->setValueFormat([](double v) { return QString::number(v, 'g', 3); });
  m_pinnedChart = new ChartView;
  m_pinnedChart->setTitle(tr("Pinned host memory per step: peak vs capacity"));
  m_pinnedChart->setAxisTitles(tr("step"), tr("GB"));
  m_pinnedChart->setYFromZero(true);
  m_pinnedChart->setValueFormat([](double v) { return QString::number(v, 'g', 3); });
  layout->addWidget(m_hbmChart);
  layout->addWidget(m_pinnedChart);
  return page;
}

QWidget* SwapPanel::createPcieTab() {
  m_pcieChart = new ChartView;
  m_pcieChart->setTitle(tr("Effective copy rate per step (bytes moved / copy time)"));
  m_pcieChart->setAxisTitles(tr("step"), tr("GB/s"));
  m_pcieChart->setYFromZero(true);
  m_pcieChart->setValueFormat([](double v) { return QString::number(v, 'f', 1); });
  return m_pcieChart;
}

QWidget* SwapPanel::createWhatIfTab() {
  auto* page = new QWidget;
  m_whatIfPage = page;
  auto* layout = new QVBoxLayout(page);
  m_planLabel = new QLabel;
  m_planLabel->setWordWrap(true);
  layout->addWidget(m_planLabel);
  auto* form = new QFormLayout;
  auto* budgetRow = new QHBoxLayout;
  m_budgetSlider = new QSlider(Qt::Horizontal);
  m_budgetSpin = new QDoubleSpinBox;
  m_budgetSpin->setSuffix(tr(" GB"));
  m_budgetSpin->setDecimals(3);
  m_budgetSpin->setSingleStep(0.5);
  budgetRow->addWidget(m_budgetSlider, 1);
  budgetRow->addWidget(m_budgetSpin);
  form->addRow(tr("HBM budget"), budgetRow);
  auto* distanceRow = new QHBoxLayout;
  m_prefetchSpin = new QSpinBox;
  m_prefetchSpin->setSuffix(tr(" layers"));
  m_prefetchSpin->setToolTip(tr("swap.prefetch_layers: reloads of layer l start at the backward "
                                "of layer l + this"));
  m_freeLagSpin = new QSpinBox;
  m_freeLagSpin->setSuffix(tr(" layers"));
  m_freeLagSpin->setToolTip(tr("swap.free_lag_layers: compute waits for layer l's offloads, and "
                               "frees their memory, at the end of layer l + this's forward"));
  distanceRow->addWidget(m_prefetchSpin);
  distanceRow->addWidget(new QLabel(tr("Free lag")));
  distanceRow->addWidget(m_freeLagSpin);
  distanceRow->addStretch(1);
  form->addRow(tr("Prefetch"), distanceRow);
  layout->addLayout(form);
  m_whatIfLabel = new QLabel;
  m_whatIfLabel->setWordWrap(true);
  m_whatIfLabel->setTextFormat(Qt::RichText);
  layout->addWidget(m_whatIfLabel);
  connect(m_budgetSlider, &QSlider::valueChanged, this, [this](int ticks) {
    if (m_syncing) return;
    m_syncing = true;
    m_budgetSpin->setValue(ticks * kSliderGbPerTick);
    m_syncing = false;
    replan();
  });
  connect(m_budgetSpin, &QDoubleSpinBox::valueChanged, this, [this](double value) {
    if (m_syncing) return;
    m_syncing = true;
    m_budgetSlider->setValue(int(std::lround(value / kSliderGbPerTick)));
    m_syncing = false;
    replan();
  });
  for (QSpinBox* spin : {m_prefetchSpin, m_freeLagSpin}) {
    connect(spin, &QSpinBox::valueChanged, this, [this] {
      if (!m_syncing) replan();
    });
  }
  return page;
}

void SwapPanel::setModel(SwapModel* model) {
  if (m_model) disconnect(m_model, nullptr, this, nullptr);
  m_model = model;
  if (!m_model) return;
  m_layerTable->deleteLater();
  m_layerTable = sortableTable(m_model->layerModel(), SwapLayerModel::kSortRole,
                               SwapLayerModel::kExposedMs, Qt::DescendingOrder, this);
  m_tabs->removeTab(2);
  m_tabs->insertTab(2, m_layerTable, tr("Layers"));
  m_decisionTable = sortableTable(m_model->whatIf()->decisionModel(),
                                  SwapDecisionModel::kSortRole, SwapDecisionModel::kLayer,
                                  Qt::AscendingOrder, this);
  m_decisionTable->setWordWrap(false);
  m_whatIfPage->layout()->addWidget(m_decisionTable);
  connect(m_model, &SwapModel::changed, this, &SwapPanel::syncFromModel);
  connect(m_model->whatIf(), &SwapWhatIf::changed, this, &SwapPanel::syncWhatIf);
  syncFromModel();
}

void SwapPanel::syncFromModel() {
  const SwapStepSeries s = swapStepSeries(m_model->steps());
  const QString none = tr("no swap steps in this trace");
  for (ChartView* chart : {m_hbmChart, m_pinnedChart, m_pcieChart}) chart->setEmptyText(none);
  m_hbmChart->setSeries({{tr("with swap"), QColor::fromRgb(0x4e79a7), s.hbmPeakGb, false},
                         {tr("without swap"), QColor::fromRgb(0xe15759), s.hbmPeakNoSwapGb,
                          true}});
  m_pinnedChart->setSeries(
      {{tr("pinned peak"), QColor::fromRgb(0x76b7b2), s.pinnedPeakGb, false},
       {tr("capacity"), QColor::fromRgb(0x9c755f), s.pinnedCapacityGb, true}});
  std::vector<QPointF> line;
  if (!s.copyGbps.empty()) {
    line = {{s.copyGbps.front().x(), kSwapPcieLineGbps},
            {s.copyGbps.back().x(), kSwapPcieLineGbps}};
  }
  m_pcieChart->setSeries({{tr("effective GB/s"), QColor::fromRgb(0xf28e2b), s.copyGbps, false},
                          {tr("55 GB/s (H200 pinned, one way)"), QColor::fromRgb(0x8c8c8c),
                           line, true}});
  const auto& plans = m_model->plans();
  m_planLabel->setText(plans.empty()
                           ? tr("No swap plan in this trace: nothing to re-plan.")
                           : tr("Plan of step %1 (rank %2): %3")
                                 .arg(plans.back().step)
                                 .arg(plans.back().rank)
                                 .arg(QString::fromStdString(plans.back().summary)));
  syncWhatIf();
}

void SwapPanel::syncWhatIf() {
  SwapWhatIf* w = m_model->whatIf();
  m_budgetSlider->setEnabled(w->hasPlan());
  m_budgetSpin->setEnabled(w->hasPlan());
  m_prefetchSpin->setEnabled(w->hasPlan());
  m_freeLagSpin->setEnabled(w->hasPlan());
  if (!w->hasPlan()) {
    m_whatIfLabel->clear();
    return;
  }
  const engine::SwapPrediction& p = w->prediction();
  m_syncing = true;
  const double maxGb = std::max(double(p.peakNoSwapBytes) * 1.2, double(w->hbmTargetBytes())) /
                       1e9;
  m_budgetSpin->setRange(kSliderGbPerTick, std::max(maxGb, 1.0));
  m_budgetSlider->setRange(1, int(std::ceil(std::max(maxGb, 1.0) / kSliderGbPerTick)));
  m_budgetSpin->setValue(double(w->hbmTargetBytes()) / 1e9);
  m_budgetSlider->setValue(int(std::lround(double(w->hbmTargetBytes()) / 1e9 / kSliderGbPerTick)));
  const int layers = std::max<int>(int(w->input().profile.layerForwardMs.size()), 1);
  m_prefetchSpin->setRange(0, layers);
  m_prefetchSpin->setValue(w->prefetchLayers());
  m_freeLagSpin->setRange(0, std::max(layers, int(w->freeLagLayers())));
  m_freeLagSpin->setValue(w->freeLagLayers());
  m_syncing = false;
  const bool over = p.peakBytes > w->hbmTargetBytes();
  m_whatIfLabel->setText(
      tr("Predicted peak <b>%1</b> vs budget %2%3 (without swap %4)<br>"
         "swapped %5 · exposed (reload stalls + offload waits) <b>%6 ms</b> of %7 ms copy · "
         "late reloads <b>%8</b><br>%9"
         "<span style='color:gray'>%10 · planned in %11 ms</span>")
          .arg(gb(double(p.peakBytes) / 1e9), gb(double(w->hbmTargetBytes()) / 1e9),
               over ? tr(" <span style='color:#e15759'>(over)</span>") : QString(),
               gb(double(p.peakNoSwapBytes) / 1e9), gb(double(p.swappedBytes) / 1e9))
          .arg(p.exposedMs, 0, 'f', 2)
          .arg(p.copyMs, 0, 'f', 2)
          .arg(p.lateReloads)
          .arg(recomputeLine(*w))
          .arg(QString::fromStdString(p.summary).toHtmlEscaped())
          .arg(w->lastPlanMs(), 0, 'f', 2));
}

QString SwapPanel::recomputeLine(const SwapWhatIf& w) {
  const engine::SwapPrediction& p = w.prediction();
  const SwapWhatIfInput& in = w.input();
  if (!in.note.empty()) {
    return tr("<span style='color:#e15759'>%1</span><br>")
        .arg(QString::fromStdString(in.note).toHtmlEscaped());
  }
  if (in.settings.recomputeOps.empty()) return {};
  const QString source = in.recomputeMsSource == "measured"
                             ? tr("measured")
                             : tr("estimated from FLOPs");
  return tr("recomputed %1 · recompute <b>%2 ms</b> (%3 ms a layer, %4) · "
            "added step time (exposed + recompute) <b>%5 ms</b><br>")
      .arg(gb(double(p.recomputedBytes) / 1e9))
      .arg(p.recomputeMs, 0, 'f', 2)
      .arg(in.profile.layerRecomputeMs.empty() ? 0.0 : in.profile.layerRecomputeMs.front(), 0,
           'f', 2)
      .arg(source)
      .arg(p.exposedMs + p.recomputeMs, 0, 'f', 2);
}

QString SwapPanel::whatIfText() const { return m_whatIfLabel->text(); }

void SwapPanel::replan() {
  if (!m_model || !m_model->whatIf()->hasPlan()) return;
  const auto bytes = int64_t(std::llround(m_budgetSpin->value() * 1e9));
  const Status status =
      m_model->whatIf()->setBudget(bytes, m_prefetchSpin->value(), m_freeLagSpin->value());
  if (!status.isOk()) emit message(userMessage(status));
}

}  // namespace moewb::gui
