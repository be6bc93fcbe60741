// checkOutputPath and checkRunNameForPaths (output_path.h).
#include "output_path.h"

#include <filesystem>

#include "moewb/storage/trace_reader.h"

namespace moewb::cli {
namespace {

namespace fs = std::filesystem;

// True for an empty file or a file that opens as a moewb trace (TraceReader::open checks the
// SQLite header, the schema and the meta format itself).
bool isTraceOrEmpty(const std::string& path, uintmax_t size) {
  return size == 0 || storage::TraceReader::open(path).isOk();
}

}  // namespace

Status checkOutputPath(const std::string& path, const std::string& option, bool force,
                       OutputKind kind, const std::vector<std::string>& inputs) {
  const std::string named = option + " '" + path + "'";
  if (path.empty()) return invalidArgument(option + " is empty; accepted: a file path");
  std::error_code error;
  const fs::file_status status = fs::status(path, error);
  if (error && error != std::errc::no_such_file_or_directory) {
    return invalidArgument(named + " cannot be used: " + error.message() +
                           "; accepted: a path whose directories exist and can be searched");
  }
  const fs::path parent = fs::path(path).parent_path();
  if (!fs::exists(status)) {
    if (!parent.empty() && !fs::is_directory(parent, error)) {
      // run creates runs/ itself; other folders must exist.
      if (parent != "runs") {
        return invalidArgument(named + ": its directory '" + parent.string() +
                               "' does not exist; accepted: a path in an existing directory");
      }
    }
    return Status::ok();
  }
  for (const std::string& input : inputs) {
    if (fs::equivalent(path, input, error)) {
      return invalidArgument(named + " is the input file itself; accepted: another path");
    }
  }
  if (!force) {
    return invalidArgument(named + " already exists; pass --force to replace it or choose "
                           "another file");
  }
  if (!fs::is_regular_file(status)) {
    return invalidArgument(named + " is not a regular file (a directory, device, FIFO or "
                           "socket); --force replaces only files; accepted: a file path");
  }
  if (kind == OutputKind::kTrace) {
    const uintmax_t size = fs::file_size(path, error);
    if (error || !isTraceOrEmpty(path, size)) {
      return invalidArgument(named + " exists and is not a moewb trace; --force replaces only "
                             "traces; remove it yourself or choose another file");
    }
  }
  return Status::ok();
}

Status checkRunNameForPaths(const std::string& name) {
  bool ok = !name.empty() && name.size() <= 100 && name[0] != '.';
  for (char c : name) {
    const bool allowed = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                         (c >= '0' && c <= '9') || c == '.' || c == '-' || c == '_';
    ok = ok && allowed;
  }
  if (ok) return Status::ok();
  return invalidArgument("run.name '" + name.substr(0, 120) + (name.size() > 120 ? "..." : "") +
                         "' cannot name the default outputs runs/<run.name>.sqlite, -dumps and "
                         "-checkpoints; accepted: 1 to 100 letters, digits, '.', '-' or '_', not "
                         "starting with '.'; or pass --out (and --dump-dir / --checkpoint-dir)");
}

}  // namespace moewb::cli
