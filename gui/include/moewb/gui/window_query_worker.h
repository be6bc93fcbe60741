// WindowQueryWorker: the timeline's per-window file queries (GPU lanes, device-memory series) on a
// thread of their own, so zooming and panning never wait for SQLite on the GUI thread.
//
// The worker owns a second read-only TraceReader of the file (opened on first use, on the
// worker thread) and answers one WindowQuery at a time. request() never blocks: a query that has
// not started yet is replaced by a newer one (the newest window wins; an old one is never read
// after a newer one came), and each answer goes to the `deliver` callback on the worker thread,
// tagged with its query's ticket. Cost per answer: the reader's gpuLanes / memorySeries for the
// window (indexed, O(events in the window)). The destructor stops the thread after the query
// that is running. request(), pending() and the destructor are thread-safe.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "moewb/base/status.h"
#include "moewb/gui/timeline_geometry.h"
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

class WindowQueryWorker {
 public:
  // Starts the thread for the trace at `path`; `deliver` is called on that thread with each
  // answer (it must be thread-safe, e.g. post to the GUI thread).
  WindowQueryWorker(std::string path, std::function<void(WindowAnswer&&)> deliver);
  ~WindowQueryWorker();
  WindowQueryWorker(const WindowQueryWorker&) = delete;
  WindowQueryWorker& operator=(const WindowQueryWorker&) = delete;

  // Queues `query`, replacing a queued one that has not started. Never blocks on the file.
  void request(const WindowQuery& query);
  // Whether a query is queued or being read.
  bool pending() const;

 private:
  void run();
  WindowAnswer answer(const WindowQuery& query);

  std::string m_path;
  std::function<void(WindowAnswer&&)> m_deliver;
  std::unique_ptr<storage::TraceReader> m_reader;  // the worker thread's only
  mutable std::mutex m_mutex;
  std::condition_variable m_wake;
  std::optional<WindowQuery> m_queued;
  bool m_running = false;  // a query is being read
  bool m_stop = false;
  std::thread m_thread;  // last: starts after the members it uses exist
};

}  // namespace moewb::gui
