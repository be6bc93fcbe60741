// `moewb capture` end to end on a GPU: the CLI runs capture_target (capture_target.cu: 3 + 2
// known kernels, a memset and two copies inside the NVTX range "capture.work") with the profiler
// injected, and the trace holds exactly that work, with step -1 and the program's range as the
// phase, a run row for the program, and the kernel summary of `moewb info`. Skips without a
// device. The binaries are looked up next to this test first (the GPU bundle), then in the build.
#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace moewb::profiler {
namespace {

namespace fs = std::filesystem;

std::string binary(const std::string& name, const std::string& built) {
  std::error_code ec;
  const fs::path beside = fs::read_symlink("/proc/self/exe", ec).parent_path() / name;
  return fs::exists(beside) ? beside.string() : built;
}

std::string queryText(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  std::string value = "<error>";
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK) {
    sqlite3_stmt* stmt = nullptr;
    if (sqlite3_prepare_v2(db, sql.c_str(), -1, &stmt, nullptr) == SQLITE_OK &&
        sqlite3_step(stmt) == SQLITE_ROW) {
      const unsigned char* text = sqlite3_column_text(stmt, 0);
      value = text != nullptr ? reinterpret_cast<const char*>(text) : "<null>";
    } else {
      value = std::string("<error: ") + sqlite3_errmsg(db) + ">";
    }
    sqlite3_finalize(stmt);
  }
  sqlite3_close(db);
  return value;
}

int64_t queryInt(const std::string& path, const std::string& sql) {
  const std::string text = queryText(path, sql);
  char* rest = nullptr;
  const long long value = std::strtoll(text.c_str(), &rest, 10);
  return rest != text.c_str() ? int64_t(value) : -1;
}

struct Ran {
  int exitCode = -1;
  std::string output;
};

Ran run(const std::string& command, const fs::path& log) {
  const int status = std::system((command + " >" + log.string() + " 2>&1").c_str());
  std::ifstream in(log);
  std::ostringstream os;
  os << in.rdbuf();
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, os.str()};
}

class CaptureTest : public ::testing::Test {
 protected:
  void SetUp() override {
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
      GTEST_SKIP() << "no CUDA device visible: GPU test skipped";
    }
    m_dir = fs::temp_directory_path() / ("moewb-capture-test-" + std::to_string(getpid()));
    fs::remove_all(m_dir);
    fs::create_directories(m_dir);
    m_moewb = binary("moewb", MOEWB_CLI_PATH);
    m_target = binary("capture_target", MOEWB_CAPTURE_TARGET_PATH);
  }
  void TearDown() override {
    if (!m_dir.empty()) fs::remove_all(m_dir);
  }

  fs::path m_dir;
  std::string m_moewb;
  std::string m_target;
};

TEST_F(CaptureTest, RecordsTheProgramsKernelsCopiesAndRanges) {
  const std::string trace = (m_dir / "target.sqlite").string();
  const Ran captured = run(m_moewb + " capture -o " + trace + " -- " + m_target, m_dir / "log");
  ASSERT_EQ(captured.exitCode, 0) << captured.output;
  EXPECT_NE(captured.output.find("trace written to " + trace), std::string::npos)
      << captured.output;

  EXPECT_EQ(queryText(trace, "SELECT name || ' ' || backend || ' ' || status FROM run"),
            "capture_target external completed");
  EXPECT_EQ(queryInt(trace, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL"), 5);
  const std::string byName =
      "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN string n ON n.id = k.shortName "
      "WHERE n.text = ";
  EXPECT_EQ(queryInt(trace, byName + "'capture_fill_kernel'"), 3);
  EXPECT_EQ(queryInt(trace, byName + "'capture_scale_kernel'"), 2);
  EXPECT_EQ(queryInt(trace,
                     "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE step = -1 AND "
                     "gridX = 32 AND blockX = 128"),
            5);
  EXPECT_EQ(queryInt(trace,
                     "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN string p "
                     "ON p.id = k.phase WHERE p.text = 'capture.work'"),
            5);
  EXPECT_EQ(queryInt(trace, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_MEMCPY"), 2);
  EXPECT_EQ(queryInt(trace,
                     "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_MEMCPY "
                     "WHERE copyKind = 1 AND bytes = 16384"),
            1);
  EXPECT_EQ(queryInt(trace,
                     "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_MEMCPY "
                     "WHERE copyKind = 2 AND bytes = 16384"),
            1);
  EXPECT_EQ(queryInt(trace, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_MEMSET WHERE bytes = 16384"),
            1);
  EXPECT_GE(queryInt(trace,
                     "SELECT count(*) FROM gpu_memory WHERE kind = 'alloc' AND "
                     "bytes = 16384"),
            1);
  EXPECT_GT(queryInt(trace, "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME"), 0);
  EXPECT_EQ(queryInt(trace,
                     "SELECT count(*) FROM slice s JOIN string n ON n.id = s.name "
                     "JOIN string c ON c.id = s.category "
                     "WHERE c.text = 'nvtx' AND n.text = 'capture.work'"),
            1);
  EXPECT_EQ(queryInt(trace, "SELECT value FROM stats WHERE name = 'cupti_dropped_records'"), 0);

  const Ran info = run(m_moewb + " info " + trace, m_dir / "info.log");
  EXPECT_EQ(info.exitCode, 0) << info.output;
  EXPECT_NE(info.output.find("GPU kernels  5 launches"), std::string::npos) << info.output;
  EXPECT_NE(info.output.find("capture_fill_kernel"), std::string::npos) << info.output;
}

TEST_F(CaptureTest, ForwardsTheExitCodeAndKeepsAnExistingFile) {
  const std::string trace = (m_dir / "kept.sqlite").string();
  { std::ofstream(trace) << "not a trace"; }
  const Ran refused = run(m_moewb + " capture -o " + trace + " -- " + m_target, m_dir / "log");
  EXPECT_EQ(refused.exitCode, 2) << refused.output;
  EXPECT_NE(refused.output.find("--force"), std::string::npos) << refused.output;
  // --force never replaces a file that is not a trace (issue 19, item 2); an empty one it may.
  const Ran kept = run(m_moewb + " capture -f -o " + trace + " -- sh -c 'exit 5'", m_dir / "l2");
  EXPECT_EQ(kept.exitCode, 2) << kept.output;
  EXPECT_NE(kept.output.find("not a moewb trace"), std::string::npos) << kept.output;
  { std::ofstream(trace, std::ios::trunc); }
  const Ran failed = run(m_moewb + " capture -f -o " + trace + " -- sh -c 'exit 5'", m_dir / "l3");
  EXPECT_EQ(failed.exitCode, 5) << failed.output;
}

}  // namespace
}  // namespace moewb::profiler
