// WindowQueryWorker: the timeline's per-window file queries (GPU lanes, device-memory series) on a
// thread of their own, so zooming and panning never wait for SQLite on the GUI thread.
//
// A TraceQueryWorker (trace_query_worker.h): a second read-only TraceReader of the file (opened
// on first use, on the worker thread) that answers one WindowQuery at a time. request() never
// blocks: a query that has not started yet is replaced by a newer one (the newest window wins;
// an old one is never read after a newer one came), and each answer goes to the `deliver`
// callback on the worker thread, tagged with its query's ticket. Cost per answer: the reader's
// gpuLanes / memorySeries for the window (indexed, O(events in the window)). The destructor
// stops the thread after the query that is running. request(), pending() and the destructor are
// thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "moewb/base/status.h"
#include "moewb/gui/timeline_geometry.h"
#include "moewb/gui/trace_query_worker.h"
#include "moewb/storage/trace_reader.h"

namespace moewb::gui {

// One window to read: its time span and how many buckets (pixel columns) to downsample to.
struct WindowQuery {
  uint64_t ticket = 0;   // increasing per request; the answer carries it
  TimeRange window;      // ns
  int buckets = 1;       // pixel columns
  bool gpu = false;      // read the GPU API and stream lanes
  bool memory = false;   // read the device-memory series
};

// What a WindowQuery read; empty parts (and a status) when the read failed.
struct WindowAnswer {
  WindowQuery query;                               // the query answered
  std::vector<storage::GpuLane> gpuLanes;          // TraceReader::gpuLanes of the window
  std::vector<storage::MemorySeries> memory;       // TraceReader::memorySeries of the window
  Status status;                                   // ok, or why the file could not be read
};

class WindowQueryWorker : public TraceQueryWorker<WindowQuery, WindowAnswer> {
 public:
  // Starts the thread for the trace at `path`; `deliver` is called on that thread with each
  // answer (it must be thread-safe, e.g. post to the GUI thread).
  WindowQueryWorker(std::string path, std::function<void(WindowAnswer&&)> deliver);
};

}  // namespace moewb::gui
