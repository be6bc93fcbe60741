// WindowQueryWorker: per-window GPU-lane and memory queries on a worker thread.
#include "moewb/gui/window_query_worker.h"

#include <utility>

namespace moewb::gui {

namespace {

// The reader's GPU lanes and memory series of the query's window, as it asks.
void readWindow(storage::TraceReader& reader, const WindowQuery& query, WindowAnswer& out) {
  const storage::TimeWindow window{query.window.startNs, query.window.endNs};
  if (query.gpu) {
    auto lanes = reader.gpuLanes(window, query.buckets);
    if (!lanes.isOk()) {
      out.status = lanes.status();
      return;
    }
    out.gpuLanes = std::move(lanes).value();
  }
  if (query.memory) {
    auto series = reader.memorySeries(window, query.buckets);
    if (!series.isOk()) {
      out.status = series.status();
      out.gpuLanes.clear();
      return;
    }
    out.memory = std::move(series).value();
  }
}

}  // namespace

WindowQueryWorker::WindowQueryWorker(std::string path,
                                     std::function<void(WindowAnswer&&)> deliver)
    : TraceQueryWorker(std::move(path), readWindow, std::move(deliver)) {}

}  // namespace moewb::gui
