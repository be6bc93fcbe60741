// The CUPTI capture end to end on a GPU: a few CUDA training steps of the tiny sample config with
// --gpu-trace's options write kernel, memcpy and NVTX rows, every kernel launched inside a step
// carries its step and phase (and a layer for per-layer phases), and a capture without buffers
// counts its dropped records. Skips without a device.
#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "moewb/engine/config.h"
#include "moewb/run/training_run.h"
#include "../source_dir.h"

namespace moewb::profiler {
namespace {

std::string tempTrace(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          ("moewb-gpu-capture-" + name + "-" + std::to_string(getpid()) + ".sqlite"))
      .string();
}

// One integer from `sql` on `path` (-1 on error).
int64_t queryInt(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  int64_t value = -1;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK) {
    sqlite3_stmt* stmt = nullptr;
    if (sqlite3_prepare_v2(db, sql.c_str(), -1, &stmt, nullptr) == SQLITE_OK &&
        sqlite3_step(stmt) == SQLITE_ROW) {
      value = sqlite3_column_int64(stmt, 0);
    }
    sqlite3_finalize(stmt);
  }
  sqlite3_close(db);
  return value;
}

class GpuCaptureTest : public ::testing::Test {
 protected:
  void SetUp() override {
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
      GTEST_SKIP() << "no CUDA device visible: GPU test skipped";
    }
    auto config = engine::loadConfigFile(moewb::test::sourceDir() +
                                         "/samples/configs/tiny.toml");
    ASSERT_TRUE(config.isOk()) << config.status().toString();
    m_config = *config;
    ASSERT_TRUE(engine::applyOverride(m_config, "run.backend=cuda").isOk());
  }

  void train(const std::string& path, const GpuCaptureOptions& capture) {
    run::TrainingRunOptions options;
    options.outPath = path;
    options.steps = 3;
    options.gpuTrace = true;
    options.gpuCapture = capture;
    auto run = run::TrainingRun::create(m_config, options);
    ASSERT_TRUE(run.isOk()) << run.status().toString();
    auto summary = (*run)->run();
    ASSERT_TRUE(summary.isOk()) << summary.status().toString();
    EXPECT_EQ(summary->stepsDone, 3);
  }

  engine::RunConfig m_config;
};

TEST_F(GpuCaptureTest, KernelsCopiesAndRangesAreAttributed) {
  const std::string path = tempTrace("full");
  train(path, {});
  EXPECT_GT(queryInt(path, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL"), 0);
  EXPECT_GT(queryInt(path, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_MEMCPY"), 0);
  EXPECT_GT(queryInt(path, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME"), 0);
  EXPECT_GT(queryInt(path, "SELECT count(*) FROM slice s JOIN string c ON c.id = s.category "
                           "WHERE c.text = 'nvtx'"),
            0);
  // Kernels launched inside a step (after the first step's start): step and phase set.
  const std::string inSteps =
      "FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds p ON p.id = k.phase "
      "WHERE k.start >= (SELECT min(start_ns) FROM step)";
  EXPECT_GT(queryInt(path, "SELECT count(*) " + inSteps), 0);
  EXPECT_EQ(queryInt(path, "SELECT count(*) " + inSteps + " AND (k.step < 0 OR p.value = '')"), 0);
  // Per-layer phases carry their layer.
  EXPECT_EQ(queryInt(path, "SELECT count(*) " + inSteps +
                               " AND k.layer < 0 AND (p.value LIKE 'experts.%' OR "
                               "p.value LIKE 'router.%' OR p.value LIKE 'permute.%' OR "
                               "p.value LIKE 'attention.%' OR p.value LIKE 'kda.%')"),
            0);
  EXPECT_GT(queryInt(path, "SELECT count(*) " + inSteps + " AND k.layer >= 0"), 0);
  EXPECT_EQ(queryInt(path, "SELECT value FROM stats WHERE name = 'cupti_dropped_records'"), 0);
  EXPECT_EQ(queryInt(path, "SELECT value FROM stats WHERE name = 'nvtx_ranges_unmatched'"), 0);
  EXPECT_GE(queryInt(path, "SELECT count(*) FROM meta WHERE key = 'cupti_clock_offset_ns'"), 1);
  std::filesystem::remove(path);
}

TEST_F(GpuCaptureTest, RecordsWithoutBuffersAreCountedAsDropped) {
  const std::string path = tempTrace("dropped");
  train(path, {.bufferBytes = 1 << 16, .maxBuffers = 0});
  EXPECT_EQ(queryInt(path, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL"), 0);
  EXPECT_GT(queryInt(path, "SELECT value FROM stats WHERE name = 'cupti_buffers_refused'"), 0);
  EXPECT_GT(queryInt(path, "SELECT value FROM stats WHERE name = 'cupti_dropped_records'"), 0);
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace moewb::profiler
