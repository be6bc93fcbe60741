// Waiting for a TimelineView's per-window reads (GPU lanes, memory rows), which the document's
// window-query worker answers asynchronously.
#pragma once

#include <QApplication>
#include <QElapsedTimer>
#include <QThread>

#include "timeline_view.h"

namespace moewb::gui::testing {

// Runs the event loop until `view` has the GPU lanes and memory rows of its current window (true)
// or `timeoutMs` passed (false).
inline bool waitForWindowData(const TimelineView& view, int timeoutMs = 10'000) {
  QElapsedTimer waited;
  waited.start();
  QApplication::processEvents();
  while (view.windowDataPending()) {
    if (waited.elapsed() > timeoutMs) return false;
    QApplication::processEvents(QEventLoop::AllEvents, 10);
    QThread::msleep(1);
  }
  QApplication::processEvents();
  return true;
}

}  // namespace moewb::gui::testing
