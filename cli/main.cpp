// moewb: the headless front end of MoE Workbench (train + trace, inspect, export).
#include <cstdio>
#include <exception>
#include <filesystem>

#include "commands.h"

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
  moewb::cli::addTuneCommand(app, &action);
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
