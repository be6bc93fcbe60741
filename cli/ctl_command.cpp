// `moewb ctl PATH COMMAND [ARGS]`: send one live command to a run started with
// `moewb run --control PATH` and print its answer (protocol: run/control_protocol.h).
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "commands.h"
#include "moewb/base/text.h"
#include "moewb/run/control_client.h"
#include "moewb/run/control_protocol.h"

namespace moewb::cli {
namespace {

struct CtlArgs {
  std::string path;
  std::vector<std::string> words;  // the command and its arguments
  double timeoutSeconds = 60;
};

// Prints the run's answer on stdout: exit 0 for "ok ...", 1 for "error: ...". A failure to reach
// the run goes to stderr (exit 1; 2 for a request that cannot be sent).
int ctlCommand(const CtlArgs& args) {
  for (const std::string& word : args.words) {
    if (word.find_first_of("\r\n") != std::string::npos) {
      std::fprintf(stderr, "moewb ctl: a command is one line; an argument holds a newline\n");
      return kExitBadInput;
    }
  }
  const std::string request = joinText(args.words, " ");
  const auto timeoutMs = int64_t(args.timeoutSeconds * 1000);
  Result<std::string> answer = run::askControlSocket(args.path, request, timeoutMs);
  if (!answer.isOk()) {
    std::fprintf(stderr, "moewb ctl: %s\n", answer.status().message().c_str());
    return answer.status().code() == StatusCode::kInvalidArgument ? kExitBadInput : kExitFailure;
  }
  std::printf("%s\n", answer->c_str());
  return run::isControlOk(*answer) ? kExitOk : kExitFailure;
}

}  // namespace

void addCtlCommand(CLI::App& app, std::function<int()>* action) {
  auto args = std::make_shared<CtlArgs>();
  CLI::App* cmd = app.add_subcommand(
      "ctl", "send a live command to a run started with `moewb run --control PATH`: status, "
             "pause, resume, step, stop, set KEY=VALUE [KEY=VALUE ...], apply KEY=VALUE ..., "
             "keys");
  cmd->add_option("path", args->path, "the run's control socket (moewb run --control PATH)")
      ->required();
  cmd->add_option("command", args->words,
                  "the command and its arguments, e.g. status, or set optim.lr=1e-3")
      ->required()
      ->type_name("COMMAND [ARGS]");
  cmd->add_option("--timeout", args->timeoutSeconds,
                  "seconds to wait for the answer (pause, step, stop and set are answered at the "
                  "run's next step boundary); default 60")
      ->check(CLI::Range(0.001, 86400.0));
  cmd->callback([args, action] { *action = [args] { return ctlCommand(*args); }; });
}

}  // namespace moewb::cli
