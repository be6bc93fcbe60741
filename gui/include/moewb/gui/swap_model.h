// SwapModel: what the workbench shows about swap (moewb/engine/swap.h): the copies for the
// timeline's swap lanes, the per-step watermarks for the Swap dock's charts, the per-layer table,
// the what-if on the last plan, and what a late reload made wait.
//
// It follows a TraceDocument like ParallelModel: on opened it opens its own read-only
// TraceReader on the same file and reads swapSteps, swapPlans and swapLayerSummary (the copies
// themselves are read per timeline window, events()); on refreshed it re-reads them when the
// file's swap steps changed; on opening (another file replaces the document) and on closed it
// empties everything. hasSwap() tells the views whether to show the swap lanes and the dock. Costs: those of the reader's swap queries
// (storage::TraceReader); waiterOf does a few indexed slice reads.
// Errors: read errors come back as Status and through failed(); the model keeps what it had.
// GUI thread only.
#pragma once

#include <QObject>
#include <QPointF>
#include <QString>
#include <memory>
#include <vector>

#include "moewb/base/ids.h"
#include "moewb/base/status.h"
#include "moewb/gui/swap_layer_model.h"
#include "moewb/gui/swap_what_if.h"
#include "moewb/gui/timeline_geometry.h"
#include "moewb/storage/trace_reader.h"

namespace moewb::gui {

class TraceDocument;

// What a late reload's consumer was: the GPU kernel that waited (CUDA traces with GPU capture),
// else the phase slice that contains the reload's needed time.
struct SwapWaiter {
  enum Kind { kNone, kKernel, kPhase };
  Kind kind = kNone;
  SliceId slice;
  TrackId track;
  int64_t startNs = 0;
  int64_t durNs = 0;
  int64_t step = -1;
  std::string name;
};

// The Swap dock's per-step series (x = step). Several ranks: the largest value over ranks per
// step (the rate: moved bytes over copy time summed over ranks).
struct SwapStepSeries {
  std::vector<QPointF> hbmPeakGb;         // HBM peak with swap, GB (1e9 bytes)
  std::vector<QPointF> hbmPeakNoSwapGb;   // the same step's counterfactual without swap
  std::vector<QPointF> pinnedPeakGb;      // pinned host bytes in use at most
  std::vector<QPointF> pinnedCapacityGb;  // the pinned pool's size
  std::vector<QPointF> copyGbps;          // effective PCIe rate: bytes moved / copy time
};

// The series of `steps` (any order). Bytes moved per step are the offloaded bytes times
// (offloads + reloads) / offloads (each reload brings back an offloaded tensor), over copyMs
// (both directions); steps without copies give no rate point.
SwapStepSeries swapStepSeries(const std::vector<storage::SwapStepRow>& steps);

// The H2D rate the PCIe chart draws its reference line at (H200 pinned, one direction).
inline constexpr double kSwapPcieLineGbps = 55.0;

class SwapModel : public QObject {
  Q_OBJECT

 public:
  explicit SwapModel(QObject* parent = nullptr);
  ~SwapModel() override;

  // Follows `document` (not owned; may be null) and loads what it has open now.
  void setDocument(TraceDocument* document);
  // Opens `path` and reads its swap rows. Errors: the reader's Status (the model is then closed).
  Status open(const QString& path);
  // Re-reads the steps; the plans and the layer table too when the steps changed (or `force`).
  Status refresh(bool force = false);
  // Empties everything.
  void close();

  bool isOpen() const { return m_reader != nullptr; }
  // True when the open trace has swap rows (steps, plans or copies).
  bool hasSwap() const { return m_hasSwap; }
  // True when the trace's swap rows are simulated (CPU backend).
  bool simulated() const { return m_simulated; }
  // Ranks that get swap lanes (ascending).
  const std::vector<int32_t>& laneRanks() const { return m_ranks; }
  const std::vector<storage::SwapStepRow>& steps() const { return m_steps; }
  const std::vector<storage::SwapPlanRow>& plans() const { return m_plans; }
  SwapLayerModel* layerModel() { return &m_layers; }
  SwapWhatIf* whatIf() { return &m_whatIf; }

  // Copies overlapping `window` (all ranks), by start. Empty when nothing is open.
  Result<std::vector<storage::SwapEventRow>> events(TimeRange window);
  // What waited for `event`, a reload or an offload compute waited for (stallNs > 0; neededNs
  // is then when compute reached its free-lag wait): on a trace with GPU streams of the event's
  // rank, the first
  // kernel starting at or after neededNs on the stream that runs the most kernels from then on
  // (the compute stream; searched up to 4 s ahead); otherwise the deepest phase slice of the
  // rank's host tracks containing neededNs. kNone when nothing matches or the event is an
  // offload without a wait. Errors: read errors.
  Result<SwapWaiter> waiterOf(const storage::SwapEventRow& event);

 signals:
  // The steps, plans, table or hasSwap changed.
  void changed();
  // A read failed; `message` names the file and the problem.
  void failed(const QString& message);

 private:
  Status reload();
  Status fail(const Status& status);
  Result<SwapWaiter> kernelAfter(const std::vector<storage::TrackRow>& streams, int64_t neededNs);
  Result<SwapWaiter> phaseAt(const std::vector<storage::TrackRow>& hostTracks, int64_t neededNs);

  std::unique_ptr<storage::TraceReader> m_reader;
  TraceDocument* m_document = nullptr;
  std::vector<storage::SwapStepRow> m_steps;
  std::vector<storage::SwapPlanRow> m_plans;
  std::vector<int32_t> m_ranks;
  bool m_hasSwap = false;
  bool m_simulated = false;
  SwapLayerModel m_layers;
  SwapWhatIf m_whatIf;
};

}  // namespace moewb::gui
