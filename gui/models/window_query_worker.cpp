// WindowQueryWorker: per-window GPU-lane and memory queries on a worker thread.
#include "moewb/gui/window_query_worker.h"

#include <utility>

namespace moewb::gui {

WindowQueryWorker::WindowQueryWorker(std::string path, std::function<void(WindowAnswer&&)> deliver)
    : m_path(std::move(path)), m_deliver(std::move(deliver)), m_thread([this] { run(); }) {}

WindowQueryWorker::~WindowQueryWorker() {
  {
    std::lock_guard lock(m_mutex);
    m_stop = true;
    m_queued.reset();
  }
  m_wake.notify_all();
  if (m_thread.joinable()) m_thread.join();
}

void WindowQueryWorker::request(const WindowQuery& query) {
  {
    std::lock_guard lock(m_mutex);
    m_queued = query;
  }
  m_wake.notify_all();
}

bool WindowQueryWorker::pending() const {
  std::lock_guard lock(m_mutex);
  return m_running || m_queued.has_value();
}

void WindowQueryWorker::run() {
  while (true) {
    WindowQuery query;
    {
      std::unique_lock lock(m_mutex);
      m_wake.wait(lock, [&] { return m_stop || m_queued.has_value(); });
      if (m_stop) return;
      query = *m_queued;
      m_queued.reset();
      m_running = true;
    }
    WindowAnswer out = answer(query);
    // Delivered while still marked running, so that pending() never reads false between the
    // read and the answer reaching its receiver's queue.
    m_deliver(std::move(out));
    std::lock_guard lock(m_mutex);
    m_running = false;
  }
}

WindowAnswer WindowQueryWorker::answer(const WindowQuery& query) {
  WindowAnswer out;
  out.query = query;
  if (!m_reader) {
    auto opened = storage::TraceReader::open(m_path);
    if (!opened.isOk()) {
      out.status = opened.status();
      return out;
    }
    m_reader = std::move(opened).value();
  }
  const storage::TimeWindow window{query.window.startNs, query.window.endNs};
  if (query.gpu) {
    auto lanes = m_reader->gpuLanes(window, query.buckets);
    if (!lanes.isOk()) {
      out.status = lanes.status();
      return out;
    }
    out.gpuLanes = std::move(lanes).value();
  }
  if (query.memory) {
    auto series = m_reader->memorySeries(window, query.buckets);
    if (!series.isOk()) {
      out.status = series.status();
      out.gpuLanes.clear();
      return out;
    }
    out.memory = std::move(series).value();
  }
  return out;
}

}  // namespace moewb::gui
