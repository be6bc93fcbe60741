// ExpertTimeModel: the expert load of one MoE layer over time, for the "Over time" mode of the
// Expert load dock: an expert x step matrix of tokens routed, tokens dropped and the
// aux-loss-free router bias, and per step the layer's imbalance (max / mean over experts of the
// tokens routed; 1.0 = balanced) and drop rate (dropped / routed, over all experts).
//
// It reads the per-step grids of an ExpertLoadModel (tokens and dropped summed over ranks, bias
// the mean over the rows read), so it follows a live run: the source's signals mark it stale and
// it rebuilds on the next read (O(steps * experts) for the chosen layer).
//
// columns(n) decimates to at most n columns (one per pixel of the strip): column c covers the
// steps [c * S / n, (c + 1) * S / n) of the S steps with rows. Per column and expert: tokens,
// dropped and the normalised load are the MAXIMUM over the covered steps (a hot expert in one
// step stays hot at any zoom), the bias is that of the LAST covered step (it is a state that
// drifts); the column's imbalance and drop rate are the maximum over its steps. With n >= S every
// column is one step. GUI thread only; no widgets.
#pragma once

#include <QObject>
#include <QPointer>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "moewb/gui/timeline_data.h"
#include "moewb/gui/timeline_geometry.h"
#include "moewb/storage/rows.h"

namespace moewb::gui {

class ExpertLoadModel;

// A host slice found on the timeline: its track and the slice.
struct FoundSlice {
  TrackId track;
  TimelineSlice slice;
};

// The earliest host slice named `name` (e.g. "experts.fwd") of step `step` and layer `layer`,
// over every lane of `data` (every rank and thread), searched inside the time span of that
// step's rows in `steps` (all ranks; all time when the step has no row); nullopt when there is
// none. O(step rows + lanes * (log n + slices in the span)).
std::optional<FoundSlice> findLayerSlice(const TimelineData& data,
                                         const std::vector<storage::StepRow>& steps,
                                         const std::string& name, int64_t step, int32_t layer);

class ExpertTimeModel : public QObject {
  Q_OBJECT

 public:
  // One column of the strip (one step, or several after decimation).
  struct Column {
    int64_t firstStep = 0;  // first step covered
    int64_t lastStep = 0;   // last step covered (== firstStep without decimation)
    int32_t stepCount = 0;  // steps with rows covered
    std::vector<int64_t> tokens;   // [experts] max over the covered steps
    std::vector<int64_t> dropped;  // [experts] max over the covered steps
    std::vector<double> load;      // [experts] max of tokens / that step's expert mean
    std::vector<double> bias;      // [experts] mean bias over ranks at lastStep
    double imbalance = 0;  // max over the covered steps
    double dropRate = 0;   // max over the covered steps
  };

  explicit ExpertTimeModel(QObject* parent = nullptr);

  // Reads `source` (not owned; may be null). Emits changed().
  void setSource(ExpertLoadModel* source);
  // Chooses the layer (clamped into [0, layerCount() - 1] when reading). Emits changed().
  void setLayer(int layer);
  // The layer shown: the chosen one clamped to the layers the source has (0 when none).
  int layer() const;
  // Layers and experts of the source (0 without a source).
  int layerCount() const;
  int expertCount() const;

  // Steps with rows, ascending (the matrix's columns before decimation).
  const std::vector<int64_t>& steps() const;
  // The undecimated matrix of the layer: step index i (into steps()), expert e. 0 outside.
  int64_t tokens(int stepIndex, int expert) const;
  int64_t dropped(int stepIndex, int expert) const;
  double bias(int stepIndex, int expert) const;
  // Per step of steps(): max / mean over experts of tokens (0 when the layer routed nothing),
  // and dropped / routed summed over experts (0 when nothing was routed).
  double imbalance(int stepIndex) const;
  double dropRate(int stepIndex) const;
  // The index of `step` in steps(), or -1.
  int stepIndex(int64_t step) const;

  // The strip decimated to at most `maxColumns` (>= 1) columns, as described above. O(steps *
  // experts).
  std::vector<Column> columns(int maxColumns) const;
  // Largest normalised load (tokens / step mean) of any cell of the layer (0 when empty).
  double maxNormalizedLoad() const;
  // Upper end of the colour scale in "x layer mean", as HeatmapView's: >= 1.5, in halves.
  double colorScaleMax() const;

 signals:
  // The data, or the chosen layer, changed.
  void changed();

 private:
  void markStale();
  void rebuild() const;

  QPointer<ExpertLoadModel> m_source;
  int m_layer = 0;
  mutable bool m_stale = true;
  mutable int m_builtLayer = -1;
  mutable std::vector<int64_t> m_steps;      // [S]
  mutable std::vector<int64_t> m_tokens;     // [S * experts]
  mutable std::vector<int64_t> m_dropped;    // [S * experts]
  mutable std::vector<double> m_bias;        // [S * experts]
  mutable std::vector<double> m_imbalance;   // [S]
  mutable std::vector<double> m_dropRate;    // [S]
  mutable double m_maxLoad = 0;
  mutable int m_experts = 0;
};

}  // namespace moewb::gui
