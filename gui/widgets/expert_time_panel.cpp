// ExpertTimePanel: layer chooser plus the expert x step heat strip.
#include "expert_time_panel.h"

#include <QComboBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QVBoxLayout>

#include "expert_strip_view.h"
#include "moewb/gui/expert_time_model.h"

namespace moewb::gui {

ExpertTimePanel::ExpertTimePanel(QWidget* parent) : QWidget(parent) {
  m_model = new ExpertTimeModel(this);
  m_layer = new QComboBox(this);
  m_layer->setToolTip(tr("MoE layer whose experts are shown over the steps"));
  m_strip = new ExpertStripView(this);
  m_strip->setModel(m_model);
  auto* hint = new QLabel(tr("experts (rows) x steps; click a cell for its experts.fwd time"),
                          this);
  hint->setStyleSheet(QStringLiteral("color: #9aa0ac;"));

  auto* controls = new QHBoxLayout;
  controls->setContentsMargins(0, 0, 0, 0);
  controls->addWidget(m_layer);
  controls->addWidget(hint, 1);
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(0, 0, 0, 0);
  layout->addLayout(controls);
  layout->addWidget(m_strip, 1);

  connect(m_layer, &QComboBox::currentIndexChanged, this, [this](int index) {
    if (index >= 0) m_model->setLayer(index);
  });
  connect(m_model, &ExpertTimeModel::changed, this, &ExpertTimePanel::syncLayers);
  connect(m_strip, &ExpertStripView::cellClicked, this, [this](qint64 step, int expert) {
    emit cellActivated(step, m_model->layer(), expert);
  });
  syncLayers();
}

void ExpertTimePanel::setSource(ExpertLoadModel* source) {
  m_model->setSource(source);
}

void ExpertTimePanel::setLayer(int layer) {
  m_layer->setCurrentIndex(layer);
}

void ExpertTimePanel::syncLayers() {
  const int layers = m_model->layerCount();
  if (m_layer->count() == layers) return;
  const QSignalBlocker block(m_layer);
  m_layer->clear();
  for (int l = 0; l < layers; ++l) m_layer->addItem(tr("layer %1").arg(l));
  m_layer->setCurrentIndex(std::clamp(m_model->layer(), 0, std::max(0, layers - 1)));
  m_layer->setEnabled(layers > 0);
}

}  // namespace moewb::gui
