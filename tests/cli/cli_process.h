// Helpers to run the real `moewb` binary from tests: exit code plus captured stdout/stderr, and a
// per-test temporary directory.
#pragma once

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "../source_dir.h"

extern char** environ;

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

// Starts `moewb ARGS` with stderr into `errPath` (stdout to /dev/null); returns its pid.
inline pid_t spawnMoewb(const std::vector<std::string>& args, const std::string& errPath) {
  std::vector<std::string> all{MOEWB_CLI_PATH};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, errPath.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t child = 0;
  const int rc = posix_spawn(&child, MOEWB_CLI_PATH, &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  return rc == 0 ? child : -1;
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
