// runWhereDirIsReadOnly: a test helper that runs a check in a forked child which cannot write a
// directory (as root it drops to the user nobody), for tests of read-only trace folders
// (tests/storage/trace_read_only_test.cpp, tests/gui/timeline_summary_test.cpp). POSIX only.
#pragma once

#include <grp.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <functional>
#include <optional>
#include <string>

namespace moewb::test {

// Runs `body` in a child process that cannot write `dir`. Returns what `body` returned ("" =
// success) or why the child failed; nullopt when this machine cannot make `dir` unwritable (not
// root and the directory is writable anyway), so the caller can skip.
inline std::optional<std::string> runWhereDirIsReadOnly(const std::string& dir,
                                                        const std::function<std::string()>& body) {
  int fds[2];
  if (pipe(fds) != 0) return "pipe failed";
  const pid_t child = fork();
  if (child < 0) return "fork failed";
  if (child == 0) {
    close(fds[0]);
    if (geteuid() == 0 && (setgroups(0, nullptr) != 0 || setgid(65534) != 0 || setuid(65534) != 0))
      _exit(77);
    if (access(dir.c_str(), W_OK) == 0) _exit(77);
    const std::string problem = body();
    (void)!write(fds[1], problem.data(), problem.size());
    _exit(problem.empty() ? 0 : 1);
  }
  close(fds[1]);
  std::string problem;
  char buf[512];
  for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;) problem.append(buf, size_t(n));
  close(fds[0]);
  int status = 0;
  waitpid(child, &status, 0);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 77) return std::nullopt;
  if (!WIFEXITED(status)) return "the child died with status " + std::to_string(status);
  return problem;
}

}  // namespace moewb::test
