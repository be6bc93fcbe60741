// ExpertTimeModel: one layer's expert x step matrix, per-step imbalance and drop rate, columns.
#include "moewb/gui/expert_time_model.h"

#include <QAbstractItemModel>
#include <algorithm>
#include <cmath>
#include <tuple>

#include "moewb/gui/expert_load_model.h"

namespace moewb::gui {

ExpertTimeModel::ExpertTimeModel(QObject* parent) : QObject(parent) {}

void ExpertTimeModel::setSource(ExpertLoadModel* source) {
  if (m_source) disconnect(m_source, nullptr, this, nullptr);
  m_source = source;
  if (m_source) {
    connect(m_source, &ExpertLoadModel::stepsChanged, this, &ExpertTimeModel::markStale);
    connect(m_source, &QAbstractItemModel::modelReset, this, &ExpertTimeModel::markStale);
    connect(m_source, &QAbstractItemModel::rowsInserted, this, &ExpertTimeModel::markStale);
    connect(m_source, &QAbstractItemModel::columnsInserted, this, &ExpertTimeModel::markStale);
  }
  markStale();
}

void ExpertTimeModel::setLayer(int layer) {
  if (layer == m_layer) return;
  m_layer = std::max(0, layer);
  markStale();
}

void ExpertTimeModel::markStale() {
  m_stale = true;
  emit changed();
}

int ExpertTimeModel::layer() const {
  return std::clamp(m_layer, 0, std::max(0, layerCount() - 1));
}

int ExpertTimeModel::layerCount() const {
  return m_source ? m_source->rowCount() : 0;
}
int ExpertTimeModel::expertCount() const {
  return m_source ? m_source->columnCount() : 0;
}

void ExpertTimeModel::rebuild() const {
  const int layers = layerCount();
  const int layer = this->layer();
  if (!m_stale && layer == m_builtLayer) return;
  m_stale = false;
  m_builtLayer = layer;
  m_experts = layers > 0 ? expertCount() : 0;
  m_steps.clear();
  m_tokens.clear();
  m_dropped.clear();
  m_bias.clear();
  m_imbalance.clear();
  m_dropRate.clear();
  m_maxLoad = 0;
  if (m_experts == 0) return;
  const size_t E = size_t(m_experts);
  for (const auto& [step, grid] : m_source->grids()) {
    const size_t base = size_t(layer) * E;
    if (grid.tokens.size() < base + E) continue;
    m_steps.push_back(step);
    int64_t sum = 0, max = 0, dropped = 0;
    for (size_t e = 0; e < E; ++e) {
      const int64_t t = grid.tokens[base + e];
      m_tokens.push_back(t);
      m_dropped.push_back(grid.dropped[base + e]);
      const int32_t n = grid.biasRows[base + e];
      m_bias.push_back(n > 0 ? grid.biasSum[base + e] / n : 0.0);
      sum += t;
      max = std::max(max, t);
      dropped += grid.dropped[base + e];
    }
    const double mean = double(sum) / double(E);
    m_imbalance.push_back(sum > 0 ? double(max) / mean : 0.0);
    m_dropRate.push_back(sum > 0 ? double(dropped) / double(sum) : 0.0);
    m_maxLoad = std::max(m_maxLoad, m_imbalance.back());
  }
}

const std::vector<int64_t>& ExpertTimeModel::steps() const {
  rebuild();
  return m_steps;
}

int ExpertTimeModel::stepIndex(int64_t step) const {
  rebuild();
  auto it = std::lower_bound(m_steps.begin(), m_steps.end(), step);
  return it != m_steps.end() && *it == step ? int(it - m_steps.begin()) : -1;
}

int64_t ExpertTimeModel::tokens(int stepIndex, int expert) const {
  rebuild();
  if (stepIndex < 0 || size_t(stepIndex) >= m_steps.size() || expert < 0 || expert >= m_experts) {
    return 0;
  }
  return m_tokens[size_t(stepIndex) * size_t(m_experts) + size_t(expert)];
}

int64_t ExpertTimeModel::dropped(int stepIndex, int expert) const {
  rebuild();
  if (stepIndex < 0 || size_t(stepIndex) >= m_steps.size() || expert < 0 || expert >= m_experts) {
    return 0;
  }
  return m_dropped[size_t(stepIndex) * size_t(m_experts) + size_t(expert)];
}

double ExpertTimeModel::bias(int stepIndex, int expert) const {
  rebuild();
  if (stepIndex < 0 || size_t(stepIndex) >= m_steps.size() || expert < 0 || expert >= m_experts) {
    return 0;
  }
  return m_bias[size_t(stepIndex) * size_t(m_experts) + size_t(expert)];
}

double ExpertTimeModel::imbalance(int stepIndex) const {
  rebuild();
  return stepIndex >= 0 && size_t(stepIndex) < m_steps.size() ? m_imbalance[size_t(stepIndex)]
                                                                : 0.0;
}

double ExpertTimeModel::dropRate(int stepIndex) const {
  rebuild();
  return stepIndex >= 0 && size_t(stepIndex) < m_steps.size() ? m_dropRate[size_t(stepIndex)]
                                                                : 0.0;
}

double ExpertTimeModel::maxNormalizedLoad() const {
  rebuild();
  return m_maxLoad;  // the largest per-step max / mean is the largest cell's normalised load
}

double ExpertTimeModel::colorScaleMax() const {
  return std::max(1.5, std::ceil(maxNormalizedLoad() * 2.0) / 2.0);
}

std::vector<ExpertTimeModel::Column> ExpertTimeModel::columns(int maxColumns) const {
  rebuild();
  const size_t S = m_steps.size();
  const size_t E = size_t(m_experts);
  if (S == 0 || E == 0) return {};
  const size_t n = std::min(S, size_t(std::max(1, maxColumns)));
  std::vector<Column> out(n);
  for (size_t c = 0; c < n; ++c) {
    const size_t first = c * S / n;
    const size_t end = std::max(first + 1, (c + 1) * S / n);
    Column& col = out[c];
    col.firstStep = m_steps[first];
    col.lastStep = m_steps[end - 1];
    col.stepCount = int32_t(end - first);
    col.tokens.assign(E, 0);
    col.dropped.assign(E, 0);
    col.load.assign(E, 0.0);
    col.bias.assign(m_bias.begin() + ptrdiff_t((end - 1) * E),
                    m_bias.begin() + ptrdiff_t(end * E));
    for (size_t i = first; i < end; ++i) {
      int64_t sum = 0;
      for (size_t e = 0; e < E; ++e) sum += m_tokens[i * E + e];
      const double mean = double(sum) / double(E);
      for (size_t e = 0; e < E; ++e) {
        const int64_t t = m_tokens[i * E + e];
        col.tokens[e] = std::max(col.tokens[e], t);
        col.dropped[e] = std::max(col.dropped[e], m_dropped[i * E + e]);
        if (mean > 0) col.load[e] = std::max(col.load[e], double(t) / mean);
      }
      col.imbalance = std::max(col.imbalance, m_imbalance[i]);
      col.dropRate = std::max(col.dropRate, m_dropRate[i]);
    }
  }
  return out;
}

std::optional<FoundSlice> findLayerSlice(const TimelineData& data,
                                         const std::vector<storage::StepRow>& steps,
                                         const std::string& name, int64_t step, int32_t layer) {
  TimeRange window;  // empty = all time
  for (const storage::StepRow& row : steps) {
    if (row.step != step) continue;
    if (window.isEmpty()) {
      window = {row.startNs, row.endNs};
    } else {
      window = {std::min(window.startNs, row.startNs), std::max(window.endNs, row.endNs)};
    }
  }
  int32_t nameId = -1;
  for (size_t i = 0; i < data.names().size(); ++i) {
    if (data.names()[i] == name) nameId = int32_t(i);
  }
  if (nameId < 0) return std::nullopt;
  std::optional<FoundSlice> best;
  for (const TimelineLane& lane : data.lanes()) {
    size_t first = 0, last = lane.slices.size();
    if (!window.isEmpty()) {
      std::tie(first, last) = TimelineData::visibleRange(lane, window.startNs, window.endNs);
    }
    for (size_t i = first; i < last; ++i) {
      const TimelineSlice& s = lane.slices[i];
      if (s.nameId != nameId || s.step != step || s.layer != layer) continue;
      if (!best || s.startNs < best->slice.startNs) best = FoundSlice{lane.track, s};
      break;  // slices are in start order: the first match is the lane's earliest
    }
  }
  return best;
}

}  // namespace moewb::gui
