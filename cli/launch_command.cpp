// `moewb launch --nproc N [--master-port P] [--grace-s S] -- PROGRAM ARGS...`: starts N copies of
// a program on this host as the ranks of one run, the way torchrun does.
//
// Each child gets MASTER_ADDR=127.0.0.1, MASTER_PORT, RANK, LOCAL_RANK, WORLD_SIZE and
// LOCAL_WORLD_SIZE (so `moewb run` and PyTorch scripts alike find each other through rank 0's
// store, engine/comm/launch/rendezvous.h) and shares the launcher's stdin, stdout and stderr.
//
// Supervision: the launcher waits for all children. When one fails (non-zero exit or a signal) it
// says so once, then gives the others --grace-s seconds to stop on their own (they should: their
// store watch aborts their communicator), then sends SIGTERM, then SIGKILL 5 s later, naming the
// ranks it had to stop. SIGINT, SIGTERM and SIGHUP sent to the launcher alone are passed on to
// the children (a terminal's Ctrl-C already reaches the whole process group, so it is not sent
// twice) and start the same grace period. Children get SIGTERM if the launcher itself dies.
//
// Exit code: 0 when every rank succeeded, else the first failing rank's code (128 + signal number
// for a signal); 2 for bad arguments or a program that cannot be found; 1 when a child cannot be
// started.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "commands.h"
#include "program_path.h"

extern char** environ;

namespace moewb::cli {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr int kMaxProcesses = 4096;
constexpr std::chrono::seconds kTermToKill{5};
const char* const kRankVariables[] = {"MASTER_ADDR", "MASTER_PORT", "RANK",
                                      "LOCAL_RANK",  "WORLD_SIZE",  "LOCAL_WORLD_SIZE"};

struct LaunchArgs {
  int nproc = 0;
  int masterPort = 0;  // 0 = pick a free port
  double graceS = 30;
  std::vector<std::string> command;  // PROGRAM ARGS...
};

struct Child {
  int32_t rank = 0;
  pid_t pid = -1;
  bool running = false;
  bool signalledByUs = false;  // the launcher sent it SIGTERM / SIGKILL
};

// A TCP port that is free now (bound to port 0 and released); rank 0's store binds it next.
int pickFreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  socklen_t len = sizeof(addr);
  int port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  ::close(fd);
  return port;
}

// "SIGKILL" for 9 (glibc's abbreviation), or "signal N".
std::string signalName(int sig) {
  const char* abbrev = ::sigabbrev_np(sig);
  return abbrev != nullptr ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}

std::string rankList(const std::vector<Child>& children, bool (*pick)(const Child&)) {
  std::string text;
  int count = 0;
  for (const Child& child : children) {
    if (!pick(child)) continue;
    text += (count++ ? ", " : "") + std::to_string(child.rank);
  }
  return (count == 1 ? "rank " : "ranks ") + text;
}

bool isRunning(const Child& child) {
  return child.running;
}

// The parent's environment without the rank variables, plus this rank's.
std::vector<std::string> childEnvironment(int32_t rank, int32_t worldSize, int port) {
  std::vector<std::string> env;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    const std::string text = *entry;
    const std::string name = text.substr(0, text.find('='));
    bool ours = false;
    for (const char* variable : kRankVariables) ours = ours || name == variable;
    if (!ours) env.push_back(text);
  }
  env.push_back("MASTER_ADDR=127.0.0.1");
  env.push_back("MASTER_PORT=" + std::to_string(port));
  env.push_back("RANK=" + std::to_string(rank));
  env.push_back("LOCAL_RANK=" + std::to_string(rank));
  env.push_back("WORLD_SIZE=" + std::to_string(worldSize));
  env.push_back("LOCAL_WORLD_SIZE=" + std::to_string(worldSize));
  return env;
}

// Forks and execs one rank; returns its pid or -1 (after printing why).
pid_t startRank(const std::string& program, const std::vector<std::string>& command,
                std::vector<std::string> env, const sigset_t& childMask) {
  std::vector<char*> argv, envp;
  for (const std::string& word : command) argv.push_back(const_cast<char*>(word.c_str()));
  argv.push_back(nullptr);
  for (std::string& entry : env) envp.push_back(entry.data());
  envp.push_back(nullptr);
  const pid_t launcher = ::getpid();
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);  // the launcher died: stop too
    if (::getppid() != launcher) ::_exit(128 + SIGTERM);
    ::sigprocmask(SIG_SETMASK, &childMask, nullptr);
    ::execve(program.c_str(), argv.data(), envp.data());
    std::fprintf(stderr, "moewb launch: cannot run %s: %s\n", program.c_str(),
                 std::strerror(errno));
    ::_exit(127);
  }
  if (pid < 0) std::fprintf(stderr, "moewb launch: fork failed: %s\n", std::strerror(errno));
  return pid;
}

// Watches the children until all have exited; see the file comment for the policy.
class Supervisor {
 public:
  Supervisor(std::vector<Child> children, std::chrono::milliseconds grace)
      : m_children(std::move(children)), m_grace(grace) {}

  // Returns the launcher's exit code.
  int run(const sigset_t& watched);
  // Starts the grace period now (a rank failed, or the launcher was asked to stop).
  void beginShutdown(const std::string& why);

 private:
  void reap();
  void onExit(Child& child, int status);
  void escalate();
  void signalRunning(int sig);
  bool anyRunning() const;

  std::vector<Child> m_children;
  std::chrono::milliseconds m_grace;
  enum class Phase { kRunning, kGrace, kTerminating, kKilling } m_phase = Phase::kRunning;
  Clock::time_point m_deadline{};
  std::string m_why;                  // "rank 1 failed", "the launcher got SIGINT"
  std::optional<int> m_firstFailure;  // exit code of the first rank that failed
};

bool Supervisor::anyRunning() const {
  for (const Child& child : m_children) {
    if (child.running) return true;
  }
  return false;
}

void Supervisor::signalRunning(int sig) {
  for (Child& child : m_children) {
    if (!child.running) continue;
    ::kill(child.pid, sig);
    if (sig == SIGTERM || sig == SIGKILL) child.signalledByUs = true;
  }
}

void Supervisor::beginShutdown(const std::string& why) {
  if (m_phase != Phase::kRunning) return;
  m_phase = Phase::kGrace;
  m_why = why;
  m_deadline = Clock::now() + m_grace;
  if (anyRunning() && m_grace.count() > 0) {
    std::fprintf(stderr, "moewb launch: waiting up to %.1f s for the other ranks to exit\n",
                 double(m_grace.count()) / 1000.0);
  }
}

void Supervisor::onExit(Child& child, int status) {
  child.running = false;
  const bool failed = !WIFEXITED(status) || WEXITSTATUS(status) != 0;
  if (!failed) return;
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  if (!m_firstFailure) m_firstFailure = code;
  if (!child.signalledByUs) {
    if (WIFEXITED(status)) {
      std::fprintf(stderr, "moewb launch: rank %d (pid %d) exited with code %d\n", child.rank,
                   int(child.pid), code);
    } else {
      std::fprintf(stderr, "moewb launch: rank %d (pid %d) was killed by signal %d (%s)\n",
                   child.rank, int(child.pid), WTERMSIG(status),
                   signalName(WTERMSIG(status)).c_str());
    }
  }
  beginShutdown("rank " + std::to_string(child.rank) + " failed");
}

void Supervisor::reap() {
  for (Child& child : m_children) {
    if (!child.running) continue;
    int status = 0;
    pid_t done = ::waitpid(child.pid, &status, WNOHANG);
    while (done < 0 && errno == EINTR) done = ::waitpid(child.pid, &status, WNOHANG);
    if (done == child.pid) onExit(child, status);
  }
}

void Supervisor::escalate() {
  if (!anyRunning() || Clock::now() < m_deadline) return;
  if (m_phase == Phase::kGrace) {
    std::fprintf(stderr, "moewb launch: %s still running %.1f s after %s; sending SIGTERM\n",
                 rankList(m_children, isRunning).c_str(), double(m_grace.count()) / 1000.0,
                 m_why.c_str());
    signalRunning(SIGTERM);
    m_phase = Phase::kTerminating;
    m_deadline = Clock::now() + kTermToKill;
  } else if (m_phase == Phase::kTerminating) {
    std::fprintf(stderr, "moewb launch: %s still running %lld s after SIGTERM; sending SIGKILL\n",
                 rankList(m_children, isRunning).c_str(), (long long)kTermToKill.count());
    signalRunning(SIGKILL);
    m_phase = Phase::kKilling;
  }
}

int Supervisor::run(const sigset_t& watched) {
  while (anyRunning()) {
    timespec wait{0, 100'000'000};  // 100 ms: reap and check deadlines even without signals
    siginfo_t info{};
    const int sig = ::sigtimedwait(&watched, &info, &wait);
    if (sig == SIGINT || sig == SIGTERM || sig == SIGHUP) {
      // A terminal's signal (SI_KERNEL) already reached every child of the process group.
      if (info.si_code != SI_KERNEL) signalRunning(sig);
      std::fprintf(
          stderr, "moewb launch: got %s; %s\n", signalName(sig).c_str(),
          info.si_code != SI_KERNEL ? "passed it on to the ranks" : "the ranks got it too");
      beginShutdown("the launcher got " + signalName(sig));
    }
    reap();
    if (m_phase != Phase::kRunning) escalate();
  }
  return m_firstFailure.value_or(kExitOk);
}

int badInput(const std::string& message) {
  std::fprintf(stderr, "moewb launch: %s\n", message.c_str());
  return kExitBadInput;
}

std::string joinCommand(const std::vector<std::string>& command) {
  std::string text;
  for (const std::string& word : command) text += (text.empty() ? "" : " ") + word;
  return text;
}

int launchCommand(const LaunchArgs& args) {
  if (args.nproc < 1 || args.nproc > kMaxProcesses) {
    return badInput("--nproc " + std::to_string(args.nproc) +
                    " is not accepted; give the number "
                    "of processes to start on this host, 1.." +
                    std::to_string(kMaxProcesses));
  }
  if (args.masterPort < 0 || args.masterPort > 65535) {
    return badInput("--master-port " + std::to_string(args.masterPort) +
                    " is not accepted; give a TCP port 1..65535, or 0 to pick a free one");
  }
  if (!(args.graceS >= 0) || args.graceS > 86400) {
    return badInput("--grace-s " + std::to_string(args.graceS) +
                    " is not accepted; give seconds in 0..86400");
  }
  if (args.command.empty()) {
    return badInput(
        "no program to run; put it after --, e.g. moewb launch --nproc 2 -- moewb run "
        "--config samples/configs/tiny.toml");
  }
  const Result<std::string> program = resolveProgram(args.command[0]);
  if (!program.isOk()) return badInput(program.status().message());
  const int port = args.masterPort != 0 ? args.masterPort : pickFreePort();
  if (port == 0) {
    std::fprintf(stderr, "moewb launch: cannot find a free TCP port; pass --master-port\n");
    return kExitFailure;
  }
  std::fprintf(stderr,
               "moewb launch: starting %d ranks of '%s' (MASTER_ADDR=127.0.0.1 "
               "MASTER_PORT=%d)\n",
               args.nproc, joinCommand(args.command).c_str(), port);

  sigset_t watched, oldMask;
  sigemptyset(&watched);
  for (int sig : {SIGCHLD, SIGINT, SIGTERM, SIGHUP}) sigaddset(&watched, sig);
  ::sigprocmask(SIG_BLOCK, &watched, &oldMask);
  std::vector<Child> children;
  bool started = true;
  for (int32_t rank = 0; rank < args.nproc && started; ++rank) {
    const pid_t pid =
        startRank(*program, args.command, childEnvironment(rank, args.nproc, port), oldMask);
    started = pid > 0;
    if (started) children.push_back(Child{rank, pid, true, false});
  }
  // A rank that cannot start stops the others at once (no grace: they cannot meet anyway).
  Supervisor supervisor(std::move(children),
                        std::chrono::milliseconds(started ? int64_t(args.graceS * 1000.0) : 0));
  if (!started) supervisor.beginShutdown("a rank could not be started");
  int code = supervisor.run(watched);
  ::sigprocmask(SIG_SETMASK, &oldMask, nullptr);
  if (!started && code == kExitOk) code = kExitFailure;
  return code;
}

}  // namespace

void addLaunchCommand(CLI::App& app, std::function<int()>* action) {
  auto args = std::make_shared<LaunchArgs>();
  CLI::App* cmd = app.add_subcommand(
      "launch",
      "start N processes of a program on this host as the ranks of one run (like torchrun): "
      "each gets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT");
  cmd->add_option("--nproc", args->nproc, "processes to start (one per GPU), 1..4096")->required();
  cmd->add_option("--master-port", args->masterPort,
                  "TCP port of rank 0's store (default 0: pick a free port)");
  cmd->add_option("--grace-s", args->graceS,
                  "after a rank fails, seconds the others get to exit on their own before "
                  "SIGTERM (SIGKILL 5 s later)")
      ->capture_default_str();
  cmd->add_option("PROGRAM", args->command, "the program and its arguments (after --)")
      ->type_name("[ARGS...]");
  cmd->footer(
      "Examples:\n"
      "  moewb launch --nproc 8 -- moewb run --config samples/configs/small.toml\n"
      "  moewb launch --nproc 2 -- python3 train.py\n"
      "Exit code: 0 when every rank succeeded, else the first failing rank's code (128 + "
      "signal when it was killed). Several hosts: start the ranks with torchrun or srun "
      "instead (see docs/PARALLEL.md).");
  cmd->callback([args, action] { *action = [args] { return launchCommand(*args); }; });
}

}  // namespace moewb::cli
