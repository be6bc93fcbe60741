// The summary sidecar "<trace>.summary": writing it atomically and reading it back, validating
// every field before use (see timeline_summary.h). Layout (native little-endian, fixed-width):
//   "MOEWBSUM" u32 version u32 0 | i64 fileBytes i64 mtimeNs i64 maxSliceId | i64 originNs
//   i64 bucketNs i32 levelCount i32 nameCount i32 laneCount i32 0 i64 sliceCount |
//   nameCount x (u32 length, bytes) | laneCount x (i64 track i32 depth i32 0,
//   levelCount x (u64 buckets, buckets x SummaryBucket)) | u64 FNV-1a of all bytes before it.
// Reading costs one read of the file (a few MB for 10M slices) and one pass over it.
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <string>
#include <type_traits>

#include "moewb/gui/timeline_summary.h"

namespace moewb::gui {

namespace {

namespace fs = std::filesystem;

constexpr char kMagic[8] = {'M', 'O', 'E', 'W', 'B', 'S', 'U', 'M'};
constexpr uint32_t kVersion = 1;
constexpr int64_t kMaxFileBytes = int64_t(1) << 30;  // far above any real sidecar
constexpr uint32_t kMaxNameBytes = 1 << 16;
static_assert(std::endian::native == std::endian::little, "sidecars are little-endian");
static_assert(sizeof(SummaryBucket) == 32 && std::is_trivially_copyable_v<SummaryBucket>);

uint64_t fnv1a(const char* data, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; ++i) {
    h ^= uint8_t(data[i]);
    h *= 1099511628211ull;
  }
  return h;
}

class Writer {
 public:
  template <typename T>
  void put(const T& value) {
    static_assert(std::is_trivially_copyable_v<T>);
    const char* p = reinterpret_cast<const char*>(&value);
    m_bytes.insert(m_bytes.end(), p, p + sizeof(T));
  }
  void putBytes(const void* data, size_t n) {
    const char* p = static_cast<const char*>(data);
    m_bytes.insert(m_bytes.end(), p, p + n);
  }
  std::string& bytes() { return m_bytes; }

 private:
  std::string m_bytes;
};

// Reads fixed-width fields off a byte range; any read past its end sets failed().
class Reader {
 public:
  Reader(const char* data, size_t n) : m_data(data), m_size(n) {}
  template <typename T>
  T get() {
    T value{};
    if (!take(&value, sizeof(T))) m_failed = true;
    return value;
  }
  bool take(void* out, size_t n) {
    if (m_failed || n > m_size - m_at) {
      m_failed = true;
      return false;
    }
    std::memcpy(out, m_data + m_at, n);
    m_at += n;
    return true;
  }
  size_t remaining() const { return m_size - m_at; }
  bool failed() const { return m_failed; }

 private:
  const char* m_data;
  size_t m_size;
  size_t m_at = 0;
  bool m_failed = false;
};

std::string serialize(const TimelineSummary& s, const TraceFingerprint& f) {
  Writer w;
  w.putBytes(kMagic, sizeof(kMagic));
  w.put(kVersion);
  w.put(uint32_t(0));
  w.put(f.fileBytes);
  w.put(f.mtimeNs);
  w.put(f.maxSliceId);
  w.put(s.originNs);
  w.put(s.bucketNs);
  w.put(int32_t(s.levelCount));
  w.put(int32_t(s.names.size()));
  w.put(int32_t(s.lanes.size()));
  w.put(int32_t(0));
  w.put(s.sliceCount);
  for (const std::string& name : s.names) {
    w.put(uint32_t(name.size()));
    w.putBytes(name.data(), name.size());
  }
  for (const LaneSummary& lane : s.lanes) {
    w.put(lane.track.value);
    w.put(lane.depth);
    w.put(int32_t(0));
    for (const std::vector<SummaryBucket>& level : lane.levels) {
      w.put(uint64_t(level.size()));
      w.putBytes(level.data(), level.size() * sizeof(SummaryBucket));
    }
  }
  w.put(fnv1a(w.bytes().data(), w.bytes().size()));
  return std::move(w.bytes());
}

// Checks one level's buckets: indexes ascending inside the grid, known names, sane counts.
bool validLevel(const std::vector<SummaryBucket>& buckets, int64_t lastIndex, int32_t names) {
  int64_t previous = -1;
  for (const SummaryBucket& b : buckets) {
    if (b.index <= previous || b.index > lastIndex) return false;
    if (b.nameId < 0 || b.nameId >= names || b.count < 0) return false;
    if (b.busyNs < 0 || b.dominantBusyNs < 0 || b.dominantBusyNs > b.busyNs) return false;
    previous = b.index;
  }
  return true;
}

// Reads `laneCount` lanes of `s`'s levels off `r`: nullptr, or what was wrong.
const char* readLanes(Reader& r, TimelineSummary* s, int32_t laneCount, int32_t nameCount) {
  // Bucket indexes of level 0 reach at most the grid's last: kTargetBuckets-ish, with margin.
  const int64_t lastIndex0 = 4 * TimelineSummary::kTargetBuckets;
  s->lanes.resize(size_t(laneCount));
  for (int32_t i = 0; i < laneCount; ++i) {
    LaneSummary& lane = s->lanes[size_t(i)];
    lane.track = TrackId(r.get<int64_t>());
    lane.depth = r.get<int32_t>();
    (void)r.get<int32_t>();
    const LaneSummary* before = i > 0 ? &s->lanes[size_t(i - 1)] : nullptr;
    if (before &&
        !(std::make_pair(before->track, before->depth) < std::make_pair(lane.track, lane.depth))) {
      return "lanes out of order";
    }
    lane.levels.resize(size_t(s->levelCount));
    for (int level = 0; level < s->levelCount; ++level) {
      const uint64_t n = r.get<uint64_t>();
      if (r.failed() || n > r.remaining() / sizeof(SummaryBucket)) return "bucket count";
      std::vector<SummaryBucket>& buckets = lane.levels[size_t(level)];
      buckets.resize(size_t(n));
      r.take(buckets.data(), size_t(n) * sizeof(SummaryBucket));
      if (!validLevel(buckets, lastIndex0 >> (2 * level), nameCount)) return "buckets";
    }
  }
  return nullptr;
}

// The counts must add up at every level and stay within what the trace can hold (its slice
// ids, and at least 8 bytes of file per slice), so a reader sizing memory by them is safe.
const char* checkCounts(const TimelineSummary& s, const TraceFingerprint& expected) {
  const int64_t mostSlices = std::min(expected.maxSliceId, expected.fileBytes / 8);
  if (s.sliceCount > mostSlices) return "more slices than its trace holds";
  for (int level = 0; level < s.levelCount; ++level) {
    int64_t total = 0;
    for (const LaneSummary& lane : s.lanes) {
      for (const SummaryBucket& b : lane.levels[size_t(level)]) total += b.count;
    }
    if (total != s.sliceCount) return "bucket counts do not add up";
  }
  return nullptr;
}

Result<TimelineSummary> parse(const std::string& path, const std::string& bytes,
                              const TraceFingerprint& expected) {
  auto damaged = [&](const std::string& what) {
    return dataLoss("summary file '" + path + "' is damaged (" + what + "); it is rebuilt");
  };
  if (bytes.size() < sizeof(kMagic) + 8 + sizeof(uint64_t)) return damaged("too short");
  if (std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0) return damaged("not a summary");
  const size_t body = bytes.size() - sizeof(uint64_t);
  uint64_t checksum = 0;
  std::memcpy(&checksum, bytes.data() + body, sizeof(checksum));
  Reader r(bytes.data() + sizeof(kMagic), body - sizeof(kMagic));
  const uint32_t version = r.get<uint32_t>();
  (void)r.get<uint32_t>();
  if (version != kVersion) {
    return failedPrecondition("summary file '" + path + "' has version " + std::to_string(version) +
                              ", this build reads " + std::to_string(kVersion));
  }
  if (fnv1a(bytes.data(), body) != checksum) return damaged("checksum mismatch");
  TraceFingerprint found;
  found.fileBytes = r.get<int64_t>();
  found.mtimeNs = r.get<int64_t>();
  found.maxSliceId = r.get<int64_t>();
  if (!(found == expected)) {
    return failedPrecondition("summary file '" + path + "' belongs to another state of its trace");
  }
  TimelineSummary s;
  s.originNs = r.get<int64_t>();
  s.bucketNs = r.get<int64_t>();
  s.levelCount = r.get<int32_t>();
  const int32_t nameCount = r.get<int32_t>(), laneCount = r.get<int32_t>();
  (void)r.get<int32_t>();
  s.sliceCount = r.get<int64_t>();
  if (r.failed() || s.bucketNs < 1 || s.levelCount < 1 || s.levelCount > 31 || nameCount < 0 ||
      laneCount < 0 || s.sliceCount < 0 ||
      s.bucketNs > (std::numeric_limits<int64_t>::max() >> (2 * s.levelCount))) {
    return damaged("bad header fields");
  }
  // Every name takes at least 4 bytes and every lane 16: counts beyond the file are damage.
  if (size_t(nameCount) > r.remaining() / 4 || size_t(laneCount) > r.remaining() / 16) {
    return damaged("counts larger than the file");
  }
  s.names.reserve(size_t(nameCount));
  for (int32_t i = 0; i < nameCount; ++i) {
    const uint32_t length = r.get<uint32_t>();
    if (r.failed() || length > kMaxNameBytes || length > r.remaining()) return damaged("name");
    std::string name(length, '\0');
    r.take(name.data(), length);
    s.names.push_back(std::move(name));
  }
  if (const char* problem = readLanes(r, &s, laneCount, nameCount)) return damaged(problem);
  if (r.failed() || r.remaining() != 0) return damaged("length does not match its contents");
  if (const char* problem = checkCounts(s, expected)) return damaged(problem);
  return s;
}

}  // namespace

std::string summaryFilePath(const std::string& tracePath) {
  return tracePath + ".summary";
}

Result<TraceFingerprint> traceFingerprint(const std::string& tracePath, int64_t maxSliceId) {
  std::error_code ec;
  const uintmax_t bytes = fs::file_size(tracePath, ec);
  if (ec) return notFound("trace file '" + tracePath + "' cannot be read: " + ec.message());
  const fs::file_time_type mtime = fs::last_write_time(tracePath, ec);
  if (ec) return notFound("trace file '" + tracePath + "' cannot be read: " + ec.message());
  TraceFingerprint f;
  f.fileBytes = int64_t(bytes);
  f.mtimeNs =
      std::chrono::duration_cast<std::chrono::nanoseconds>(mtime.time_since_epoch()).count();
  f.maxSliceId = maxSliceId;
  return f;
}

Status writeSummaryFile(const std::string& path, const TimelineSummary& summary,
                        const TraceFingerprint& fingerprint) {
  const std::string bytes = serialize(summary, fingerprint);
  const std::string temporary = path + ".tmp" + std::to_string(::getpid());
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    if (out) out.write(bytes.data(), std::streamsize(bytes.size()));
    if (!out || !out.flush()) {
      std::error_code ignored;
      fs::remove(temporary, ignored);
      return failedPrecondition("summary file '" + path + "' cannot be written here");
    }
  }
  std::error_code ec;
  fs::rename(temporary, path, ec);
  if (ec) {
    fs::remove(temporary, ec);
    return failedPrecondition("summary file '" + path + "' cannot be written here");
  }
  return Status::ok();
}

Result<TimelineSummary> readSummaryFile(const std::string& path,
                                        const TraceFingerprint& fingerprint) {
  std::error_code ec;
  const uintmax_t size = fs::file_size(path, ec);
  if (ec || !fs::is_regular_file(path, ec)) {
    return notFound("no summary file '" + path + "'");
  }
  if (size > uintmax_t(kMaxFileBytes)) return dataLoss("summary file '" + path + "' is too large");
  std::ifstream in(path, std::ios::binary);
  std::string bytes(size_t(size), '\0');
  if (!in || !in.read(bytes.data(), std::streamsize(size))) {
    return dataLoss("summary file '" + path + "' cannot be read");
  }
  return parse(path, bytes, fingerprint);
}

}  // namespace moewb::gui
