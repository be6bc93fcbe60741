// HeatmapPanel: the expert-load heat map with its controls: a mode selector (one step / max over
// steps / mean over steps / over time), a step slider with a spin box, and a line that describes
// the hovered cell. "Over time" swaps the heat map for an ExpertTimePanel (one layer's expert x
// step strip); its cell clicks come out as expertCellActivated. Keeps the controls in sync with
// the ExpertLoadModel (new steps of a live run extend the slider; the model follows the last step
// unless the user picked another). A colour-scale chooser fixes the top of the colour scale of both
// the heat map and the strip (auto = each one's data maximum, or 1.5x, 2x, 4x, 8x the layer mean)
// so two runs' heat maps compare. GUI thread only.
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
  // The colour-scale chooser: "auto" (data 0.0), then the fixed maxima of kFixedScales ("2x",
  // data 2.0).
  QComboBox* scaleChooser() const { return m_scale; }
  // Fixed colour-scale maxima offered (in "x layer mean").
  static constexpr double kFixedScales[] = {1.5, 2.0, 4.0, 8.0};
  // Fixes the colour scale of the heat map and the strip at `maxLoad` x layer mean (0 = auto).
  // A value not in kFixedScales is added to the chooser. Values <= 0 or not finite mean auto.
  void setFixedScale(double maxLoad);
  // The fixed maximum in use, 0 when automatic.
  double fixedScale() const;
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
  QComboBox* m_scale = nullptr;
  QSlider* m_slider = nullptr;
  QSpinBox* m_spin = nullptr;
  QLabel* m_hover = nullptr;
  bool m_syncing = false;
};

}  // namespace moewb::gui
