// `moewb config`: check a config (file + --set overrides) without running it and print the
// effective TOML, or print the reference of every accepted key as a Markdown table.
#include <cstdio>
#include <string>
#include <vector>

#include "commands.h"
#include "moewb/engine/config.h"
#include "moewb/engine/trainer.h"

namespace moewb::cli {
namespace {

struct ConfigArgs {
  std::string configPath;
  std::vector<std::string> overrides;
  bool reference = false;
  bool params = false;
  bool noMachineCheck = false;
};

int printParameters(const engine::RunConfig& config) {
  // The full model's parameters, as one rank holds them (a parallel run shards the same list).
  engine::RunConfig oneRank = config;
  oneRank.parallel = engine::ParallelSection{};
  auto trainer = engine::Trainer::create(oneRank, nullptr);
  if (!trainer.isOk()) {
    std::fprintf(stderr, "moewb config: %s\n", trainer.status().message().c_str());
    return kExitBadInput;
  }
  for (const auto& info : (*trainer)->parameterInfos()) {
    std::string shape;
    for (int64_t extent : info.shape) shape += (shape.empty() ? "" : ", ") + std::to_string(extent);
    std::printf("%-32s [%s]\n", info.name.c_str(), shape.c_str());
  }
  std::printf("%lld parameters\n", static_cast<long long>((*trainer)->parameterCount()));
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
  // `moewb run` refuses a config whose estimate does not fit this machine; say so here too.
  if (!args.noMachineCheck) {
    Status fits = engine::checkFitsThisMachine(config);
    if (!fits.isOk()) {
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
                "print the model's parameter names and shapes (as in checkpoints and dumps)");
  cmd->add_flag("--no-machine-check", args->noMachineCheck,
                "validate only: skip the check that a run fits this machine's memory");
  cmd->callback([args, action] { *action = [args] { return configCommand(*args); }; });
}

}  // namespace moewb::cli
