// SwapPanel: the Swap dock's content for a SwapModel, in four tabs:
//   Memory   per step, the HBM peak with swap against the counterfactual peak without it, and
//            the pinned-host peak against the pool's capacity (ChartView);
//   PCIe     the effective copy rate per step (bytes moved / copy time) against a 55 GB/s line;
//   Layers   the per-layer table (SwapLayerModel), sortable;
//   What-if  the newest plan's profile re-planned on every change of the HBM budget (slider and
//            spin box, GB), the prefetch distance or the free lag (layers): the predicted peak
//            against the budget, the exposed time (reload stalls + offload waits) and late
//            reloads, with recompute (a plan that stores recompute_ops and recompute times)
//            the recomputed bytes, the recompute time and the added step time (exposed +
//            recompute), the planner's time, and the per-tensor decisions with their cost in ms
//            (SwapDecisionModel), sortable.
// The panel re-syncs on SwapModel::changed and SwapWhatIf::changed. GUI thread only.
#pragma once

#include <QWidget>

class QDoubleSpinBox;
class QLabel;
class QSlider;
class QSpinBox;
class QTabWidget;
class QTableView;

namespace moewb::gui {

class ChartView;
class SwapModel;
class SwapWhatIf;

class SwapPanel : public QWidget {
  Q_OBJECT

 public:
  explicit SwapPanel(QWidget* parent = nullptr);

  // Shows `model` (not owned).
  void setModel(SwapModel* model);
  QTabWidget* tabs() const { return m_tabs; }
  ChartView* hbmChart() const { return m_hbmChart; }
  ChartView* pinnedChart() const { return m_pinnedChart; }
  ChartView* pcieChart() const { return m_pcieChart; }
  QTableView* layerTable() const { return m_layerTable; }
  QTableView* decisionTable() const { return m_decisionTable; }
  QSlider* budgetSlider() const { return m_budgetSlider; }
  QDoubleSpinBox* budgetSpin() const { return m_budgetSpin; }
  QSpinBox* prefetchSpin() const { return m_prefetchSpin; }
  QSpinBox* freeLagSpin() const { return m_freeLagSpin; }
  // The what-if's summary text (predicted peak, budget, exposed ms, late reloads, recompute
  // and added step time when the plan recomputes, plan time).
  QString whatIfText() const;

 signals:
  // A what-if change failed (bad value or planner error), in plain words.
  void message(const QString& text);

 private:
  QWidget* createMemoryTab();
  QWidget* createPcieTab();
  QWidget* createWhatIfTab();
  void syncFromModel();
  void syncWhatIf();
  void replan();
  // The what-if label's recompute line ("" without recompute ops; the input's note if any).
  static QString recomputeLine(const SwapWhatIf& w);

  SwapModel* m_model = nullptr;
  QTabWidget* m_tabs = nullptr;
  ChartView* m_hbmChart = nullptr;
  ChartView* m_pinnedChart = nullptr;
  ChartView* m_pcieChart = nullptr;
  QTableView* m_layerTable = nullptr;
  QTableView* m_decisionTable = nullptr;
  QWidget* m_whatIfPage = nullptr;  // holds the decisions table once a model is set
  QLabel* m_planLabel = nullptr;
  QLabel* m_whatIfLabel = nullptr;
  QSlider* m_budgetSlider = nullptr;
  QDoubleSpinBox* m_budgetSpin = nullptr;
  QSpinBox* m_prefetchSpin = nullptr;
  QSpinBox* m_freeLagSpin = nullptr;
  bool m_syncing = false;
};

}  // namespace moewb::gui
