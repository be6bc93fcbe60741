// moewb: the headless front end of MoE Workbench (train + trace, inspect, export).
#include <cstdio>
#include <exception>
#include <filesystem>
#include <string>

#include "commands.h"

namespace {

// The names of the subcommands `app` accepts, comma separated, in registration order.
std::string subcommandNames(CLI::App& app) {
  std::string names;
  for (const CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) {
    names += (names.empty() ? "" : ", ") + sub->get_name();
  }
  return names;
}

// Refuses a first argument that is neither an option nor a known command before CLI11 sees it:
// CLI11 would print the top help and exit 0 for `moewb bogus --help`, and say only "A subcommand
// is required" for `moewb bogus`. Returns the exit code, or -1 when parsing should go on.
int refuseUnknownCommand(CLI::App& app, int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "moewb: name a command (accepted: %s); moewb --help lists them\n",
                 subcommandNames(app).c_str());
    return moewb::cli::kExitBadInput;
  }
  const std::string first = argv[1];
  if (first.empty() || first[0] == '-') return -1;
  for (const CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) {
    if (sub->check_name(first)) return -1;
  }
  std::fprintf(stderr, "moewb: unknown command '%s' (accepted: %s)\n", first.c_str(),
               subcommandNames(app).c_str());
  return moewb::cli::kExitBadInput;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"MoE Workbench: train a MoE model with the embedded engine, trace it into SQLite, "
               "inspect and export traces",
               "moewb"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "moewb 0.1.0");
  std::function<int()> action;
  moewb::cli::addRunCommand(app, &action);
  moewb::cli::addInfoCommand(app, &action);
  moewb::cli::addExportCommand(app, &action);
  moewb::cli::addConfigCommand(app, &action);
  moewb::cli::addCaptureCommand(app, &action);
  moewb::cli::addLaunchCommand(app, &action);
  moewb::cli::addMergeCommand(app, &action);
  moewb::cli::addDiffCommand(app, &action);
  moewb::cli::addTuneCommand(app, &action);
  moewb::cli::addCtlCommand(app, &action);
  if (int refused = refuseUnknownCommand(app, argc, argv); refused >= 0) return refused;
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);
    return code == 0 ? 0 : moewb::cli::kExitBadInput;
  }
  if (!action) return moewb::cli::kExitBadInput;
  // A filesystem error no command turned into a Status (a path the system cannot resolve) is the
  // user's input: a message and exit 2, never an abort.
  try {
    return action();
  } catch (const std::filesystem::filesystem_error& e) {
    std::fprintf(stderr, "moewb: %s\n", e.what());
    return moewb::cli::kExitBadInput;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "moewb: %s\n", e.what());
    return moewb::cli::kExitFailure;
  }
}
