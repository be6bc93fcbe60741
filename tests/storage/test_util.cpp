// Implementation of the storage test helpers (see test_util.h).
#include "test_util.h"

#include <gtest/gtest.h>
#include <sqlite3.h>
#include <stdlib.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace moewb::storage::testing {

namespace fs = std::filesystem;

TempDir::TempDir() {
  std::string pattern = (fs::temp_directory_path() / "moewb_storage_test_XXXXXX").string();
  char* made = mkdtemp(pattern.data());
  if (!made) ADD_FAILURE() << "mkdtemp failed for " << pattern;
  m_root = pattern;
}

TempDir::~TempDir() {
  std::error_code ignored;
  fs::remove_all(m_root, ignored);
}

std::string TempDir::path(const std::string& name) const {
  return (fs::path(m_root) / name).string();
}

void writeFile(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
  ASSERT_TRUE(out.good()) << "cannot write " << path;
}

std::string readFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

void execSql(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  int rc = sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr);
  if (rc == SQLITE_OK) rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr);
  EXPECT_EQ(rc, SQLITE_OK) << path << ": " << sqlite3_errmsg(db) << "\nSQL: " << sql;
  sqlite3_close(db);
}

namespace {
std::string columnCsv(sqlite3_stmt* stmt, int column) {
  switch (sqlite3_column_type(stmt, column)) {
    case SQLITE_NULL:
      return "NULL";
    case SQLITE_INTEGER:
      return std::to_string(sqlite3_column_int64(stmt, column));
    case SQLITE_FLOAT: {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%.6g", sqlite3_column_double(stmt, column));
      return buf;
    }
    default:
      return reinterpret_cast<const char*>(sqlite3_column_text(stmt, column));
  }
}
}  // namespace

std::vector<std::string> queryCsv(const std::string& path, const std::string& sql) {
  std::vector<std::string> rows;
  sqlite3* db = nullptr;
  sqlite3_stmt* stmt = nullptr;
  int rc = sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr);
  if (rc == SQLITE_OK) rc = sqlite3_prepare_v2(db, sql.c_str(), -1, &stmt, nullptr);
  while (rc == SQLITE_OK || rc == SQLITE_ROW) {
    rc = sqlite3_step(stmt);
    if (rc != SQLITE_ROW) break;
    std::string line;
    for (int c = 0; c < sqlite3_column_count(stmt); ++c) {
      if (c > 0) line += ',';
      line += columnCsv(stmt, c);
    }
    rows.push_back(line);
  }
  EXPECT_EQ(rc, SQLITE_DONE) << path << ": " << sqlite3_errmsg(db) << "\nSQL: " << sql;
  sqlite3_finalize(stmt);
  sqlite3_close(db);
  return rows;
}

SliceRow makeSlice(TrackId track, const std::string& name, int64_t startNs, int64_t durNs,
                   int64_t step, int32_t layer, const std::string& category) {
  SliceRow slice;
  slice.track = track;
  slice.name = name;
  slice.category = category;
  slice.startNs = startNs;
  slice.durNs = durNs;
  slice.step = step;
  slice.layer = layer;
  return slice;
}

}  // namespace moewb::storage::testing
