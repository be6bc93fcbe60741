// HeatmapPanel: heat map plus mode, step slider/spin box and hover line.
#include "heatmap_panel.h"

#include <QComboBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QSlider>
#include <QSpinBox>
#include <QStackedWidget>
#include <QVBoxLayout>
#include <cmath>

#include "expert_strip_view.h"
#include "expert_time_panel.h"
#include "heatmap_view.h"
#include "moewb/gui/expert_load_model.h"

namespace moewb::gui {

HeatmapPanel::HeatmapPanel(QWidget* parent) : QWidget(parent) {
  auto* title = new QLabel(tr("<b>Expert load</b> (tokens routed per layer and expert)"), this);
  m_mode = new QComboBox(this);
  m_mode->addItems(
      {tr("One step"), tr("Max over steps"), tr("Mean over steps"), tr("Over time")});
  m_mode->setToolTip(tr("Show one step, per cell the maximum / mean over all steps, or one "
                        "layer's experts over the steps"));
  m_scale = new QComboBox(this);
  m_scale->addItem(tr("auto"), 0.0);
  for (double v : kFixedScales) m_scale->addItem(tr("%1x").arg(v), v);
  m_scale->setToolTip(tr("Colour scale: its top in x layer mean, auto (the data's maximum) or "
                         "fixed, so two runs' heat maps compare; cells above it draw in the top "
                         "colour and say \"above scale\""));
  m_slider = new QSlider(Qt::Horizontal, this);
  m_slider->setToolTip(tr("Step shown by the heat map"));
  m_spin = new QSpinBox(this);
  m_spin->setPrefix(tr("step "));
  m_hover = new QLabel(this);
  m_hover->setText(tr("Hover a cell for its numbers."));
  m_hover->setStyleSheet(QStringLiteral("color: #9aa0ac;"));
  m_view = new HeatmapView(this);
  m_timePanel = new ExpertTimePanel(this);
  m_pages = new QStackedWidget(this);
  m_pages->addWidget(m_view);
  m_pages->addWidget(m_timePanel);

  auto* controls = new QHBoxLayout;
  controls->addWidget(title);
  controls->addStretch(1);
  controls->addWidget(m_mode);
  controls->addWidget(m_scale);
  controls->addWidget(m_slider, 2);
  controls->addWidget(m_spin);
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(6, 6, 6, 4);
  layout->addLayout(controls);
  layout->addWidget(m_pages, 1);
  layout->addWidget(m_hover);

  connect(m_mode, &QComboBox::currentIndexChanged, this, &HeatmapPanel::onModeChanged);
  connect(m_scale, &QComboBox::currentIndexChanged, this, [this](int index) {
    const double maxLoad = index >= 0 ? m_scale->itemData(index).toDouble() : 0.0;
    m_view->setFixedScaleMax(maxLoad);
    m_timePanel->strip()->setFixedScaleMax(maxLoad);
  });
  connect(m_slider, &QSlider::valueChanged, this, [this](int v) { showStep(v); });
  connect(m_spin, &QSpinBox::valueChanged, this, [this](int v) { showStep(v); });
  auto showHover = [this](const QString& text) {
    m_hover->setText(text.isEmpty() ? tr("Hover a cell for its numbers.") : text);
  };
  connect(m_view, &HeatmapView::hoverTextChanged, this, showHover);
  connect(m_timePanel->strip(), &ExpertStripView::hoverTextChanged, this, showHover);
  connect(m_timePanel, &ExpertTimePanel::cellActivated, this,
          &HeatmapPanel::expertCellActivated);
  syncControls();
}

void HeatmapPanel::setModel(ExpertLoadModel* model) {
  if (m_model) disconnect(m_model, nullptr, this, nullptr);
  m_model = model;
  m_view->setModel(model);
  m_timePanel->setSource(model);
  if (m_model) {
    connect(m_model, &ExpertLoadModel::stepsChanged, this, &HeatmapPanel::syncControls);
    connect(m_model, &QAbstractItemModel::modelReset, this, &HeatmapPanel::syncControls);
  }
  syncControls();
}

void HeatmapPanel::setFixedScale(double maxLoad) {
  const double fixed = maxLoad > 0 && std::isfinite(maxLoad) ? maxLoad : 0.0;
  int index = m_scale->findData(fixed);
  if (index < 0) {
    m_scale->addItem(tr("%1x").arg(fixed), fixed);
    index = m_scale->count() - 1;
  }
  m_scale->setCurrentIndex(index);
}

double HeatmapPanel::fixedScale() const {
  return m_view->fixedScaleMax();
}

void HeatmapPanel::showStep(qint64 step) {
  if (m_syncing || !m_model) return;
  // In "Over time" the step is marked on the strip; otherwise the heat map shows that step.
  const bool overTime = m_mode->currentIndex() == kOverTimeIndex;
  if (!overTime && m_model->mode() != ExpertLoadModel::Mode::kStep) m_mode->setCurrentIndex(0);
  m_model->setStep(step);
  syncControls();
}

void HeatmapPanel::onModeChanged(int index) {
  m_pages->setCurrentIndex(index == kOverTimeIndex ? 1 : 0);
  if (!m_model) return;
  if (index == kOverTimeIndex) {
    syncControls();
    return;
  }
  static constexpr ExpertLoadModel::Mode kModes[] = {ExpertLoadModel::Mode::kStep,
                                                     ExpertLoadModel::Mode::kMaxOverSteps,
                                                     ExpertLoadModel::Mode::kMeanOverSteps};
  m_model->setMode(kModes[std::clamp(index, 0, 2)]);
  syncControls();
}

void HeatmapPanel::syncControls() {
  m_syncing = true;
  // O(1): this runs for every chunk of expert loads while a trace streams in.
  const bool any = m_model && m_model->hasSteps();
  const auto [firstStep, lastStep] = any ? m_model->stepRange() : std::pair<int64_t, int64_t>{};
  const int first = int(firstStep);
  const int last = int(lastStep);
  m_slider->setRange(first, last);
  m_spin->setRange(first, last);
  const bool stepMode = m_model && m_model->mode() == ExpertLoadModel::Mode::kStep &&
                        m_mode->currentIndex() != kOverTimeIndex;
  m_slider->setEnabled(any && stepMode);
  m_spin->setEnabled(any && stepMode);
  m_mode->setEnabled(any);
  if (m_model && any) {
    m_slider->setValue(int(m_model->step()));
    m_spin->setValue(int(m_model->step()));
  }
  m_timePanel->strip()->setMarkedStep(m_model && any ? m_model->step() : -1);
  m_syncing = false;
}

}  // namespace moewb::gui
