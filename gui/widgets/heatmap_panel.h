// HeatmapPanel: the expert-load heat map with its controls: a mode selector (one step / max over
// steps / mean over steps / over time), a step slider with a spin box, and a line that describes
// the hovered cell. "Over time" swaps the heat map for an ExpertTimePanel (one layer's expert x
// step strip); its cell clicks come out as expertCellActivated. Keeps the controls in sync with
// the ExpertLoadModel (new steps of a live run extend the slider; the model follows the last step
// unless the user picked another). GUI thread only.
#pragma once

#include <QWidget>

class QComboBox;
class QLabel;
class QSlider;
class QSpinBox;
class QStackedWidget;

namespace moewb::gui {

class ExpertLoadModel;
class ExpertTimePanel;
class HeatmapView;

class HeatmapPanel : public QWidget {
  Q_OBJECT

 public:
  explicit HeatmapPanel(QWidget* parent = nullptr);

  // Shows `model` (not owned).
  void setModel(ExpertLoadModel* model);
  HeatmapView* view() const { return m_view; }
  ExpertTimePanel* timePanel() const { return m_timePanel; }
  QComboBox* modeChooser() const { return m_mode; }
  // Index of the "Over time" mode in modeChooser().
  static constexpr int kOverTimeIndex = 3;

 signals:
  // A cell of the "Over time" strip was clicked (step, layer, expert).
  void expertCellActivated(qint64 step, int layer, int expert);

 public slots:
  // Shows `step` in step mode (e.g. when a step is clicked on the timeline); in "Over time"
  // mode it stays there and marks the step on the strip.
  void showStep(qint64 step);

 private:
  void syncControls();
  void onModeChanged(int index);

  ExpertLoadModel* m_model = nullptr;
  HeatmapView* m_view = nullptr;
  ExpertTimePanel* m_timePanel = nullptr;
  QStackedWidget* m_pages = nullptr;
  QComboBox* m_mode = nullptr;
  QSlider* m_slider = nullptr;
  QSpinBox* m_spin = nullptr;
  QLabel* m_hover = nullptr;
  bool m_syncing = false;
};

}  // namespace moewb::gui
