// `moewb capture [options] -- PROGRAM ARGS...`: runs any CUDA program with the profiler injected
// through CUPTI's injection mechanism and records its GPU activity into a trace file.
//
// How: the program is started (fork + exec) with CUDA_INJECTION64_PATH naming libmoewb_inject.so
// (built next to this executable; see profiler/src/inject/inject_session.h), NVTX_INJECTION64_PATH
// naming the libcupti that library loads (so the program's own NVTX ranges arrive) and
// MOEWB_CAPTURE_* telling the library where to write. The program's exit code is forwarded (128 +
// signal when it was killed). Checks before anything runs: the program exists, the output file
// does not (unless --force), this build has CUDA, the library loads; each failure exits 2.
#include <dlfcn.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "commands.h"
#include "output_path.h"
#include "program_path.h"
#include "moewb/storage/gpu_summary.h"
#include "moewb/storage/trace_reader.h"

namespace moewb::cli {
namespace {

namespace fs = std::filesystem;

struct CaptureArgs {
  std::vector<std::string> command;  // PROGRAM ARGS...
  std::string outPath;
  bool force = false;
  int64_t flushMs = 1000;
  int64_t bufferMib = 8;
  std::string injectLibrary;  // --inject-lib (default: next to moewb)
};

// The run's name: the program's file name, plus the script for an interpreter
// ("python3 moe_layer.py").
std::string runName(const std::vector<std::string>& command) {
  std::string name = fs::path(command[0]).filename().string();
  const bool interpreter = name.starts_with("python") || name == "bash" || name == "sh";
  if (interpreter && command.size() > 1 && !command[1].starts_with("-")) {
    name += " " + fs::path(command[1]).filename().string();
  }
  return name;
}

std::string defaultOutPath(const std::vector<std::string>& command) {
  const std::string name = runName(command);
  const size_t space = name.rfind(' ');
  const std::string last = space == std::string::npos ? name : name.substr(space + 1);
  return "runs/capture-" + fs::path(last).stem().string() + ".sqlite";
}

#ifdef MOEWB_CAPTURE_AVAILABLE
// Single-quotes words that need it, for the command line stored in the run row.
std::string joinCommand(const std::vector<std::string>& command) {
  std::string text;
  for (const std::string& word : command) {
    if (!text.empty()) text += ' ';
    if (!word.empty() && word.find_first_of(" \t\n'\"\\$`") == std::string::npos) {
      text += word;
      continue;
    }
    text += '\'';
    for (char c : word) text += c == '\'' ? std::string("'\\''") : std::string(1, c);
    text += '\'';
  }
  return text;
}

std::string findInjectLibrary(const std::string& requested) {
  if (!requested.empty()) return requested;
  if (const char* env = std::getenv("MOEWB_INJECT_LIBRARY"); env != nullptr && env[0] != '\0') {
    return env;
  }
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  for (const fs::path& candidate : {self.parent_path() / "libmoewb_inject.so",
                                    self.parent_path() / ".." / "lib" / "libmoewb_inject.so"}) {
    if (fs::is_regular_file(candidate, ec)) return candidate.string();
  }
  return (self.parent_path() / "libmoewb_inject.so").string();
}

// Loads the injection library here once to check that it (and its libcupti) load, and returns
// the path of that libcupti, which NVTX_INJECTION64_PATH must name.
Result<std::string> cuptiPathOf(const std::string& injectLibrary) {
  void* handle = dlopen(injectLibrary.c_str(), RTLD_LAZY | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    return failedPrecondition("cannot load the injection library " + injectLibrary + ": " +
                              (why != nullptr ? why : "unknown error") +
                              " (is libcupti on LD_LIBRARY_PATH?)");
  }
  if (dlsym(handle, "InitializeInjection") == nullptr) {
    return failedPrecondition(injectLibrary + " does not export InitializeInjection");
  }
  void* cupti = dlsym(handle, "cuptiGetVersion");
  Dl_info info{};
  if (cupti == nullptr || dladdr(cupti, &info) == 0 || info.dli_fname == nullptr) {
    return failedPrecondition("cannot find the libcupti that " + injectLibrary + " uses");
  }
  return std::string(info.dli_fname);  // the handle stays open: moewb exits soon
}

// Starts the program with the capture environment and waits for it; returns its exit code.
int launch(const std::string& program, const CaptureArgs& args, const std::string& outPath,
           const std::string& injectLibrary, const std::string& cuptiPath) {
  std::vector<char*> argv;
  for (const std::string& word : args.command) argv.push_back(const_cast<char*>(word.c_str()));
  argv.push_back(nullptr);
  // Like system(): the terminal's Ctrl-C goes to the program; moewb waits for it to finish.
  struct sigaction ignore {
  }, oldInt{}, oldQuit{};
  ignore.sa_handler = SIG_IGN;
  sigaction(SIGINT, &ignore, &oldInt);
  sigaction(SIGQUIT, &ignore, &oldQuit);
  const pid_t child = fork();
  if (child == 0) {
    sigaction(SIGINT, &oldInt, nullptr);
    sigaction(SIGQUIT, &oldQuit, nullptr);
    setenv("CUDA_INJECTION64_PATH", injectLibrary.c_str(), 1);
    if (std::getenv("NVTX_INJECTION64_PATH") == nullptr) {  // else keep the user's own choice
      setenv("NVTX_INJECTION64_PATH", cuptiPath.c_str(), 1);
      setenv("MOEWB_CAPTURE_NVTX_AUTO", "1", 1);  // the library may correct it (inject_session.h)
    }
    setenv("MOEWB_CAPTURE_OUT", outPath.c_str(), 1);
    setenv("MOEWB_CAPTURE_NAME", runName(args.command).c_str(), 1);
    setenv("MOEWB_CAPTURE_COMMAND", joinCommand(args.command).c_str(), 1);
    setenv("MOEWB_CAPTURE_PID", std::to_string(getpid()).c_str(), 1);
    setenv("MOEWB_CAPTURE_FLUSH_MS", std::to_string(args.flushMs).c_str(), 1);
    setenv("MOEWB_CAPTURE_BUFFER_MIB", std::to_string(args.bufferMib).c_str(), 1);
    execv(program.c_str(), argv.data());
    std::fprintf(stderr, "moewb capture: cannot run %s: %s\n", program.c_str(),
                 std::strerror(errno));
    _exit(127);
  }
  int status = 0;
  int code = kExitFailure;
  if (child < 0) {
    std::fprintf(stderr, "moewb capture: fork failed: %s\n", std::strerror(errno));
  } else {
    while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
    }
    code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  sigaction(SIGINT, &oldInt, nullptr);
  sigaction(SIGQUIT, &oldQuit, nullptr);
  return code;
}

void printResult(const std::string& outPath, int exitCode) {
  if (!fs::exists(outPath)) {
    std::fprintf(stderr,
                 "moewb capture: the program exited with %d and never initialised CUDA; "
                 "no trace was written\n",
                 exitCode);
    return;
  }
  int64_t kernels = -1;
  if (auto reader = storage::TraceReader::open(outPath); reader.isOk()) {
    if (auto summary = storage::kernelSummary(**reader, 0); summary.isOk()) {
      kernels = summary->kernelCount;
    }
  }
  std::fprintf(stderr, "moewb capture: the program exited with %d; trace written to %s", exitCode,
               outPath.c_str());
  if (kernels >= 0) std::fprintf(stderr, " (%lld kernels)", (long long)kernels);
  std::fprintf(stderr, "\n  see: moewb info %s\n", outPath.c_str());
}
#endif

int captureCommand(const CaptureArgs& args) {
  auto program = resolveProgram(args.command[0]);
  if (!program.isOk()) {
    std::fprintf(stderr, "moewb capture: %s\n", program.status().message().c_str());
    return kExitBadInput;
  }
  const std::string outPath =
      fs::absolute(args.outPath.empty() ? defaultOutPath(args.command) : args.outPath).string();
  if (Status out = checkOutputPath(outPath, "--out", args.force, OutputKind::kTrace);
      !out.isOk()) {
    std::fprintf(stderr, "moewb capture: %s\n", out.message().c_str());
    return kExitBadInput;
  }
#ifndef MOEWB_CAPTURE_AVAILABLE
  std::fprintf(stderr,
               "moewb capture: this moewb was built without CUDA; capture needs a CUDA "
               "build (configure with -DMOEWB_CUDA=ON)\n");
  return kExitBadInput;
#else
  const std::string injectLibrary = findInjectLibrary(args.injectLibrary);
  auto cuptiPath = cuptiPathOf(injectLibrary);
  if (!cuptiPath.isOk()) {
    std::fprintf(stderr, "moewb capture: %s\n", cuptiPath.status().message().c_str());
    return kExitBadInput;
  }
  std::error_code ec;
  for (const char* suffix : {"", "-wal", "-shm"}) fs::remove(outPath + suffix, ec);
  std::fprintf(stderr, "moewb capture: running %s -> %s\n", joinCommand(args.command).c_str(),
               outPath.c_str());
  const int code = launch(*program, args, outPath, injectLibrary, *cuptiPath);
  printResult(outPath, code);
  return code;
#endif
}

}  // namespace

void addCaptureCommand(CLI::App& app, std::function<int()>* action) {
  auto args = std::make_shared<CaptureArgs>();
  CLI::App* cmd = app.add_subcommand(
      "capture",
      "run any CUDA program (a PyTorch script too) with the GPU profiler injected "
      "(CUPTI) and record its kernels, copies, memory, API calls and NVTX ranges");
  cmd->add_option("--out,-o", args->outPath,
                  "trace file to write (default runs/capture-<program or script>.sqlite)");
  cmd->add_flag("--force,-f", args->force, "replace the output file if it exists");
  cmd->add_option("--flush-ms", args->flushMs,
                  "write captured rows to the file every N ms while the program runs")
      ->check(CLI::Range(int64_t(10), int64_t(3'600'000)));
  cmd->add_option("--buffer-mib", args->bufferMib, "size of each CUPTI activity buffer in MiB")
      ->check(CLI::Range(int64_t(1), int64_t(1024)));
  cmd->add_option("--inject-lib", args->injectLibrary,
                  "the injection library (default libmoewb_inject.so next to moewb)");
  cmd->add_option("PROGRAM", args->command, "the program and its arguments (after --)")
      ->required()
      ->type_name("[ARGS...]");
  cmd->footer(
      "Example: moewb capture -o runs/moe.sqlite -- python3 moe_layer.py\n"
      "Kernel and copy rows carry step -1 and the innermost NVTX range of the program as "
      "their phase (\"external\" outside every range). The program's exit code is "
      "returned.");
  cmd->callback([args, action] { *action = [args] { return captureCommand(*args); }; });
}

}  // namespace moewb::cli
