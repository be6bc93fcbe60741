// `moewb config --params` (issue 19, item 8): the parameter listing (names, shapes, counts, bytes,
// totals) comes from the model's shapes-only parameter layout, so a model larger than this
// machine is listed without allocating it, and the listing is the list the trainer builds.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "cli_process.h"
#include "moewb/engine/config.h"
#include "moewb/engine/trainer.h"

namespace moewb::cli::testing {
namespace {

// One row of the listing: "name [a, b, c] count bytes".
struct Row {
  std::string name;
  std::vector<int64_t> shape;
  int64_t count = 0;
  int64_t bytes = 0;
};

// The parameter rows of `moewb config --params` output (header and total lines skipped).
std::vector<Row> parseRows(const std::string& out) {
  std::vector<Row> rows;
  std::istringstream lines(out);
  std::string line;
  while (std::getline(lines, line)) {
    const size_t open = line.find('[');
    const size_t close = line.find(']');
    if (open == std::string::npos || close == std::string::npos || close < open) continue;
    Row row;
    std::istringstream name(line.substr(0, open));
    name >> row.name;
    std::string extents = line.substr(open + 1, close - open - 1);
    for (char& c : extents) c = c == ',' ? ' ' : c;
    std::istringstream shape(extents);
    for (int64_t extent = 0; shape >> extent;) row.shape.push_back(extent);
    std::istringstream numbers(line.substr(close + 1));
    numbers >> row.count >> row.bytes;
    rows.push_back(row);
  }
  return rows;
}

// `prlimit --as=BYTES ` when prlimit exists and the binary is not built with ASan (whose shadow
// memory reserves terabytes of address space, so no address-space limit lets it start); else "".
std::string addressSpaceLimit(int64_t bytes) {
#if defined(__SANITIZE_ADDRESS__)
  (void)bytes;
  return "";
#else
  if (std::system("command -v prlimit >/dev/null 2>&1") != 0) return "";
  return "prlimit --as=" + std::to_string(bytes) + " ";
#endif
}

constexpr int64_t kOneGiB = int64_t(1) << 30;

// A made-up plain MoE of about 207 billion parameters (3.3 TB of fp32 weights, gradients and
// AdamW moments), from tiny.toml with wider layers.
const char* kHugeOverrides =
    "--set model.d_model=8192 --set model.num_heads=64 --set model.num_layers=4 "
    "--set moe.num_experts=256 --set moe.d_ff=8192";

TEST(ConfigParamsCli, ListsAModelLargerThanThisMachineWithoutAllocatingIt) {
  TempDir dir("config-params-huge");
  const std::string limit = addressSpaceLimit(kOneGiB);
  auto result = runProgram(limit + MOEWB_CLI_PATH + std::string(" config -c ") + tinyConfig() +
                               " " + kHugeOverrides + " --params",
                           dir.path());
  ASSERT_EQ(result.exitCode, 0) << result.err;
  const int64_t v = 256, d = 8192, layers = 4, e = 256, f = 8192;
  const int64_t expected = 2 * v * d + d + layers * (2 * d + 4 * d * d + e * d + 3 * e * f * d);
  EXPECT_NE(result.out.find(std::to_string(expected) + " parameters"), std::string::npos)
      << result.out.substr(result.out.size() > 600 ? result.out.size() - 600 : 0);
  const std::vector<Row> rows = parseRows(result.out);
  ASSERT_EQ(rows.size(), size_t(3 + layers * 10));  // 10 per layer: 2 norms, 4 attention, 4 MoE
  int64_t sum = 0;
  for (const Row& row : rows) {
    int64_t count = 1;
    for (int64_t extent : row.shape) count *= extent;
    EXPECT_EQ(row.count, count) << row.name;
    EXPECT_EQ(row.bytes, 4 * count) << row.name;
    sum += row.count;
  }
  EXPECT_EQ(sum, expected);
  EXPECT_EQ(rows[8].name, "layers.0.moe.gate");
  EXPECT_EQ(rows[8].shape, (std::vector<int64_t>{e, f, d}));
  // The run itself would not fit: the listing says so on stderr and still exits 0.
  EXPECT_NE(result.err.find("moewb run` would refuse"), std::string::npos) << result.err;
  if (limit.empty()) GTEST_SKIP() << "listed, but not under a memory limit (no prlimit, or ASan)";
}

// h200.toml (backend cuda, 1.97B parameters: 29 GiB of host training state) on a machine with
// less than that, under a 1 GiB address-space limit; the total is the one its header states.
TEST(ConfigParamsCli, ListsH200ConfigOnAMachineWithoutTheMemoryToBuildIt) {
  TempDir dir("config-params-h200");
  const std::string limit = addressSpaceLimit(kOneGiB);
  const std::string config = moewb::test::sourceDir() + "/samples/configs/h200.toml";
  auto result = runProgram(limit + MOEWB_CLI_PATH + std::string(" config -c ") + config +
                               " --params",
                           dir.path());
  ASSERT_EQ(result.exitCode, 0) << result.err;
  // The header's "# 1965739136 parameters (1.97B; ...": the word before " parameters (".
  const std::string header = readFile(config);
  const size_t at = header.find(" parameters (");
  ASSERT_NE(at, std::string::npos);
  const size_t start = header.rfind(' ', at - 1) + 1;
  const std::string total = header.substr(start, at - start);
  EXPECT_NE(result.out.find(total + " parameters"), std::string::npos) << total;
  const std::vector<Row> rows = parseRows(result.out);
  ASSERT_FALSE(rows.empty());
  EXPECT_EQ(rows.front().name, "embedding");
  EXPECT_EQ(rows.back().name, "lm_head");
  if (limit.empty()) GTEST_SKIP() << "listed, but not under a memory limit (no prlimit, or ASan)";
}

// Every sample config small enough to build here, and tiny.toml with every kind of parameter
// (attention residuals, all three mixers, shared and latent experts, image patches, LoRA on all
// targets): the listing is the parameter list of the trainer's built model, name by name.
TEST(ConfigParamsCli, ListingIsTheBuiltModelsParameterListForEverySampleConfig) {
  TempDir dir("config-params-drift");
  std::vector<std::string> cases;
  for (const auto& entry :
       std::filesystem::directory_iterator(moewb::test::sourceDir() + "/samples/configs")) {
    if (entry.path().extension() == ".toml") cases.push_back("-c " + entry.path().string());
  }
  cases.push_back("-c " + tinyConfig() +
                  " --set model.residual=attnres --set model.mixer_pattern=AKS"
                  " --set model.num_layers=3 --set moe.num_shared_experts=1"
                  " --set moe.latent_dim=32 --set data.image_size=8 --set data.patch_size=4"
                  " --set lora.enabled=true --set lora.targets=all");
  int built = 0;
  for (const std::string& args : cases) {
    SCOPED_TRACE(args);
    auto listed = runMoewb("config " + args + " --params", dir.path());
    ASSERT_EQ(listed.exitCode, 0) << listed.err;
    const std::vector<Row> rows = parseRows(listed.out);
    int64_t count = 0;
    for (const Row& row : rows) count += row.count;
    if (16 * count > kOneGiB) continue;  // h200.toml: its total is checked above
    // The same config, loaded the way the CLI loads it, built by the trainer on one rank.
    auto effective = runMoewb("config " + args + " --no-machine-check", dir.path());
    ASSERT_EQ(effective.exitCode, 0) << effective.err;
    auto config = engine::parseConfigToml(effective.out, "moewb config output");
    ASSERT_TRUE(config.isOk()) << config.status().toString();
    config->run.backend = "cpu";
    config->parallel = engine::ParallelSection{};
    auto trainer = engine::Trainer::create(*config, nullptr);
    ASSERT_TRUE(trainer.isOk()) << trainer.status().toString();
    const auto infos = (*trainer)->parameterInfos();
    ASSERT_EQ(rows.size(), infos.size());
    for (size_t i = 0; i < infos.size(); ++i) {
      EXPECT_EQ(rows[i].name, infos[i].name) << i;
      EXPECT_EQ(rows[i].shape, infos[i].shape) << infos[i].name;
    }
    EXPECT_EQ(count, (*trainer)->parameterCount());
    ++built;
  }
  EXPECT_GE(built, 6);
}

}  // namespace
}  // namespace moewb::cli::testing
