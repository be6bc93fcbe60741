// The Swap dock's what-if: stored plan -> planner inputs, re-planning, the decisions table.
#include "moewb/gui/swap_what_if.h"

#include <QElapsedTimer>
#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "moewb/base/text.h"

namespace moewb::gui {

namespace {

Status invalid(const std::string& what) {
  return Status(StatusCode::kInvalidArgument, "swap plan: " + what);
}

Result<engine::SwapMode> parseMode(const std::string& mode) {
  if (mode == "off") return engine::SwapMode::kOff;
  if (mode == "manual") return engine::SwapMode::kManual;
  if (mode == "auto") return engine::SwapMode::kAuto;
  return invalid("mode '" + mode + "' is not one of off, manual, auto");
}

// Whether `plan` stores free_lag_layers, ops and min_bytes (files from before them read 1, ""
// and 0, which together mean unknown).
bool storesFilters(const storage::SwapPlanRow& plan) {
  return !(plan.freeLagLayers == 1 && plan.ops.empty() && plan.minBytes == 0);
}

// A stored comma list of names from `all` ("" = `ifEmpty`). Errors: a name not in `all`, named
// `what`.
Result<std::vector<std::string>> parseOpList(const std::string& text,
                                             const std::vector<std::string>& all,
                                             const std::vector<std::string>& ifEmpty,
                                             const std::string& what) {
  if (text.empty()) return ifEmpty;
  std::vector<std::string> ops = engine::splitSwapOpList(text);
  for (const std::string& name : ops) {
    if (std::find(all.begin(), all.end(), name) == all.end()) {
      return invalid(what + " names '" + name + "', not one of " + joinText(all, ", "));
    }
  }
  return ops;
}

// [swap] ops as stored: a comma list ("" = all). Errors: a name not in swapOpNames().
Result<std::vector<std::string>> parseOps(const std::string& text) {
  const auto& all = engine::swapOpNames();
  return parseOpList(text, all, all, "ops");
}

// swap.recompute_ops as stored ("" = none). Errors: a name not in swapRecomputeOpNames().
Result<std::vector<std::string>> parseRecomputeOps(const std::string& text) {
  return parseOpList(text, engine::swapRecomputeOpNames(), {}, "recompute_ops");
}

// Whether the plan's decisions show recompute (a recomputed tensor, or a reason that weighed it).
bool showsRecompute(const storage::SwapPlanRow& plan) {
  return std::any_of(plan.tensors.begin(), plan.tensors.end(), [](const auto& t) {
    return t.recomputed || t.reason.find("recompute") != std::string::npos;
  });
}

// The recompute ops and per-layer times of `plan` into `in` (see the header). Errors: a bad
// recompute_ops name, a time vector of another length than the layers, a negative or
// non-finite time.
Status convertRecompute(const storage::SwapPlanRow& plan, SwapWhatIfInput& in) {
  const size_t layers = plan.layerForwardMs.size();
  if (plan.layerRecomputeMs.empty()) {
    in.settings.recomputeOps.clear();
    if (showsRecompute(plan)) {
      in.note = "this trace does not store the recompute times (written before they were), so "
                "the what-if plans without recompute";
    }
    return Status::ok();
  }
  if (plan.layerRecomputeMs.size() != layers) {
    return invalid("recompute times for " + std::to_string(plan.layerRecomputeMs.size()) +
                   " layers, the profile has " + std::to_string(layers));
  }
  for (double v : plan.layerRecomputeMs) {
    if (!(v >= 0) || !std::isfinite(v)) return invalid("a negative or non-finite recompute time");
  }
  MOEWB_ASSIGN_OR_RETURN(in.settings.recomputeOps, parseRecomputeOps(plan.recomputeOps));
  in.profile.layerRecomputeMs = plan.layerRecomputeMs;
  in.recomputeMsSource = plan.recomputeMsSource;
  return Status::ok();
}

// [swap] ops and min_bytes as the decisions show them (see the header).
void recoverFilters(const storage::SwapPlanRow& plan, engine::SwapSettings& s) {
  std::set<std::string> refusedOps;
  int64_t belowMax = -1;
  for (const auto& t : plan.tensors) {
    if (t.reason == "op not in swap.ops") {
      refusedOps.insert(t.op);
    } else if (t.reason == "below swap.min_bytes") {
      belowMax = std::max(belowMax, t.bytes);
    }
  }
  s.ops.clear();
  for (const std::string& op : engine::swapOpNames()) {
    if (!refusedOps.count(op)) s.ops.push_back(op);
  }
  // With no candidate below min_bytes, 0 filters as the run did.
  s.minBytes = belowMax >= 0 ? belowMax + 1 : 0;
}

}  // namespace

Result<SwapWhatIfInput> swapWhatIfInput(const storage::SwapPlanRow& plan) {
  const size_t layers = plan.layerForwardMs.size();
  if (plan.layerBackwardMs.size() != layers || plan.layerOtherBytes.size() != layers) {
    return invalid("per-layer profile lengths differ (forward " + std::to_string(layers) +
                   ", backward " + std::to_string(plan.layerBackwardMs.size()) + ", other " +
                   std::to_string(plan.layerOtherBytes.size()) + ")");
  }
  SwapWhatIfInput in;
  MOEWB_ASSIGN_OR_RETURN(in.settings.mode, parseMode(plan.mode));
  if (plan.hbmTargetBytes < 0 || plan.pinnedBudgetBytes < 0 || plan.fixedBytes < 0 ||
      plan.prefetchLayers < 0 || plan.freeLagLayers < 0 || plan.minBytes < 0 ||
      plan.turnMs < 0) {
    return invalid("negative budget, size, prefetch distance, free lag or time");
  }
  in.settings.hbmTargetBytes = plan.hbmTargetBytes;
  in.settings.pinnedBudgetBytes = plan.pinnedBudgetBytes;
  in.settings.prefetchLayers = plan.prefetchLayers;
  in.settings.freeLagLayers = plan.freeLagLayers;
  if (plan.d2hGbps > 0) in.settings.d2hBytesPerMs = plan.d2hGbps * 1e6;
  if (plan.h2dGbps > 0) in.settings.h2dBytesPerMs = plan.h2dGbps * 1e6;
  if (plan.bidirGbps > 0) in.settings.bidirBytesPerMs = plan.bidirGbps * 1e6;
  if (storesFilters(plan)) {
    MOEWB_ASSIGN_OR_RETURN(in.settings.ops, parseOps(plan.ops));
    in.settings.minBytes = plan.minBytes;
  } else {
    recoverFilters(plan, in.settings);
  }
  in.profile.layerForwardMs = plan.layerForwardMs;
  in.profile.layerBackwardMs = plan.layerBackwardMs;
  in.profile.layerOtherBytes = plan.layerOtherBytes;
  in.profile.turnMs = plan.turnMs;
  in.profile.fixedBytes = plan.fixedBytes;
  MOEWB_RETURN_IF_ERROR(convertRecompute(plan, in));
  for (const auto& t : plan.tensors) {
    if (t.layer < 0 || size_t(t.layer) >= layers) {
      return invalid("tensor " + t.op + " names layer " + std::to_string(t.layer) + " of " +
                     std::to_string(layers));
    }
    if (t.bytes < 0) return invalid("tensor " + t.op + " has negative bytes");
    in.profile.tensors.push_back({t.layer, t.op, t.bytes});
  }
  return in;
}

SwapDecisionModel::SwapDecisionModel(QObject* parent) : QAbstractTableModel(parent) {}

void SwapDecisionModel::setDecisions(const engine::SwapProfile& profile,
                                     const engine::SwapPrediction& prediction) {
  beginResetModel();
  m_rows.clear();
  const size_t n = std::min(profile.tensors.size(), prediction.decisions.size());
  std::vector<double> stallMs(n, 0.0);
  for (const auto& move : prediction.moves) {
    if (move.tensor >= 0 && size_t(move.tensor) < n) stallMs[size_t(move.tensor)] += move.stallMs;
  }
  std::map<int32_t, QString> recomputeCharged;  // layer -> the op its re-run is charged to
  for (size_t i = 0; i < n; ++i) {
    const auto& t = profile.tensors[i];
    const auto& d = prediction.decisions[i];
    Row row{t.layer, QString::fromStdString(t.op), t.bytes, d.action,
            QString::fromStdString(d.reason), 0.0, {}};
    if (d.action == engine::SwapAction::kSwap) {
      row.costMs = stallMs[i];
      row.costNote = tr("exposed copy time: this tensor's reload stall and offload wait");
    } else if (d.action == engine::SwapAction::kRecompute) {
      const auto charged = recomputeCharged.find(t.layer);
      if (charged == recomputeCharged.end()) {
        const size_t l = size_t(t.layer);
        row.costMs = l < profile.layerRecomputeMs.size() ? profile.layerRecomputeMs[l] : 0.0;
        row.costNote = tr("layer %1's recompute: one re-run writes every recomputed tensor of "
                          "the layer").arg(t.layer);
        recomputeCharged.emplace(t.layer, row.op);
      } else {
        row.costNote = tr("recomputed by the re-run counted on %1").arg(charged->second);
      }
    }
    m_rows.push_back(std::move(row));
  }
  endResetModel();
}

int SwapDecisionModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : int(m_rows.size());
}

int SwapDecisionModel::columnCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : kColumnCount;
}

QVariant SwapDecisionModel::rawValue(const Row& row, int column) const {
  switch (column) {
    case kLayer: return row.layer;
    case kOp: return row.op;
    case kMb: return double(row.bytes) / 1e6;
    case kAction:
      return row.action == engine::SwapAction::kSwap        ? tr("swap")
             : row.action == engine::SwapAction::kRecompute ? tr("recompute")
                                                            : tr("keep");
    case kCostMs: return row.costMs;
    case kReason: return row.reason;
    default: return {};
  }
}

QVariant SwapDecisionModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid() || index.row() >= int(m_rows.size()) || index.column() >= kColumnCount) {
    return {};
  }
  const Row& row = m_rows[size_t(index.row())];
  if (role == kSortRole) return rawValue(row, index.column());
  if (role == Qt::DisplayRole) {
    if (index.column() == kMb) return QString::number(double(row.bytes) / 1e6, 'f', 1);
    if (index.column() == kCostMs) {
      return row.action == engine::SwapAction::kKeep ? QString()
                                                     : QString::number(row.costMs, 'f', 2);
    }
    return rawValue(row, index.column());
  }
  if (role == Qt::ToolTipRole && index.column() == kReason) return row.reason;
  if (role == Qt::ToolTipRole && index.column() == kCostMs && !row.costNote.isEmpty()) {
    return row.costNote;
  }
  return {};
}

QVariant SwapDecisionModel::headerData(int section, Qt::Orientation orientation,
                                       int role) const {
  if (orientation != Qt::Horizontal || role != Qt::DisplayRole) return {};
  switch (section) {
    case kLayer: return tr("Layer");
    case kOp: return tr("Op");
    case kMb: return tr("MB");
    case kAction: return tr("Decision");
    case kCostMs: return tr("Cost ms");
    case kReason: return tr("Reason");
    default: return {};
  }
}

SwapWhatIf::SwapWhatIf(QObject* parent) : QObject(parent) {}

void SwapWhatIf::clear() {
  m_input.reset();
  m_prediction = {};
  m_decisions.setDecisions({}, {});
  emit changed();
}

Status SwapWhatIf::setPlan(const storage::SwapPlanRow& plan) {
  auto input = swapWhatIfInput(plan);
  if (!input.isOk()) {
    clear();
    return input.status();
  }
  m_input = std::move(input).value();
  // A plan made without a target (auto on the CPU backend) starts the slider at its peak.
  const int64_t target = plan.hbmTargetBytes > 0
                             ? plan.hbmTargetBytes
                             : std::max<int64_t>(plan.predictedPeakNoSwapBytes, 1);
  const Status status =
      setBudget(target, m_input->settings.prefetchLayers, m_input->settings.freeLagLayers);
  if (!status.isOk()) clear();
  return status;
}

Status SwapWhatIf::setBudget(int64_t hbmTargetBytes, int32_t prefetchLayers,
                             std::optional<int32_t> freeLagLayers) {
  if (!m_input) return Status(StatusCode::kFailedPrecondition, "swap what-if: no plan");
  const int32_t freeLag = freeLagLayers.value_or(m_freeLag);
  if (hbmTargetBytes <= 0 || prefetchLayers < 0 || freeLag < 0) {
    return invalid("HBM budget must be > 0, prefetch layers >= 0 and free lag layers >= 0");
  }
  engine::SwapSettings settings = m_input->settings;
  settings.mode = engine::SwapMode::kAuto;
  settings.hbmTargetBytes = hbmTargetBytes;
  settings.prefetchLayers = prefetchLayers;
  settings.freeLagLayers = freeLag;
  QElapsedTimer timer;
  timer.start();
  auto prediction = engine::planSwap(settings, m_input->profile);
  m_lastPlanMs = double(timer.nsecsElapsed()) / 1e6;
  if (!prediction.isOk()) return prediction.status();
  m_prediction = std::move(prediction).value();
  m_targetBytes = hbmTargetBytes;
  m_prefetch = prefetchLayers;
  m_freeLag = freeLag;
  m_decisions.setDecisions(m_input->profile, m_prediction);
  emit changed();
  return Status::ok();
}

}  // namespace moewb::gui
