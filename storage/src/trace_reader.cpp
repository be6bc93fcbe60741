// TraceReader's factory, the default (non-streaming) implementations of its forEach* methods and
// the defaults of the memory and GPU queries (no memory events, no GPU rows).
#include "moewb/storage/trace_reader.h"

#include "sqlite_trace_reader.h"

namespace moewb::storage {

Result<std::unique_ptr<TraceReader>> TraceReader::open(const std::string& path,
                                                       const ReaderOptions& options) {
  MOEWB_ASSIGN_OR_RETURN(auto reader, detail::SqliteTraceReader::open(path, options));
  return std::unique_ptr<TraceReader>(std::move(reader));
}

Status TraceReader::forEachSlice(const std::function<bool(const SliceRow&)>& visit) {
  MOEWB_ASSIGN_OR_RETURN(const std::vector<SliceRow> rows, slices(TimeWindow::all()));
  for (const SliceRow& row : rows) {
    if (!visit(row)) break;
  }
  return Status::ok();
}

Status TraceReader::forEachSliceWithGpuWork(
    const std::function<bool(const SliceRow&, const GpuWorkRow*)>& visit) {
  return forEachSlice([&](const SliceRow& slice) { return visit(slice, nullptr); });
}

Status TraceReader::forEachCounter(const std::function<bool(const CounterRow&)>& visit) {
  MOEWB_ASSIGN_OR_RETURN(const std::vector<CounterRow> rows, counters(TimeWindow::all()));
  for (const CounterRow& row : rows) {
    if (!visit(row)) break;
  }
  return Status::ok();
}

Result<std::vector<MemorySeries>> TraceReader::memorySeries(TimeWindow, int32_t,
                                                            std::optional<TrackId>) {
  return std::vector<MemorySeries>{};
}

Result<std::vector<MemoryCategoryTotals>> TraceReader::memoryTotals() {
  return std::vector<MemoryCategoryTotals>{};
}

Status TraceReader::forEachMemoryEvent(const std::function<bool(const MemoryEventRow&)>&) {
  return Status::ok();
}

Result<std::vector<GpuLane>> TraceReader::gpuLanes(TimeWindow, int32_t, std::optional<TrackId>) {
  return std::vector<GpuLane>{};
}

Result<std::optional<GpuSliceDetails>> TraceReader::gpuSliceDetails(SliceId) {
  return std::optional<GpuSliceDetails>{};
}

Result<std::optional<LayerLoad>> TraceReader::layerLoad(int64_t, int32_t) {
  return std::optional<LayerLoad>{};
}

Result<std::vector<SwapEventRow>> TraceReader::swapEvents(TimeWindow, std::optional<int32_t>) {
  return std::vector<SwapEventRow>{};
}

Result<std::vector<SwapStepRow>> TraceReader::swapSteps() { return std::vector<SwapStepRow>{}; }

Result<std::vector<SwapPlanRow>> TraceReader::swapPlans() { return std::vector<SwapPlanRow>{}; }

Result<std::vector<SwapLayerSummary>> TraceReader::swapLayerSummary(int64_t, int64_t) {
  return std::vector<SwapLayerSummary>{};
}

}  // namespace moewb::storage
