// PATH lookup of the program a command starts (see program_path.h).
#include "program_path.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>

namespace moewb::cli {
namespace {

namespace fs = std::filesystem;

bool isExecutableFile(const fs::path& path) {
  std::error_code ec;
  return fs::is_regular_file(path, ec) && ::access(path.c_str(), X_OK) == 0;
}

}  // namespace

Result<std::string> resolveProgram(const std::string& program) {
  if (program.find('/') != std::string::npos) {
    if (isExecutableFile(program)) return program;
    return notFound("program '" + program + "' not found or not executable");
  }
  const char* path = std::getenv("PATH");
  const std::string dirs = path != nullptr ? path : "/usr/local/bin:/usr/bin:/bin";
  size_t begin = 0;
  while (begin <= dirs.size()) {
    size_t end = dirs.find(':', begin);
    if (end == std::string::npos) end = dirs.size();
    const fs::path candidate =
        fs::path(end > begin ? dirs.substr(begin, end - begin) : ".") / program;
    if (isExecutableFile(candidate)) return candidate.string();
    begin = end + 1;
  }
  return notFound("program '" + program + "' not found on PATH");
}

}  // namespace moewb::cli
