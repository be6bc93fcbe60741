// The window-query worker: its answers equal the document's synchronous reads of the same window
// (GPU lanes and memory series), a burst of requests ends with the newest window's answer (no
// older one after it), and the document's requestWindow / windowAnswered round trip.
#include "moewb/gui/window_query_worker.h"

#include <gtest/gtest.h>

#include <QCoreApplication>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <condition_variable>
#include <mutex>

#include "moewb/gui/trace_document.h"
#include "test_trace.h"

namespace moewb::gui {
namespace {

class WindowQueryWorkerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    m_file = m_dir.filePath(QStringLiteral("lanes.sqlite")).toStdString();
    auto trace = testing::TestTrace::create(m_file, 2, 4);
    ASSERT_TRUE(trace.isOk()) << trace.status().toString();
    trace.value()->setGpuActivity(true);
    trace.value()->setDeviceMemory(true);
    for (int s = 0; s < 4; ++s) ASSERT_TRUE(trace.value()->addStep(s).isOk());
    ASSERT_TRUE(trace.value()->finish().isOk());
  }
  QTemporaryDir m_dir;
  std::string m_file;
};

// Collects a worker's answers (they arrive on its thread).
struct Answers {
  std::mutex mutex;
  std::condition_variable arrived;
  std::vector<WindowAnswer> list;
  void add(WindowAnswer&& a) {
    std::lock_guard lock(mutex);
    list.push_back(std::move(a));
    arrived.notify_all();
  }
  // Waits until an answer with `ticket` came (true) or 10 s passed.
  bool waitFor(uint64_t ticket) {
    std::unique_lock lock(mutex);
    return arrived.wait_for(lock, std::chrono::seconds(10), [&] {
      return !list.empty() && list.back().query.ticket >= ticket;
    });
  }
};

TEST_F(WindowQueryWorkerTest, AnswersAreTheSynchronousReads) {
  TraceDocument doc;
  ASSERT_TRUE(doc.open(QString::fromStdString(m_file)).isOk());
  const int64_t step1 = testing::TestTrace::kOriginNs + testing::TestTrace::kStepNs;
  const TimeRange window{step1, step1 + testing::TestTrace::kStepNs};
  auto lanes = doc.gpuLanes(window, 700);
  auto memory = doc.memorySeries(window, 700);
  ASSERT_TRUE(lanes.isOk() && memory.isOk());
  ASSERT_FALSE(lanes->empty());
  ASSERT_FALSE(memory->empty());
  Answers answers;
  {
    WindowQueryWorker worker(m_file, [&](WindowAnswer&& a) { answers.add(std::move(a)); });
    worker.request({.ticket = 1, .window = window, .buckets = 700, .gpu = true, .memory = true});
    ASSERT_TRUE(answers.waitFor(1));
  }
  ASSERT_EQ(answers.list.size(), 1u);
  const WindowAnswer& got = answers.list[0];
  ASSERT_TRUE(got.status.isOk()) << got.status.toString();
  ASSERT_EQ(got.gpuLanes.size(), lanes->size());
  for (size_t l = 0; l < lanes->size(); ++l) {
    ASSERT_EQ(got.gpuLanes[l].items.size(), (*lanes)[l].items.size());
    for (size_t i = 0; i < (*lanes)[l].items.size(); ++i) {
      EXPECT_EQ(got.gpuLanes[l].items[i].startNs, (*lanes)[l].items[i].startNs);
      EXPECT_EQ(got.gpuLanes[l].items[i].endNs, (*lanes)[l].items[i].endNs);
      EXPECT_EQ(got.gpuLanes[l].items[i].shortName, (*lanes)[l].items[i].shortName);
    }
  }
  ASSERT_EQ(got.memory.size(), memory->size());
  for (size_t s = 0; s < memory->size(); ++s) {
    ASSERT_EQ(got.memory[s].points.size(), (*memory)[s].points.size());
    for (size_t p = 0; p < (*memory)[s].points.size(); ++p) {
      EXPECT_EQ(got.memory[s].points[p].tsNs, (*memory)[s].points[p].tsNs);
      EXPECT_EQ(got.memory[s].points[p].bytes, (*memory)[s].points[p].bytes);
    }
  }
}

TEST_F(WindowQueryWorkerTest, ABurstEndsWithTheNewestWindow) {
  Answers answers;
  WindowQueryWorker worker(m_file, [&](WindowAnswer&& a) { answers.add(std::move(a)); });
  const int64_t origin = testing::TestTrace::kOriginNs;
  for (uint64_t t = 1; t <= 30; ++t) {
    const TimeRange window{origin + int64_t(t) * 1000, origin + 4 * testing::TestTrace::kStepNs};
    worker.request({.ticket = t, .window = window, .buckets = 300, .gpu = true, .memory = false});
  }
  ASSERT_TRUE(answers.waitFor(30));
  std::lock_guard lock(answers.mutex);
  ASSERT_FALSE(answers.list.empty());
  EXPECT_LE(answers.list.size(), 30u);
  for (size_t i = 1; i < answers.list.size(); ++i) {
    EXPECT_GT(answers.list[i].query.ticket, answers.list[i - 1].query.ticket);
  }
  EXPECT_EQ(answers.list.back().query.ticket, 30u);
  EXPECT_EQ(answers.list.back().query.window.startNs, origin + 30'000);
  EXPECT_FALSE(answers.list.back().gpuLanes.empty());
  EXPECT_TRUE(answers.list.back().memory.empty()) << "memory was not asked for";
}

TEST_F(WindowQueryWorkerTest, TheDocumentAnswersOnTheGuiThread) {
  TraceDocument doc;
  EXPECT_EQ(doc.requestWindow({0, 1}, 10), 0u) << "nothing open: nothing to read";
  ASSERT_TRUE(doc.open(QString::fromStdString(m_file)).isOk());
  QSignalSpy answered(&doc, &TraceDocument::windowAnswered);
  const uint64_t first = doc.requestWindow(doc.timeBounds(), 200);
  const uint64_t second = doc.requestWindow(doc.timeBounds(), 400);
  EXPECT_GT(second, first);
  EXPECT_TRUE(doc.windowQueryPending());
  for (int i = 0; i < 1000 && doc.windowQueryPending(); ++i) answered.wait(10);
  EXPECT_FALSE(doc.windowQueryPending());
  ASSERT_GE(answered.count(), 1);
  // Closing drops answers still on their way: none arrives for the closed file.
  doc.requestWindow(doc.timeBounds(), 300);
  const int before = answered.count();
  doc.close();
  EXPECT_FALSE(doc.windowQueryPending());
  QCoreApplication::processEvents();
  answered.wait(200);
  EXPECT_EQ(answered.count(), before);
}

}  // namespace
}  // namespace moewb::gui
