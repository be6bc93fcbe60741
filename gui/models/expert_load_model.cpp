// ExpertLoadModel: per-step grids of routed tokens, max/mean over steps, normalised load.
#include "moewb/gui/expert_load_model.h"

#include <algorithm>
#include <set>

namespace moewb::gui {

namespace {
// Rows naming layers or experts beyond these come from a corrupt file and are ignored.
constexpr int kMaxLayers = 4096;
constexpr int kMaxExperts = 4096;
}  // namespace

ExpertLoadModel::ExpertLoadModel(QObject* parent) : QAbstractTableModel(parent) {}

void ExpertLoadModel::setRows(const std::vector<storage::ExpertLoadRow>& rows) {
  beginResetModel();
  m_layers = 0;
  m_experts = 0;
  m_grids.clear();
  m_max.clear();
  m_sum.clear();
  m_step = -1;
  int layers = 0, experts = 0;
  for (const auto& r : rows) {
    if (r.layer < 0 || r.expert < 0 || r.layer >= kMaxLayers || r.expert >= kMaxExperts) continue;
    layers = std::max(layers, r.layer + 1);
    experts = std::max(experts, r.expert + 1);
  }
  resize(layers, experts);
  for (const auto& r : rows) addToGrid(r);
  recomputeAggregates();
  if (!m_grids.empty()) m_step = m_grids.rbegin()->first;
  endResetModel();
  emit stepsChanged();
}

void ExpertLoadModel::appendRows(const std::vector<storage::ExpertLoadRow>& rows) {
  if (rows.empty()) return;
  const bool following = m_grids.empty() || m_step == m_grids.rbegin()->first;
  int layers = m_layers, experts = m_experts;
  std::set<int64_t> touched;
  bool touchedOld = false;
  int64_t lastStep = 0;
  for (const auto& r : rows) {
    if (r.layer < 0 || r.expert < 0 || r.layer >= kMaxLayers || r.expert >= kMaxExperts) continue;
    layers = std::max(layers, r.layer + 1);
    experts = std::max(experts, r.expert + 1);
    // Rows of a step come together: one set lookup per run of a step, not per row.
    if (!touched.empty() && r.step == lastStep) continue;
    lastStep = r.step;
    if (touched.insert(r.step).second && m_grids.count(r.step)) touchedOld = true;
  }
  if (layers > m_layers) {
    beginInsertRows({}, m_layers, layers - 1);
    resize(layers, m_experts);
    endInsertRows();
  }
  if (experts > m_experts) {
    beginInsertColumns({}, m_experts, experts - 1);
    resize(m_layers, experts);
    endInsertColumns();
  }
  Grid* grid = nullptr;  // the grid of the last row's step (map nodes do not move)
  int64_t gridStep = 0;
  for (const auto& r : rows) {
    if (r.layer < 0 || r.expert < 0 || r.layer >= m_layers || r.expert >= m_experts) continue;
    if (!grid || r.step != gridStep) {
      grid = &m_grids[r.step];
      gridStep = r.step;
    }
    addToGrid(r, *grid);
  }
  if (touchedOld) {
    recomputeAggregates();
  } else {
    for (int64_t step : touched) {
      const Grid& g = m_grids[step];
      for (size_t i = 0; i < g.tokens.size(); ++i) {
        m_max[i] = std::max(m_max[i], g.tokens[i]);
        m_sum[i] += double(g.tokens[i]);
      }
    }
  }
  if (following && !m_grids.empty()) m_step = m_grids.rbegin()->first;
  emitAllChanged();
  emit stepsChanged();
}

void ExpertLoadModel::resize(int layers, int experts) {
  auto relayout = [&](const auto& old, auto fill) {
    std::decay_t<decltype(old)> out(size_t(layers) * size_t(experts), fill);
    for (int l = 0; l < std::min(layers, m_layers); ++l) {
      for (int e = 0; e < std::min(experts, m_experts); ++e) {
        out[size_t(l) * size_t(experts) + size_t(e)] =
            old[size_t(l) * size_t(m_experts) + size_t(e)];
      }
    }
    return out;
  };
  for (auto& [step, grid] : m_grids) {
    grid.tokens = relayout(grid.tokens, int64_t(0));
    grid.dropped = relayout(grid.dropped, int64_t(0));
    grid.biasSum = relayout(grid.biasSum, 0.0);
    grid.biasRows = relayout(grid.biasRows, int32_t(0));
  }
  m_max = relayout(m_max, int64_t(0));
  m_sum = relayout(m_sum, 0.0);
  m_layers = layers;
  m_experts = experts;
}

void ExpertLoadModel::addToGrid(const storage::ExpertLoadRow& r) {
  if (r.layer < 0 || r.expert < 0 || r.layer >= m_layers || r.expert >= m_experts) return;
  addToGrid(r, m_grids[r.step]);
}

void ExpertLoadModel::addToGrid(const storage::ExpertLoadRow& r, Grid& g) {
  if (r.layer < 0 || r.expert < 0 || r.layer >= m_layers || r.expert >= m_experts) return;
  const size_t cells = size_t(m_layers) * size_t(m_experts);
  if (g.tokens.size() != cells) {
    g.tokens.assign(cells, 0);
    g.dropped.assign(cells, 0);
    g.biasSum.assign(cells, 0.0);
    g.biasRows.assign(cells, 0);
  }
  const size_t i = size_t(r.layer) * size_t(m_experts) + size_t(r.expert);
  g.tokens[i] += r.tokens;
  g.dropped[i] += r.dropped;
  g.biasSum[i] += r.bias;
  g.biasRows[i] += 1;
}

void ExpertLoadModel::recomputeAggregates() {
  const size_t cells = size_t(m_layers) * size_t(m_experts);
  m_max.assign(cells, 0);
  m_sum.assign(cells, 0.0);
  for (const auto& [step, g] : m_grids) {
    for (size_t i = 0; i < cells; ++i) {
      m_max[i] = std::max(m_max[i], g.tokens[i]);
      m_sum[i] += double(g.tokens[i]);
    }
  }
}

void ExpertLoadModel::emitAllChanged() {
  if (m_layers > 0 && m_experts > 0) {
    emit dataChanged(index(0, 0), index(m_layers - 1, m_experts - 1));
  }
}

void ExpertLoadModel::setMode(Mode mode) {
  if (mode == m_mode) return;
  m_mode = mode;
  emitAllChanged();
}

void ExpertLoadModel::setStep(int64_t step) {
  if (step == m_step) return;
  m_step = step;
  if (m_mode == Mode::kStep) emitAllChanged();
  emit stepsChanged();
}

std::pair<int64_t, int64_t> ExpertLoadModel::stepRange() const {
  if (m_grids.empty()) return {0, 0};
  return {m_grids.begin()->first, m_grids.rbegin()->first};
}

std::vector<int64_t> ExpertLoadModel::steps() const {
  std::vector<int64_t> out;
  out.reserve(m_grids.size());
  for (const auto& [step, grid] : m_grids) out.push_back(step);
  return out;
}

double ExpertLoadModel::value(int layer, int expert) const {
  if (layer < 0 || expert < 0 || layer >= m_layers || expert >= m_experts) return 0;
  const size_t i = size_t(layer) * size_t(m_experts) + size_t(expert);
  switch (m_mode) {
    case Mode::kStep: {
      auto it = m_grids.find(m_step);
      return it == m_grids.end() ? 0.0 : double(it->second.tokens[i]);
    }
    case Mode::kMaxOverSteps:
      return double(m_max[i]);
    case Mode::kMeanOverSteps:
      return m_grids.empty() ? 0.0 : m_sum[i] / double(m_grids.size());
  }
  return 0;
}

double ExpertLoadModel::rowMean(int layer) const {
  if (m_experts == 0) return 0;
  double sum = 0;
  for (int e = 0; e < m_experts; ++e) sum += value(layer, e);
  return sum / double(m_experts);
}

double ExpertLoadModel::normalizedLoad(int layer, int expert) const {
  const double mean = rowMean(layer);
  return mean > 0 ? value(layer, expert) / mean : 0.0;
}

double ExpertLoadModel::maxNormalizedLoad() const {
  double best = 0;
  for (int l = 0; l < m_layers; ++l) {
    const double mean = rowMean(l);
    if (mean <= 0) continue;
    for (int e = 0; e < m_experts; ++e) best = std::max(best, value(l, e) / mean);
  }
  return best;
}

int ExpertLoadModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : m_layers;
}

int ExpertLoadModel::columnCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : m_experts;
}

QVariant ExpertLoadModel::data(const QModelIndex& index, int role) const {
  if (!checkIndex(index, CheckIndexOption::IndexIsValid | CheckIndexOption::ParentIsInvalid)) {
    return {};
  }
  const int layer = index.row(), expert = index.column();
  switch (role) {
    case Qt::DisplayRole:
      if (m_mode == Mode::kMeanOverSteps) return value(layer, expert);
      return qlonglong(value(layer, expert));
    case kNormalizedLoadRole:
      return normalizedLoad(layer, expert);
    case kDroppedRole: {
      auto it = m_grids.find(m_step);
      if (m_mode != Mode::kStep || it == m_grids.end()) return qlonglong(0);
      return qlonglong(it->second.dropped[size_t(layer) * size_t(m_experts) + size_t(expert)]);
    }
    case Qt::TextAlignmentRole:
      return int(Qt::AlignCenter);
    default:
      return {};
  }
}

QVariant ExpertLoadModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (role != Qt::DisplayRole) return QAbstractTableModel::headerData(section, orientation, role);
  return orientation == Qt::Horizontal ? QStringLiteral("E%1").arg(section)
                                       : QStringLiteral("L%1").arg(section);
}

}  // namespace moewb::gui
