// `moewb merge -o OUT IN...`: joins the per-rank traces of a multi-process run (one file per
// process) into one trace with the clocks aligned on the lowest rank (storage::mergeTraces).
// Prints one line per input (ranks, rows copied, clock offset and how it was found), the ranks
// that had no file, and the output path.
#include <cinttypes>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "commands.h"
#include "output_path.h"
#include "moewb/base/units.h"
#include "moewb/storage/trace_merge.h"

namespace moewb::cli {
namespace {

struct MergeArgs {
  std::string outPath;
  std::vector<std::string> inputs;
  bool force = false;
  bool allowMissing = false;
};

std::string joinRanks(const std::vector<int32_t>& ranks) {
  std::string out;
  for (int32_t rank : ranks) out += (out.empty() ? "" : ",") + std::to_string(rank);
  return out;
}

std::string describeAlignment(const storage::MergedInput& input) {
  switch (input.alignment) {
    case storage::ClockAlignmentMethod::kReference:
      return "reference clock";
    case storage::ClockAlignmentMethod::kCollectives:
      return "median over " + std::to_string(input.sharedCollectives) + " shared collectives";
    case storage::ClockAlignmentMethod::kRunStart:
      return "no collective shared with the reference rank: run starts aligned";
  }
  return "";
}

void printInput(const storage::MergedInput& input) {
  const char* rankWord = input.ranks.size() == 1 ? "rank" : "ranks";
  std::printf("%s %s  %s  %" PRId64 " rows  clock offset %+" PRId64 " ns (%+.6f s, %s)\n", rankWord,
              joinRanks(input.ranks).c_str(), input.path.c_str(), input.rows, input.clockOffsetNs,
              double(input.clockOffsetNs) / double(kNsPerSecond), describeAlignment(input).c_str());
}

// Inputs the user can fix (files, arguments) exit with 2; failures while writing with 1.
int exitCodeFor(const Status& status) {
  switch (status.code()) {
    case StatusCode::kInternal:
    case StatusCode::kResourceExhausted:
      return kExitFailure;
    default:
      return kExitBadInput;
  }
}

int mergeCommand(const MergeArgs& args) {
  if (Status out = checkOutputPath(args.outPath, "-o", args.force, OutputKind::kTrace, args.inputs);
      !out.isOk()) {
    std::fprintf(stderr, "moewb merge: %s\n", out.message().c_str());
    return kExitBadInput;
  }
  storage::MergeOptions options;
  options.overwrite = args.force;
  options.allowMissingRanks = args.allowMissing;
  auto merged = storage::mergeTraces(args.inputs, args.outPath, options);
  if (!merged.isOk()) {
    std::fprintf(stderr, "moewb merge: %s\n", merged.status().message().c_str());
    return exitCodeFor(merged.status());
  }
  for (const storage::MergedInput& input : merged->inputs) printInput(input);
  if (!merged->missingRanks.empty()) {
    std::printf("missing  ranks %s have no input file (merged without them)\n",
                joinRanks(merged->missingRanks).c_str());
  }
  const int32_t present = merged->worldSize - int32_t(merged->missingRanks.size());
  std::printf("wrote %s (%d of %d ranks, %" PRId64 " rows)\n", merged->outPath.c_str(), present,
              merged->worldSize, merged->rows);
  return kExitOk;
}

}  // namespace

void addMergeCommand(CLI::App& app, std::function<int()>* action) {
  auto args = std::make_shared<MergeArgs>();
  CLI::App* cmd = app.add_subcommand(
      "merge", "join the per-rank traces of a multi-process run into one, with aligned clocks");
  cmd->add_option("-o,--out", args->outPath, "merged trace file to write")->required();
  cmd->add_option("inputs", args->inputs, "per-rank trace files (e.g. t.rank0.db t.rank1.db)")
      ->required();
  cmd->add_flag("--force", args->force, "replace OUT if it exists");
  cmd->add_flag("--allow-missing", args->allowMissing,
                "merge even when some ranks of the run have no file");
  cmd->callback([args, action] { *action = [args] { return mergeCommand(*args); }; });
}

}  // namespace moewb::cli
