// GpuTraceBuilder in foreign-program mode (`moewb capture`) on synthetic records: every row keeps
// step -1, a kernel's phase is the innermost NVTX range of any domain around its launch, or
// "external" outside every range, and writing in time slices (resolveBefore, as the injected
// profiler does every period) attributes launches inside ranges that were still open, or closed
// only after, at the earlier cutoff; each range is written once.
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <string>

#include "gpu/gpu_trace_builder.h"

namespace moewb::profiler::gpu {
namespace {

NvtxMarker marker(NvtxMarker::Kind kind, uint32_t id, int64_t ts, const std::string& name = "") {
  NvtxMarker m;
  m.kind = kind;
  m.id = id;
  m.tsNs = ts;
  m.threadId = 5;
  m.name = name;
  m.domain = name == "inner" ? "torch" : "";
  return m;
}

void launch(std::vector<Record>& records, uint32_t correlation, int64_t start) {
  records.push_back(ApiCall{correlation, start, start + 5, 5, false, 211, "cudaLaunchKernel", 0});
  KernelActivity k;
  k.startNs = start + 10;
  k.endNs = start + 20;
  k.correlationId = correlation;
  k.name = "kernel" + std::to_string(correlation);
  records.push_back(std::move(k));
}

// rows of `sql` as "a|b" strings, keyed by the first column.
std::map<std::string, std::string> query(const std::string& path, const std::string& sql) {
  std::map<std::string, std::string> rows;
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK) {
    sqlite3_stmt* stmt = nullptr;
    if (sqlite3_prepare_v2(db, sql.c_str(), -1, &stmt, nullptr) == SQLITE_OK) {
      while (sqlite3_step(stmt) == SQLITE_ROW) {
        auto text = [&](int i) {
          const unsigned char* t = sqlite3_column_text(stmt, i);
          return t != nullptr ? std::string(reinterpret_cast<const char*>(t)) : std::string();
        };
        rows[text(0)] = text(1);
      }
    }
    sqlite3_finalize(stmt);
  }
  sqlite3_close(db);
  return rows;
}

TEST(GpuTraceBuilderForeign, PhaseIsTheProgramsInnermostRangeAcrossCutoffs) {
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("moewb-gpu-foreign-" + std::to_string(getpid()) + ".sqlite"))
                               .string();
  auto writer = storage::TraceWriter::create(path, {.overwrite = true});
  ASSERT_TRUE(writer.isOk()) << writer.status().toString();
  GpuTraceBuilder builder(writer->get(), 0);
  builder.setForeignProgram();

  // Until the first cutoff (500): "outer" [100, 900) opens, "inner" [300, 400) in another domain,
  // "late" [450, 600) is already closed when the buffers are parsed.
  std::vector<Record> first;
  first.push_back(marker(NvtxMarker::Kind::kStart, 1, 100, "outer"));
  first.push_back(marker(NvtxMarker::Kind::kStart, 2, 300, "inner"));
  first.push_back(marker(NvtxMarker::Kind::kEnd, 2, 400));
  first.push_back(marker(NvtxMarker::Kind::kStart, 3, 450, "late"));
  first.push_back(marker(NvtxMarker::Kind::kEnd, 3, 600));
  launch(first, 1, 50);   // before every range
  launch(first, 2, 150);  // in outer
  launch(first, 3, 350);  // in inner
  builder.addRecords(std::move(first));
  builder.resolveBefore(500);

  std::vector<Record> second;
  launch(second, 4, 550);  // in late, which started before the first cutoff
  launch(second, 5, 700);  // in outer, still open at the first cutoff
  second.push_back(marker(NvtxMarker::Kind::kEnd, 1, 900));
  launch(second, 6, 1000);  // after every range
  builder.addRecords(std::move(second));
  builder.resolveBefore(5000);
  builder.resolveAll();
  EXPECT_EQ(builder.counters().unattributed, 0);
  EXPECT_EQ(builder.counters().unclosedRanges, 0);
  ASSERT_TRUE((*writer)->close().isOk());

  const auto phases =
      query(path,
            "SELECT n.value, p.value || '|' || k.step FROM "
            "CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds n ON n.id = k.demangledName "
            "JOIN StringIds p ON p.id = k.phase");
  const std::map<std::string, std::string> expected = {
      {"kernel1", "external|-1"}, {"kernel2", "outer|-1"}, {"kernel3", "inner|-1"},
      {"kernel4", "late|-1"},     {"kernel5", "outer|-1"}, {"kernel6", "external|-1"}};
  EXPECT_EQ(phases, expected);
  const auto ranges = query(path,
                            "SELECT n.value, count(*) || '|' || min(s.step) FROM slice s "
                            "JOIN StringIds n ON n.id = s.name JOIN StringIds c ON c.id = "
                            "s.category WHERE c.value = 'nvtx' GROUP BY n.value");
  const std::map<std::string, std::string> once = {
      {"inner", "1|-1"}, {"late", "1|-1"}, {"outer", "1|-1"}};
  EXPECT_EQ(ranges, once);
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace moewb::profiler::gpu
