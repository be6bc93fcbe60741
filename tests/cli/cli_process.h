// Helpers to run the real `moewb` binary from tests: exit code plus captured stdout/stderr, and a
// per-test temporary directory.
#pragma once

#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include "../source_dir.h"

namespace moewb::cli::testing {

struct ProcessResult {
  int exitCode = -1;
  std::string out;
  std::string err;
};

inline std::string readFile(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

// Runs a shell command line (verbatim; quote arguments yourself) with stdout and stderr captured
// in `dir`.
inline ProcessResult runProgram(const std::string& commandLine, const std::filesystem::path& dir) {
  std::filesystem::path outFile = dir / "stdout.txt";
  std::filesystem::path errFile = dir / "stderr.txt";
  std::string command = commandLine + " >" + outFile.string() + " 2>" + errFile.string() +
                        " </dev/null";
  int status = std::system(command.c_str());
  ProcessResult result;
  result.exitCode = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  result.out = readFile(outFile);
  result.err = readFile(errFile);
  return result;
}

// Runs `moewb ARGS` through the shell (args are passed verbatim; quote them yourself).
inline ProcessResult runMoewb(const std::string& args, const std::filesystem::path& dir) {
  return runProgram(std::string(MOEWB_CLI_PATH) + " " + args, dir);
}

// A fresh empty directory under the system temp dir, removed by the destructor.
class TempDir {
 public:
  explicit TempDir(const std::string& name) {
    m_path = std::filesystem::temp_directory_path() /
             ("moewb-" + name + "-" + std::to_string(::getpid()));
    std::filesystem::remove_all(m_path);
    std::filesystem::create_directories(m_path);
  }
  ~TempDir() { std::filesystem::remove_all(m_path); }
  const std::filesystem::path& path() const { return m_path; }
  std::string file(const std::string& name) const { return (m_path / name).string(); }

 private:
  std::filesystem::path m_path;
};

inline std::string tinyConfig() { return moewb::test::sourceDir() + "/samples/configs/tiny.toml"; }

}  // namespace moewb::cli::testing
