// FlowQueryWorker: the timeline's flow lookups (findFlow: which kernel an API call launched, which
// call launched a kernel) on a thread of their own, so a click never waits for SQLite on the GUI
// thread.
//
// A TraceQueryWorker (trace_query_worker.h), as WindowQueryWorker: a second read-only
// TraceReader of the file (opened on first use, on the worker thread) that answers one FlowQuery
// at a time; request() never blocks and replaces a query that has not started (the newest
// selection wins); each answer goes to the `deliver` callback on the worker thread, tagged with
// its query's ticket.
// Cost per answer: findFlow's few index probes. request(), pending() and the destructor (which
// stops the thread after the query that is running) are thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "moewb/base/status.h"
#include "moewb/gui/timeline_flow.h"
#include "moewb/gui/trace_query_worker.h"

namespace moewb::gui {

// One selection to find the flow of.
struct FlowQuery {
  uint64_t ticket = 0;  // increasing per request; the answer carries it
  FlowEnd selected;     // the selected API call or GPU work (see findFlow)
};

// What a FlowQuery found: the flow, none, or why the file could not be read.
struct FlowAnswer {
  FlowQuery query;
  std::optional<TimelineFlow> flow;
  Status status;
};

class FlowQueryWorker : public TraceQueryWorker<FlowQuery, FlowAnswer> {
 public:
  // Starts the thread for the trace at `path`; `deliver` is called on that thread with each
  // answer (it must be thread-safe, e.g. post to the GUI thread).
  FlowQueryWorker(std::string path, std::function<void(FlowAnswer&&)> deliver);
};

}  // namespace moewb::gui
