// HeatmapPanel: the expert-load heat map with its controls: a mode selector (one step / max over
// steps / mean over steps), a step slider with a spin box, and a line that describes the hovered
// cell. Keeps the controls in sync with the ExpertLoadModel (new steps of a live run extend the
// slider; the model follows the last step unless the user picked another). GUI thread only.
#pragma once

#include <QWidget>

class QComboBox;
class QLabel;
class QSlider;
class QSpinBox;

namespace moewb::gui {

class ExpertLoadModel;
class HeatmapView;

class HeatmapPanel : public QWidget {
  Q_OBJECT

 public:
  explicit HeatmapPanel(QWidget* parent = nullptr);

  // Shows `model` (not owned).
  void setModel(ExpertLoadModel* model);
  HeatmapView* view() const { return m_view; }

 public slots:
  // Shows `step` in step mode (e.g. when a step is clicked on the timeline).
  void showStep(qint64 step);

 private:
  void syncControls();
  void onModeChanged(int index);

  ExpertLoadModel* m_model = nullptr;
  HeatmapView* m_view = nullptr;
  QComboBox* m_mode = nullptr;
  QSlider* m_slider = nullptr;
  QSpinBox* m_spin = nullptr;
  QLabel* m_hover = nullptr;
  bool m_syncing = false;
};

}  // namespace moewb::gui
