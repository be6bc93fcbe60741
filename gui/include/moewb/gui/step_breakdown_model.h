// StepBreakdownModel: the per-step time breakdown of the open trace (step_breakdown.h) for the
// "Step breakdown" dock, read off the GUI thread.
//
// It follows a TraceDocument: once a file has loaded (opened()) and after each live refresh that
// added steps, a worker thread opens its own read-only TraceReader of the file and runs
// readStepBreakdowns (one pass over the slices); the result replaces the held set on the GUI
// thread (changed()). A request while the worker runs is remembered and served when it ends (so a
// live run costs at most one pass at a time, and the newest data wins); a newly opened or closed
// file makes a pending answer stale (dropped) and cancels the running pass. A request served
// after a read waits as long as that read took (at least kPauseMs), so a long live run keeps the
// worker busy half the time at most. Reading never blocks the GUI thread. GUI thread only (the
// worker touches no members).
#pragma once

#include <QElapsedTimer>
#include <QObject>
#include <QString>
#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>

#include "moewb/gui/step_breakdown.h"

namespace moewb::gui {

class TraceDocument;

class StepBreakdownModel : public QObject {
  Q_OBJECT

 public:
  explicit StepBreakdownModel(QObject* parent = nullptr);
  ~StepBreakdownModel() override;

  // Follows `document` (not owned; may be null): reads its breakdown when a file has loaded and
  // after refreshes that added steps.
  void setDocument(TraceDocument* document);
  // The breakdown last read (empty while none was read for the open file).
  const StepBreakdownSet& data() const { return m_data; }
  // Whether a read is running or queued.
  bool isBusy() const { return m_workerRunning || m_again || m_delayed; }
  // Reads the open file's breakdown again (on the worker; changed() brings it).
  void reload();
  // The shortest pause between a read and the next one it delayed.
  static constexpr int64_t kPauseMs = 500;

 signals:
  // data() changed (a read finished, or the document closed).
  void changed();
  // A read failed; `message` names the file and the problem in plain words.
  void failed(const QString& message);

 private:
  using Answer = Result<StepBreakdownSet>;
  void clear();
  void start();
  void onAnswer(uint64_t generation, const std::shared_ptr<Answer>& answer);

  TraceDocument* m_document = nullptr;
  StepBreakdownSet m_data;
  uint64_t m_generation = 0;      // bumped by every open/close: older answers are stale
  bool m_workerRunning = false;
  bool m_again = false;           // read again when the running read ends
  bool m_delayed = false;         // a read waits for the pause after the last one
  std::shared_ptr<std::atomic<bool>> m_cancel;  // the running read's stop flag
  QElapsedTimer m_readTimer;                    // since the running read started
  int64_t m_lastReadMs = 0;                     // how long the last read took
  std::thread m_worker;
};

}  // namespace moewb::gui
