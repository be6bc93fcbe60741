// `moewb config`: check a config (file + --set overrides) without running it and print the
// effective TOML, or print the reference of every accepted key as a Markdown table.
#include <cstdio>
#include <string>
#include <vector>

#include "commands.h"
#include "moewb/engine/config.h"
#include "moewb/engine/model_parameters.h"
#include "moewb/engine/trainer.h"
#include "moewb/base/units.h"

namespace moewb::cli {
namespace {

struct ConfigArgs {
  std::string configPath;
  std::vector<std::string> overrides;
  bool reference = false;
  bool params = false;
  bool noMachineCheck = false;
};

// Lists the parameters of the config's model from its layout alone (no tensors are allocated,
// so a model larger than this machine lists too): one row per tensor with its shape, elements
// and fp32 bytes, then the totals. Always kExitOk.
int printParameters(const engine::RunConfig& config) {
  const std::vector<engine::ParameterShape> params = engine::modelParameterShapes(config);
  std::printf("%-36s %-22s %14s %16s\n", "parameter", "shape", "count", "bytes (fp32)");
  int64_t count = 0, trainable = 0, stateBytes = 0;
  for (const auto& p : params) {
    std::string shape;
    for (int64_t extent : p.shape) shape += (shape.empty() ? "" : ", ") + std::to_string(extent);
    const int64_t numel = p.numel();
    std::printf("%-36s %-22s %14lld %16lld%s\n", p.name.c_str(), ("[" + shape + "]").c_str(),
                static_cast<long long>(numel), static_cast<long long>(4 * numel),
                p.trainable ? "" : "  frozen");
    count += numel;
    trainable += p.trainable ? numel : 0;
    // The host model's fp32 value and gradient, and AdamW's two moments when trainable.
    stateBytes += (p.trainable ? 16 : 8) * numel;
  }
  std::printf("%lld parameters", static_cast<long long>(count));
  if (trainable != count) std::printf(" (%lld trainable)", static_cast<long long>(trainable));
  std::printf(" in %zu tensors\nfp32 weights: %lld bytes (%s); with gradients and AdamW moments: "
              "%lld bytes (%s)\n",
              params.size(), static_cast<long long>(4 * count), formatBytes(4 * count).c_str(),
              static_cast<long long>(stateBytes), formatBytes(stateBytes).c_str());
  return kExitOk;
}

void printReference() {
  std::printf("| key | type | accepted | default | meaning |\n|---|---|---|---|---|\n");
  for (const auto& key : engine::configKeys()) {
    std::printf("| `%s` | %s | %s | `%s` | %s |\n", key.key.c_str(), key.type.c_str(),
                key.accepted.c_str(), key.defaultValue.c_str(), key.description.c_str());
  }
}

int configCommand(const ConfigArgs& args) {
  if (args.reference) {
    printReference();
    return kExitOk;
  }
  engine::RunConfig config;
  if (!args.configPath.empty()) {
    auto loaded = engine::loadConfigFile(args.configPath);
    if (!loaded.isOk()) {
      std::fprintf(stderr, "moewb config: %s\n", loaded.status().message().c_str());
      return kExitBadInput;
    }
    config = loaded.value();
  }
  for (const auto& assignment : args.overrides) {
    Status applied = engine::applyOverride(config, assignment);
    if (!applied.isOk()) {
      std::fprintf(stderr, "moewb config: %s\n", applied.message().c_str());
      return kExitBadInput;
    }
  }
  Status valid = engine::validateConfig(config);
  if (!valid.isOk()) {
    std::fprintf(stderr, "moewb config: %s\n", valid.message().c_str());
    return kExitBadInput;
  }
  // `moewb run` refuses a config whose estimate does not fit this machine; say so here too
  // (as a note with --params: listing the parameters allocates none of them).
  if (!args.noMachineCheck) {
    Status fits = engine::checkFitsThisMachine(config);
    if (!fits.isOk() && args.params) {
      std::fprintf(stderr,
                   "moewb config: note: `moewb run` would refuse this config on this machine: %s\n",
                   fits.message().c_str());
    } else if (!fits.isOk()) {
      std::fprintf(stderr,
                   "moewb config: the config is valid, but `moewb run` would refuse it on this "
                   "machine: %s (--no-machine-check validates it for another machine)\n",
                   fits.message().c_str());
      return kExitBadInput;
    }
  }
  if (args.params) return printParameters(config);
  std::printf("%s", engine::toToml(config).c_str());
  return kExitOk;
}

}  // namespace

void addConfigCommand(CLI::App& app, std::function<int()>* action) {
  auto args = std::make_shared<ConfigArgs>();
  CLI::App* cmd = app.add_subcommand(
      "config", "validate a config and print it with every key, or list all keys (--reference)");
  cmd->add_option("--config,-c", args->configPath, "TOML config (default: all defaults)")
      ->check(CLI::ExistingFile);
  cmd->add_option("--set", args->overrides, "override a config key")->type_name("KEY=VALUE");
  cmd->add_flag("--reference", args->reference, "print every accepted key as a Markdown table");
  cmd->add_flag("--params", args->params,
                "list the model's parameters (names as in checkpoints and dumps, shapes, counts, "
                "bytes, totals) without allocating them; a model too large for this machine is "
                "listed with a note");
  cmd->add_flag("--no-machine-check", args->noMachineCheck,
                "validate only: skip the check that a run fits this machine's memory");
  cmd->callback([args, action] { *action = [args] { return configCommand(*args); }; });
}

}  // namespace moewb::cli
