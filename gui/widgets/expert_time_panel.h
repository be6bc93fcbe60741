// ExpertTimePanel: the "Over time" page of the Expert load dock: a layer chooser above an
// ExpertStripView of that layer (expert x step heat strip with the imbalance and drop-rate line).
// It owns the ExpertTimeModel that reads the dock's ExpertLoadModel, so it follows a live run.
// A click on a cell is reported as cellActivated(step, layer, expert). GUI thread only.
#pragma once

#include <QWidget>

class QComboBox;

namespace moewb::gui {

class ExpertLoadModel;
class ExpertStripView;
class ExpertTimeModel;

class ExpertTimePanel : public QWidget {
  Q_OBJECT

 public:
  explicit ExpertTimePanel(QWidget* parent = nullptr);

  // Reads `source` (not owned; may be null).
  void setSource(ExpertLoadModel* source);
  // Chooses the layer shown (as the chooser does).
  void setLayer(int layer);
  ExpertTimeModel* model() const { return m_model; }
  ExpertStripView* strip() const { return m_strip; }
  QComboBox* layerChooser() const { return m_layer; }

 signals:
  // A strip cell was clicked: its (hottest covered) step, the layer shown and the expert.
  void cellActivated(qint64 step, int layer, int expert);

 private:
  void syncLayers();

  ExpertTimeModel* m_model = nullptr;
  ExpertStripView* m_strip = nullptr;
  QComboBox* m_layer = nullptr;
};

}  // namespace moewb::gui
