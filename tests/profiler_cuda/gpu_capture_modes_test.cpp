// The GPU capture modes end to end on a GPU: a step window records kernels of its steps only
// (CUPTI disabled outside it, detached between windows and attached again), and a flight
// recorder writes only the steps before the step at which its trigger fired, naming the firing
// in meta and stats. Skips without a device.
#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>

#include "moewb/engine/config.h"
#include "moewb/run/training_run.h"
#include "../source_dir.h"

namespace moewb::profiler {
namespace {

std::string tempTrace(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          ("moewb-gpu-modes-" + name + "-" + std::to_string(getpid()) + ".sqlite"))
      .string();
}

// The first column of the first row of `sql` on `path` as text ("<error>" on error).
std::string queryText(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  std::string value = "<error>";
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK) {
    sqlite3_stmt* stmt = nullptr;
    if (sqlite3_prepare_v2(db, sql.c_str(), -1, &stmt, nullptr) == SQLITE_OK &&
        sqlite3_step(stmt) == SQLITE_ROW) {
      const unsigned char* text = sqlite3_column_text(stmt, 0);
      value = text ? reinterpret_cast<const char*>(text) : "";
    }
    sqlite3_finalize(stmt);
  }
  sqlite3_close(db);
  return value;
}

int64_t queryInt(const std::string& path, const std::string& sql) {
  const std::string text = queryText(path, sql);
  return text == "<error>" || text.empty() ? -1 : std::stoll(text);
}

// Makes one chosen step slow: sleeps inside it (at its first phase event) so that a step-time
// trigger fires at a known step.
class SlowStep final : public engine::EventSink {
 public:
  SlowStep(int64_t step, std::chrono::milliseconds sleep) : m_step(step), m_sleep(sleep) {}
  void onRunStart(const engine::RunStartEvent&) override {}
  void onPhase(const engine::PhaseEvent& e) override {
    if (e.step == m_step && !m_slept) {
      m_slept = true;
      std::this_thread::sleep_for(m_sleep);
    }
  }
  void onExpertLoad(const engine::ExpertLoadEvent&) override {}
  void onCounter(const engine::CounterEvent&) override {}
  void onStep(const engine::StepEvent&) override {}
  void onRunEnd(const engine::RunEndEvent&) override {}

 private:
  int64_t m_step;
  std::chrono::milliseconds m_sleep;
  bool m_slept = false;
};

class GpuCaptureModesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
      GTEST_SKIP() << "no CUDA device visible: GPU test skipped";
    }
    auto config =
        engine::loadConfigFile(moewb::test::sourceDir() + "/samples/configs/tiny.toml");
    ASSERT_TRUE(config.isOk()) << config.status().toString();
    m_config = *config;
    ASSERT_TRUE(engine::applyOverride(m_config, "run.backend=cuda").isOk());
  }

  void train(const std::string& path, const CaptureModeArgs& args,
             engine::EventSink* observer = nullptr, int64_t steps = 6) {
    auto mode = parseCaptureMode(args);
    ASSERT_TRUE(mode.isOk()) << mode.status().toString();
    run::TrainingRunOptions options;
    options.outPath = path;
    options.steps = steps;
    options.gpuTrace = true;
    options.gpuCapture.mode = *mode;
    auto run = run::TrainingRun::create(m_config, options, observer);
    ASSERT_TRUE(run.isOk()) << run.status().toString();
    auto summary = (*run)->run();
    ASSERT_TRUE(summary.isOk()) << summary.status().toString();
    EXPECT_EQ(summary->stepsDone, steps);
  }

  engine::RunConfig m_config;
};

TEST_F(GpuCaptureModesTest, StepWindowRecordsKernelsOfItsStepsOnly) {
  const std::string path = tempTrace("window");
  CaptureModeArgs args;
  args.gpuTrace = true;
  args.traceSteps = "2:4";
  train(path, args);
  const std::string kernels = "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k ";
  EXPECT_GT(queryInt(path, kernels + "WHERE k.step = 2"), 0);
  EXPECT_GT(queryInt(path, kernels + "WHERE k.step = 3"), 0);
  EXPECT_EQ(queryInt(path, kernels + "WHERE k.step NOT IN (2, 3)"), 0);
  // Host events are traced every step as without a mode.
  EXPECT_EQ(queryInt(path, "SELECT count(*) FROM step"), 6);
  EXPECT_EQ(queryInt(path, "SELECT value FROM stats WHERE name = 'gpu_steps_captured'"), 2);
  EXPECT_EQ(queryInt(path, "SELECT value FROM stats WHERE name = 'cupti_dropped_records'"), 0);
  // A short window is flushed once, after its last step (no flush between its steps, which would
  // hold the next step's CUDA calls): the detach's flush.
  EXPECT_EQ(queryInt(path, "SELECT value FROM stats WHERE name = 'cupti_flushes'"), 1);
  EXPECT_EQ(queryText(path, "SELECT value FROM meta WHERE key = 'gpu_capture_mode'"),
            "every step of steps 2..3");
  std::filesystem::remove(path);
}

// CUPTI is detached after a window followed by a long gap (cupti_detach.h) and attached again at
// the next: every window records the same work as the one before, with the driver calls
// (cuBLAS launches) attributed, and nothing between windows. Windows close together keep CUPTI
// attached (re-attaching costs more than it saves there).
TEST_F(GpuCaptureModesTest, WindowsDetachCuptiAndAttachItAgain) {
  const std::string path = tempTrace("every60");
  CaptureModeArgs args;
  args.gpuTrace = true;
  args.traceEvery = 60;
  train(path, args, nullptr, 130);
  const std::string kernels = "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k ";
  // Step 0 also holds first-use work (allocations, library set-up); steps 60 and 120 are alike.
  EXPECT_GT(queryInt(path, kernels + "WHERE k.step = 0"), 0);
  const int64_t second = queryInt(path, kernels + "WHERE k.step = 60");
  EXPECT_GT(second, 0);
  EXPECT_EQ(queryInt(path, kernels + "WHERE k.step = 120"), second);
  // Nothing from the steps between windows (kernels before step 0, the model's set-up, carry
  // step -1: the first window is open from the start).
  EXPECT_EQ(queryInt(path, kernels + "WHERE k.step >= 0 AND k.step NOT IN (0, 60, 120)"), 0);
  for (const char* table : {"CUPTI_ACTIVITY_KIND_DRIVER", "CUPTI_ACTIVITY_KIND_RUNTIME"}) {
    const std::string calls = std::string("SELECT count(*) FROM ") + table + " WHERE step = ";
    EXPECT_GT(queryInt(path, calls + "60"), 0) << table;
    EXPECT_EQ(queryInt(path, calls + "120"), queryInt(path, calls + "60")) << table;
  }
  const std::string ranges =
      "SELECT count(*) FROM slice s JOIN string c ON c.id = s.category WHERE c.text = 'nvtx' "
      "AND s.step = ";
  EXPECT_GT(queryInt(path, ranges + "60"), 0);
  EXPECT_EQ(queryInt(path, ranges + "120"), queryInt(path, ranges + "60"));
  EXPECT_EQ(queryInt(path, "SELECT value FROM stats WHERE name = 'cupti_detaches'"), 3);
  EXPECT_EQ(queryInt(path, "SELECT value FROM stats WHERE name = 'gpu_records_unattributed'"), 0);
  EXPECT_EQ(queryInt(path, "SELECT value FROM stats WHERE name = 'cupti_dropped_records'"), 0);
  std::filesystem::remove(path);

  // Windows 3 steps apart: CUPTI stays attached.
  const std::string close = tempTrace("every3");
  args.traceEvery = 3;
  train(close, args, nullptr, 9);
  EXPECT_EQ(queryInt(close, "SELECT value FROM stats WHERE name = 'cupti_detaches'"), 0);
  EXPECT_EQ(queryInt(close, kernels + "WHERE k.step = 6"),
            queryInt(close, kernels + "WHERE k.step = 3"));
  std::filesystem::remove(close);
}

TEST_F(GpuCaptureModesTest, FlightRecorderWritesTheStepsBeforeItsTrigger) {
  const std::string path = tempTrace("flight");
  CaptureModeArgs args;
  args.gpuTrace = true;
  args.flightRecorder = 2;
  args.triggerStepMs = 2500;  // well above a first step with its one-time costs
  SlowStep slow(3, std::chrono::milliseconds(3000));
  train(path, args, &slow);
  const std::string kernels = "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k ";
  EXPECT_GT(queryInt(path, kernels + "WHERE k.step = 2"), 0);
  EXPECT_GT(queryInt(path, kernels + "WHERE k.step = 3"), 0);
  EXPECT_EQ(queryInt(path, kernels + "WHERE k.step NOT IN (2, 3)"), 0);
  EXPECT_EQ(queryInt(path, "SELECT count(*) FROM step"), 6);
  EXPECT_EQ(queryInt(path, "SELECT value FROM stats WHERE name = 'flight_recorder_triggers'"), 1);
  EXPECT_EQ(queryInt(path, "SELECT value FROM stats WHERE name = 'flight_recorder_steps_written'"),
            2);
  const std::string fired =
      queryText(path, "SELECT value FROM meta WHERE key = 'gpu_capture_triggers'");
  EXPECT_EQ(fired.rfind("step 3: step time ", 0), 0u) << fired;
  EXPECT_NE(fired.find("(wrote steps 2..3)"), std::string::npos) << fired;
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace moewb::profiler
