// moewb: the headless front end of MoE Workbench (train + trace, inspect, export).
#include <cstdio>

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
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);
    return code == 0 ? 0 : moewb::cli::kExitBadInput;
  }
  return action ? action() : moewb::cli::kExitBadInput;
}
