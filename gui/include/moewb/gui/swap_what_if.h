// The Swap dock's what-if: a stored plan's profile (storage::SwapPlanRow, read by
// TraceReader::swapPlans) planned again with engine::planSwap under another HBM budget and
// prefetch distance and free lag, without running anything.
//
// swapWhatIfInput converts a plan row into the planner's inputs. The row stores the budgets, the
// prefetch distance, the free lag, [swap] ops and min_bytes, the bandwidths, the per-layer times
// and bytes and every candidate with its decision; those settings are used as stored. Plans of
// files from before free_lag_layers, ops and min_bytes were stored read 1, "" and 0 (the three
// together mean unknown, see storage::SwapPlanRow): then the free lag stays 1 and ops and
// min_bytes are recovered from the decisions: the allowed ops are those of every candidate not
// refused with "op not in swap.ops", and min_bytes is one more than the largest candidate
// refused "below swap.min_bytes" (else 0), which filters the candidates exactly as the run did.
// Bandwidths of 0 (unknown) keep SwapSettings' defaults. Recompute: the plan's recompute_ops
// and per-layer recompute times (measured or estimated, as the run planned with them) are used
// as stored, so the what-if weighs recompute against swap as the run's policy did and, at the
// run's own budget, gives the run's own auto plan. Plans of files from before those were
// stored have no recompute times: the what-if then plans without recompute and says so (note).
//
// SwapWhatIf holds one converted plan and re-plans it with the auto policy (the only one a budget
// steers) on each setBudget, timing the planner; SwapDecisionModel shows the per-tensor decisions.
// A 64-layer H200-shaped profile (448 candidates) re-plans in 15-33 ms median, 19-61 ms worst
// over 102 budgets on this 2-core host (tests/gui/swap_whatif_bench.cpp; with recompute allowed,
// 22 ms median and 44 ms worst in one run), inside the dock's 200 ms redraw target. GUI thread
// only.
#pragma once

#include <QAbstractTableModel>
#include <QObject>
#include <optional>
#include <string>

#include "moewb/base/status.h"
#include "moewb/engine/swap.h"
#include "moewb/storage/swap_queries.h"

namespace moewb::gui {

// The planner's inputs recovered from a stored plan.
struct SwapWhatIfInput {
  engine::SwapSettings settings;  // the plan's mode, budgets, prefetch, bandwidths, filters,
                                  //   recompute ops
  engine::SwapProfile profile;    // with layerRecomputeMs when the plan stores them
  std::string recomputeMsSource;  // "measured", "estimate", "" (no recompute times stored)
  std::string note;               // what the what-if cannot model for this plan, or ""
};

// Converts `plan` (see the file comment). Errors: kInvalidArgument when the per-layer vectors
// have different lengths, a tensor names a layer outside them, a mode is not off/manual/auto, a
// size, time or distance is negative, ops names an op that is not one of swapOpNames(), or
// recompute_ops one that is not one of swapRecomputeOpNames().
Result<SwapWhatIfInput> swapWhatIfInput(const storage::SwapPlanRow& plan);

// Per-tensor decisions of a prediction: layer, op, bytes (MB), keep/swap/recompute, the time it
// costs (ms) and the reason. Cost: a swap's exposed copy time (the stalls charged to its moves:
// reload stall + offload wait); a recompute's layer recompute time, counted on the layer's first
// recomputed tensor (one re-run writes all of them; the others show 0 and say so in their
// tooltip); empty for a keep. The costs add up to the prediction's exposedMs + recomputeMs.
class SwapDecisionModel : public QAbstractTableModel {
  Q_OBJECT

 public:
  enum Column { kLayer, kOp, kMb, kAction, kCostMs, kReason, kColumnCount };
  // Raw value of a cell: int layer, QString op/action/reason, double MB (1e6 bytes) and cost ms.
  static constexpr int kSortRole = Qt::UserRole + 1;

  explicit SwapDecisionModel(QObject* parent = nullptr);
  // Shows `prediction`'s decisions on `profile`'s tensors (sizes must agree; extra entries of
  // either are ignored). Model reset.
  void setDecisions(const engine::SwapProfile& profile, const engine::SwapPrediction& prediction);

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation,
                      int role = Qt::DisplayRole) const override;

 private:
  struct Row {
    int32_t layer = 0;
    QString op;
    int64_t bytes = 0;
    engine::SwapAction action = engine::SwapAction::kKeep;
    QString reason;
    double costMs = 0;  // see the class comment
    QString costNote;   // the cost cell's tooltip
  };
  QVariant rawValue(const Row& row, int column) const;
  std::vector<Row> m_rows;
};

class SwapWhatIf : public QObject {
  Q_OBJECT

 public:
  explicit SwapWhatIf(QObject* parent = nullptr);

  // Takes `plan` and re-plans it at its own HBM target (its predicted peak without swap when it
  // has none), prefetch distance and free lag. Errors: those of
  // swapWhatIfInput and planSwap (the what-if is then empty).
  Status setPlan(const storage::SwapPlanRow& plan);
  // Empties the what-if.
  void clear();
  bool hasPlan() const { return m_input.has_value(); }
  // The converted plan (valid while hasPlan()).
  const SwapWhatIfInput& input() const { return *m_input; }
  // Re-plans with the auto policy at `hbmTargetBytes` (> 0), `prefetchLayers` (>= 0) and
  // `freeLagLayers` (>= 0; nullopt: the current one, at first the plan's).
  // Errors: kFailedPrecondition without a plan, kInvalidArgument for a bad value, planSwap's.
  Status setBudget(int64_t hbmTargetBytes, int32_t prefetchLayers,
                   std::optional<int32_t> freeLagLayers = std::nullopt);
  const engine::SwapPrediction& prediction() const { return m_prediction; }
  int64_t hbmTargetBytes() const { return m_targetBytes; }
  int32_t prefetchLayers() const { return m_prefetch; }
  int32_t freeLagLayers() const { return m_freeLag; }
  // Wall time of the last planSwap call, ms.
  double lastPlanMs() const { return m_lastPlanMs; }
  SwapDecisionModel* decisionModel() { return &m_decisions; }

 signals:
  // A new prediction (or none) is available.
  void changed();

 private:
  std::optional<SwapWhatIfInput> m_input;
  engine::SwapPrediction m_prediction;
  int64_t m_targetBytes = 0;
  int32_t m_prefetch = 1;
  int32_t m_freeLag = 1;
  double m_lastPlanMs = 0;
  SwapDecisionModel m_decisions;
};

}  // namespace moewb::gui
