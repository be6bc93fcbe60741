// Header checks of trace files (see trace_file_check.h). The SQLite file format: bytes 0-15 are
// "SQLite format 3\0", 16-17 the page size (big endian; 1 means 65536), 24-27 the change counter,
// 28-31 the database size in pages, valid only when 92-95 (version-valid-for) equal 24-27.
#include "trace_file_check.h"

#include <fmt/format.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>

namespace moewb::storage::detail {

namespace {

namespace fs = std::filesystem;

constexpr size_t kHeaderBytes = 100;
constexpr char kMagic[] = "SQLite format 3";  // plus its terminating NUL: 16 bytes

uint32_t readBigEndian(const unsigned char* p, int bytes) {
  uint32_t value = 0;
  for (int i = 0; i < bytes; ++i) value = (value << 8) | p[i];
  return value;
}

Status notSqlite(const std::string& path) {
  return dataLoss(fmt::format("'{}' is not a MoE Workbench trace: not an SQLite database", path));
}

// A WAL with frames may hold pages beyond the main file's end until the next checkpoint.
bool hasNonEmptyWal(const std::string& path) {
  std::error_code ec;
  const auto size = fs::file_size(path + "-wal", ec);
  return !ec && size > 0;
}

}  // namespace

Status checkTraceFileHeader(const std::string& path) {
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (!fs::exists(st)) {
    return notFound(fmt::format("trace file '{}' does not exist", path));
  }
  if (fs::is_directory(st)) {
    return failedPrecondition(fmt::format("'{}' is a directory, not a trace file", path));
  }
  const uintmax_t fileBytes = fs::file_size(path, ec);
  if (ec) return dataLoss(fmt::format("cannot read trace file '{}': {}", path, ec.message()));
  const bool walHasFrames = hasNonEmptyWal(path);
  if (fileBytes == 0) {
    if (walHasFrames) {
      return dataLoss(fmt::format(
          "trace file '{}' is empty but '{}-wal' beside it holds data; SQLite would delete that "
          "-wal on opening, so the trace is not opened and both files are left as they are (a "
          "readable trace has its data in the main file; keep the -wal for recovery tools)",
          path, path));
    }
    return dataLoss(fmt::format("'{}' is not a MoE Workbench trace: the file is empty", path));
  }
  std::array<unsigned char, kHeaderBytes> header{};
  std::ifstream in(path, std::ios::binary);
  if (!in) return dataLoss(fmt::format("cannot open trace file '{}' for reading", path));
  in.read(reinterpret_cast<char*>(header.data()), std::streamsize(header.size()));
  const size_t got = size_t(in.gcount());
  if (got < sizeof kMagic || std::memcmp(header.data(), kMagic, sizeof kMagic) != 0) {
    return notSqlite(path);
  }
  if (got < kHeaderBytes) {
    return dataLoss(
        fmt::format("trace file '{}' is truncated: {} bytes, shorter than the "
                    "SQLite header",
                    path, fileBytes));
  }
  const uint32_t rawPageSize = readBigEndian(&header[16], 2);
  const uint64_t pageSize = rawPageSize == 1 ? 65536 : rawPageSize;
  if (pageSize < 512 || (pageSize & (pageSize - 1)) != 0) return notSqlite(path);
  const bool sizeValid = readBigEndian(&header[24], 4) == readBigEndian(&header[92], 4);
  const uint64_t declaredBytes = uint64_t(readBigEndian(&header[28], 4)) * pageSize;
  if (sizeValid && declaredBytes > fileBytes && !walHasFrames) {
    return dataLoss(
        fmt::format("trace file '{}' is truncated: its header declares {} bytes but "
                    "the file holds {}",
                    path, declaredBytes, fileBytes));
  }
  return Status::ok();
}

}  // namespace moewb::storage::detail
