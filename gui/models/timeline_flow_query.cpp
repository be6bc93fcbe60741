// FlowQueryWorker: flow lookups on a worker thread.
#include "moewb/gui/timeline_flow_query.h"

#include <utility>

namespace moewb::gui {

namespace {

// The flow of the query's selection (findFlow), or none.
void readFlow(storage::TraceReader& reader, const FlowQuery& query, FlowAnswer& out) {
  auto flow = findFlow(reader, query.selected);
  if (!flow.isOk()) {
    out.status = flow.status();
    return;
  }
  out.flow = std::move(flow).value();
}

}  // namespace

FlowQueryWorker::FlowQueryWorker(std::string path, std::function<void(FlowAnswer&&)> deliver)
    : TraceQueryWorker(std::move(path), readFlow, std::move(deliver)) {}

}  // namespace moewb::gui
