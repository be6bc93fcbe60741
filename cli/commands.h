// The `moewb` subcommands. Each registers its options on a CLI11 app and runs when chosen.
// Exit codes: 0 success, 1 a failure while working (I/O, engine), 2 bad input (arguments, config,
// trace file), 130 interrupted before anything useful was written.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>

namespace moewb::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitBadInput = 2;

// Adds the subcommand to `app`; `*action` is set to run it when the subcommand is parsed.
void addRunCommand(CLI::App& app, std::function<int()>* action);
void addInfoCommand(CLI::App& app, std::function<int()>* action);
void addExportCommand(CLI::App& app, std::function<int()>* action);
void addConfigCommand(CLI::App& app, std::function<int()>* action);
void addCaptureCommand(CLI::App& app, std::function<int()>* action);
void addLaunchCommand(CLI::App& app, std::function<int()>* action);
void addMergeCommand(CLI::App& app, std::function<int()>* action);
void addDiffCommand(CLI::App& app, std::function<int()>* action);
void addTuneCommand(CLI::App& app, std::function<int()>* action);
void addCtlCommand(CLI::App& app, std::function<int()>* action);

}  // namespace moewb::cli
