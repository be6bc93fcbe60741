// mergeTraces (see moewb/storage/trace_merge.h): path checks, inspection and checks of every
// input, the clock and id plan, then the copy into a temporary file beside the output that is
// renamed onto it at the end. The temporary file is written without a journal and without
// syncs (a failure deletes it), then synced once before the rename.
#include "moewb/storage/trace_merge.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "schema.h"
#include "sqlite_trace_reader.h"
#include "trace_merge_internal.h"
#include "trace_open.h"

namespace moewb::storage {

namespace {

namespace fs = std::filesystem;
using detail::Database;
using detail::MergeSource;

constexpr int64_t kMergedRunId = 1;
const char* const kSidecarSuffixes[] = {"-wal", "-shm", "-journal"};

void removeWithSidecars(const std::string& path) {
  std::error_code ignored;
  fs::remove(path, ignored);
  for (const char* suffix : kSidecarSuffixes) fs::remove(path + suffix, ignored);
}

bool pathExists(const std::string& path) {
  std::error_code ec;
  return fs::symlink_status(path, ec).type() != fs::file_type::not_found && !ec;
}

bool samePath(const std::string& a, const std::string& b) {
  std::error_code ec;
  if (pathExists(a) && pathExists(b) && fs::equivalent(a, b, ec) && !ec) return true;
  std::error_code ecA, ecB;
  const fs::path canonicalA = fs::weakly_canonical(a, ecA);
  const fs::path canonicalB = fs::weakly_canonical(b, ecB);
  return !ecA && !ecB && canonicalA == canonicalB;
}

Status checkPaths(const std::vector<std::string>& inputs, const std::string& outPath,
                  const MergeOptions& options) {
  if (inputs.empty()) return invalidArgument("no input traces to merge; pass one file per rank");
  if (outPath.empty()) return invalidArgument("no output path for the merged trace");
  for (size_t i = 0; i < inputs.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      if (samePath(inputs[i], inputs[j])) {
        return invalidArgument(
            fmt::format("input '{}' is given twice ('{}')", inputs[i], inputs[j]));
      }
    }
    if (samePath(inputs[i], outPath)) {
      return invalidArgument(fmt::format(
          "the output '{}' is also an input; write the merged trace to another path", outPath));
    }
  }
  std::error_code ec;
  if (fs::is_directory(outPath, ec)) {
    return invalidArgument(
        fmt::format("the output '{}' is a directory; give a file path", outPath));
  }
  if (pathExists(outPath) && !options.overwrite) {
    return alreadyExists(fmt::format(
        "the output '{}' already exists; choose another path or allow overwriting it (--force)",
        outPath));
  }
  return Status::ok();
}

// Clock offsets (against sources[0], the lowest rank) and GPU correlation offsets (only when
// two files' correlation id ranges overlap: then each file's ids move after the previous one's).
void planShifts(const std::vector<MergeSource>& sources, MergeResult& result) {
  bool overlap = false;
  for (size_t i = 0; i < sources.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      const MergeSource& a = sources[i];
      const MergeSource& b = sources[j];
      if (a.gpuCorrelationMax == 0 || b.gpuCorrelationMax == 0) continue;
      overlap = overlap || (a.gpuCorrelationMin <= b.gpuCorrelationMax &&
                            b.gpuCorrelationMin <= a.gpuCorrelationMax);
    }
  }
  int64_t nextFreeCorrelation = 0;
  for (size_t i = 0; i < sources.size(); ++i) {
    const MergeSource& source = sources[i];
    MergedInput input;
    input.path = source.path;
    input.ranks = source.ranks;
    if (i > 0) {
      const detail::ClockAlignment alignment = detail::alignClock(sources.front(), source);
      input.clockOffsetNs = alignment.offsetNs;
      input.alignment = alignment.method;
      input.sharedCollectives = alignment.sharedCollectives;
    }
    if (overlap && source.gpuCorrelationMax != 0) {
      // Correlation ids come from the files: the shifts saturate instead of overflowing.
      if (nextFreeCorrelation != 0) {
        input.gpuCorrelationOffset =
            detail::saturatingSub(nextFreeCorrelation, source.gpuCorrelationMin);
      }
      nextFreeCorrelation = detail::saturatingAdd(
          detail::saturatingAdd(source.gpuCorrelationMax, input.gpuCorrelationOffset), 1);
    }
    result.inputs.push_back(std::move(input));
  }
}

Status copySource(Database& out, const MergeSource& source, MergedInput& input) {
  {
    MOEWB_ASSIGN_OR_RETURN(detail::Statement attach,
                           detail::Statement::prepare(out, "ATTACH DATABASE ?1 AS src"));
    MOEWB_RETURN_IF_ERROR(attach.bindText(1, source.uri));
    if (Status status = attach.run(); !status.isOk()) {
      return Status(status.code(),
                    fmt::format("cannot open '{}' for merging: {}", source.path, status.message()));
    }
  }
  Status status = [&]() -> Status {
    MOEWB_RETURN_IF_ERROR(out.exec("BEGIN"));
    MOEWB_ASSIGN_OR_RETURN(detail::MergeShift shift, detail::idOffsetsForSource(out));
    shift.clockOffsetNs = input.clockOffsetNs;
    shift.gpuCorrelationOffset = input.gpuCorrelationOffset;
    shift.runId = kMergedRunId;
    MOEWB_ASSIGN_OR_RETURN(const std::vector<int64_t> rows,
                           detail::copyMergeSource(out, source.path, shift));
    for (int64_t n : rows) input.rows += n;
    return out.exec("COMMIT");
  }();
  const Status detached = out.exec("DETACH DATABASE src");
  return status.isOk() ? detached : status;
}

Status writeMerged(const std::string& tmpPath, const std::vector<MergeSource>& sources,
                   MergeResult& result) {
  MOEWB_ASSIGN_OR_RETURN(Database out,
                         Database::open(tmpPath, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE |
                                                     SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_URI));
  MOEWB_RETURN_IF_ERROR(out.exec("PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF"));
  // After the pragmas: defensive mode forbids journal_mode=OFF. The inputs it attaches were
  // checked by inspectMergeSource; this bounds what reading them may cost.
  MOEWB_RETURN_IF_ERROR(detail::hardenConnection(out, /*maxAttached=*/1));
  MOEWB_RETURN_IF_ERROR(out.exec("BEGIN"));
  MOEWB_RETURN_IF_ERROR(detail::createSchema(out));
  MOEWB_RETURN_IF_ERROR(out.exec("COMMIT"));
  for (size_t i = 0; i < sources.size(); ++i) {
    MOEWB_RETURN_IF_ERROR(copySource(out, sources[i], result.inputs[i]));
    result.rows += result.inputs[i].rows;
  }
  MOEWB_RETURN_IF_ERROR(out.exec("BEGIN"));
  MOEWB_RETURN_IF_ERROR(detail::writeMergedRunAndMeta(out, sources, result, kMergedRunId));
  MOEWB_RETURN_IF_ERROR(out.exec("COMMIT"));
  return out.close();
}

Status syncPath(const std::string& path, int flags) {
  const int fd = ::open(path.c_str(), flags | O_CLOEXEC);
  if (fd < 0)
    return internalError(
        fmt::format("cannot open '{}' to sync it: {}", path, std::strerror(errno)));
  const int rc = ::fsync(fd);
  const int savedErrno = errno;
  ::close(fd);
  if (rc != 0)
    return internalError(fmt::format("cannot sync '{}': {}", path, std::strerror(savedErrno)));
  return Status::ok();
}

// Moves the finished temporary file onto `outPath`: atomically replacing it with overwrite,
// else refusing (kAlreadyExists) when it appeared meanwhile.
Status publish(const std::string& tmpPath, const std::string& outPath, bool overwrite) {
  MOEWB_RETURN_IF_ERROR(syncPath(tmpPath, O_RDONLY));
  // Sidecars of an old file at outPath would be replayed into the new one by its first reader.
  for (const char* suffix : kSidecarSuffixes) {
    std::error_code ignored;
    fs::remove(outPath + suffix, ignored);
  }
  if (!overwrite) {
    if (::link(tmpPath.c_str(), outPath.c_str()) == 0) {
      ::unlink(tmpPath.c_str());
    } else if (errno == EEXIST) {
      return alreadyExists(fmt::format(
          "the output '{}' was created by someone else during the merge; nothing was written",
          outPath));
    } else if (pathExists(outPath)) {
      return alreadyExists(fmt::format("the output '{}' already exists", outPath));
    } else if (std::error_code ec; fs::rename(tmpPath, outPath, ec), ec) {
      return internalError(
          fmt::format("cannot move the merged trace to '{}': {}", outPath, ec.message()));
    }
  } else if (std::error_code ec; fs::rename(tmpPath, outPath, ec), ec) {
    return internalError(
        fmt::format("cannot move the merged trace to '{}': {}", outPath, ec.message()));
  }
  const fs::path parent = fs::absolute(outPath).parent_path();
  (void)syncPath(parent.string(), O_RDONLY | O_DIRECTORY);  // best effort: the data is synced
  return Status::ok();
}

// Reading a WAL-mode trace through a read-only connection leaves an empty -wal and a -shm
// beside it (such a connection may not remove them). This removes the ones that were not there
// before the merge, once every connection is closed, when the -wal holds nothing.
class InputSidecarCleanup {
 public:
  explicit InputSidecarCleanup(const std::vector<std::string>& inputs) {
    for (const std::string& path : inputs) {
      if (!pathExists(path + "-wal") && !pathExists(path + "-shm")) m_clean.push_back(path);
    }
  }
  InputSidecarCleanup(const InputSidecarCleanup&) = delete;
  InputSidecarCleanup& operator=(const InputSidecarCleanup&) = delete;
  ~InputSidecarCleanup() {
    for (const std::string& path : m_clean) {
      std::error_code ec;
      const uintmax_t walBytes = fs::file_size(path + "-wal", ec);
      if (!ec && walBytes != 0) continue;
      fs::remove(path + "-wal", ec);
      fs::remove(path + "-shm", ec);
    }
  }

 private:
  std::vector<std::string> m_clean;  // inputs that had neither sidecar
};

std::string temporaryPathFor(const std::string& outPath) {
  const fs::path out = fs::absolute(outPath);
  return (out.parent_path() / fmt::format(".{}.merge-{}.tmp", out.filename().string(), ::getpid()))
      .string();
}

}  // namespace

Result<MergeResult> mergeTraces(const std::vector<std::string>& inputPaths,
                                const std::string& outPath, const MergeOptions& options) {
  MOEWB_RETURN_IF_ERROR(checkPaths(inputPaths, outPath, options));
  const InputSidecarCleanup cleanup(inputPaths);  // declared first: runs after every close
  std::vector<MergeSource> sources;
  for (const std::string& path : inputPaths) {
    MOEWB_ASSIGN_OR_RETURN(MergeSource source, detail::inspectMergeSource(path));
    sources.push_back(std::move(source));
  }
  std::sort(sources.begin(), sources.end(), [](const MergeSource& a, const MergeSource& b) {
    return a.ranks.front() < b.ranks.front();
  });
  MergeResult result;
  result.outPath = outPath;
  result.worldSize = sources.front().run.worldSize;
  MOEWB_ASSIGN_OR_RETURN(result.missingRanks,
                         detail::checkMergeSources(sources, options.allowMissingRanks));
  planShifts(sources, result);

  std::error_code ec;
  const fs::path parent = fs::absolute(outPath).parent_path();
  if (!fs::create_directories(parent, ec) && ec) {
    return internalError(fmt::format("cannot create the directory '{}' for the merged trace: {}",
                                     parent.string(), ec.message()));
  }
  const std::string tmpPath = temporaryPathFor(outPath);
  removeWithSidecars(tmpPath);
  Status status = writeMerged(tmpPath, sources, result);
  if (status.isOk()) status = publish(tmpPath, outPath, options.overwrite);
  if (!status.isOk()) {
    removeWithSidecars(tmpPath);
    return status;
  }
  return result;
}

}  // namespace moewb::storage
