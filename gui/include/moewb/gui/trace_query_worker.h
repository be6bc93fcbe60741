// TraceQueryWorker<Query, Answer>: a read-only TraceReader of one trace on a thread of its own
// that answers the newest query, so a view never waits for SQLite on the GUI thread. The shared
// mechanism of WindowQueryWorker (per-window GPU lanes and memory) and FlowQueryWorker (flow
// arrows).
//
// The reader is opened on first use, on the worker thread; a file that cannot be opened gives an
// Answer with only `query` and `status` set (Answer must have both members). request() never
// blocks and replaces a query that has not started (the newest wins); each answer goes to
// `deliver` on the worker thread. request(), pending() and the destructor (which stops the thread
// after the query that is running) are thread-safe.
#pragma once

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>

#include "moewb/base/status.h"
#include "moewb/storage/trace_reader.h"

namespace moewb::gui {

template <typename Query, typename Answer>
class TraceQueryWorker {
 public:
  // Reads one query from the open reader into an Answer (query and status set by the worker).
  using AnswerFn = std::function<void(storage::TraceReader&, const Query&, Answer&)>;

  // Starts the thread for the trace at `path`; `deliver` is called on that thread with each
  // answer (it must be thread-safe, e.g. post to the GUI thread).
  TraceQueryWorker(std::string path, AnswerFn answer, std::function<void(Answer&&)> deliver)
      : m_path(std::move(path)),
        m_answer(std::move(answer)),
        m_deliver(std::move(deliver)),
        m_thread([this] { run(); }) {}

  ~TraceQueryWorker() {
    {
      std::lock_guard lock(m_mutex);
      m_stop = true;
      m_queued.reset();
    }
    m_wake.notify_all();
    if (m_thread.joinable()) m_thread.join();
  }
  TraceQueryWorker(const TraceQueryWorker&) = delete;
  TraceQueryWorker& operator=(const TraceQueryWorker&) = delete;

  // The trace this worker reads.
  const std::string& path() const { return m_path; }

  // Queues `query`, replacing a queued one that has not started. Never blocks on the file.
  void request(const Query& query) {
    {
      std::lock_guard lock(m_mutex);
      m_queued = query;
    }
    m_wake.notify_all();
  }

  // Whether a query is queued or being read.
  bool pending() const {
    std::lock_guard lock(m_mutex);
    return m_running || m_queued.has_value();
  }

 private:
  void run() {
    while (true) {
      Query query;
      {
        std::unique_lock lock(m_mutex);
        m_wake.wait(lock, [&] { return m_stop || m_queued.has_value(); });
        if (m_stop) return;
        query = std::move(*m_queued);
        m_queued.reset();
        m_running = true;
      }
      Answer out = answerOf(query);
      // Delivered while still marked running, so that pending() never reads false between the
      // read and the answer reaching its receiver's queue.
      m_deliver(std::move(out));
      std::lock_guard lock(m_mutex);
      m_running = false;
    }
  }

  Answer answerOf(const Query& query) {
    Answer out;
    out.query = query;
    if (!m_reader) {
      auto opened = storage::TraceReader::open(m_path);
      if (!opened.isOk()) {
        out.status = opened.status();
        return out;
      }
      m_reader = std::move(opened).value();
    }
    m_answer(*m_reader, query, out);
    return out;
  }

  std::string m_path;
  AnswerFn m_answer;
  std::function<void(Answer&&)> m_deliver;
  std::unique_ptr<storage::TraceReader> m_reader;  // the worker thread's only
  mutable std::mutex m_mutex;
  std::condition_variable m_wake;
  std::optional<Query> m_queued;
  bool m_running = false;  // a query is being read
  bool m_stop = false;
  std::thread m_thread;  // last: starts after the members it uses exist
};

}  // namespace moewb::gui
