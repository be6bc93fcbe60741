// `moewb export`: convert a trace into formats other tools open (Chrome Trace Event JSON).
#include <cstdio>
#include <string>

#include "commands.h"
#include "output_path.h"
#include "moewb/storage/trace_reader.h"

namespace moewb::cli {
namespace {

struct ExportArgs {
  std::string tracePath;
  std::string chromePath;
  bool force = false;
};

int exportCommand(const ExportArgs& args) {
  if (Status out = checkOutputPath(args.chromePath, "--chrome", args.force, OutputKind::kJson,
                                   {args.tracePath});
      !out.isOk()) {
    std::fprintf(stderr, "moewb export: %s\n", out.message().c_str());
    return kExitBadInput;
  }
  auto reader = storage::TraceReader::open(args.tracePath);
  if (!reader.isOk()) {
    std::fprintf(stderr, "moewb export: %s\n", reader.status().message().c_str());
    return kExitBadInput;
  }
  Status written = storage::exportChromeTrace(**reader, args.chromePath);
  if (!written.isOk()) {
    std::fprintf(stderr, "moewb export: %s\n", written.message().c_str());
    return kExitFailure;
  }
  std::printf("wrote %s (Chrome Trace Event format; open it in https://ui.perfetto.dev or "
              "chrome://tracing)\n", args.chromePath.c_str());
  return kExitOk;
}

}  // namespace

void addExportCommand(CLI::App& app, std::function<int()>* action) {
  auto args = std::make_shared<ExportArgs>();
  CLI::App* cmd = app.add_subcommand("export", "export a trace to another format");
  cmd->add_option("trace", args->tracePath, "trace file (.sqlite)")->required();
  cmd->add_option("--chrome", args->chromePath, "write Chrome Trace Event JSON (Perfetto UI)")
      ->required();
  cmd->add_flag("--force,-f", args->force, "replace the output file if it exists");
  cmd->callback([args, action] { *action = [args] { return exportCommand(*args); }; });
}

}  // namespace moewb::cli
