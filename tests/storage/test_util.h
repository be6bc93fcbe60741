// Helpers shared by the storage tests: a temporary directory per test, raw file writes, and
// Perfetto-style golden SQL (run a query with plain sqlite3, get its rows as CSV lines).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "moewb/storage/trace_writer.h"

namespace moewb::storage::testing {

// A fresh directory under the system temp dir, removed (with its contents) on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  // `name` inside the directory.
  std::string path(const std::string& name) const;
  const std::string& root() const { return m_root; }

 private:
  std::string m_root;
};

void writeFile(const std::string& path, const std::string& bytes);
std::string readFile(const std::string& path);

// Runs `sql` (any number of statements) on `path` with a plain read-write sqlite3 connection.
// Fails the current test on error.
void execSql(const std::string& path, const std::string& sql);

// Runs one query on `path` read-only and returns each row as comma-separated values (NULL as
// "NULL", reals with up to 6 significant digits). Fails the current test on error.
std::vector<std::string> queryCsv(const std::string& path, const std::string& sql);

// A slice on `track` with the given name and timing, category "phase" unless given.
SliceRow makeSlice(TrackId track, const std::string& name, int64_t startNs, int64_t durNs,
                   int64_t step = -1, int32_t layer = -1, const std::string& category = "phase");

}  // namespace moewb::storage::testing
