// Replays the fuzz corpora and every crash reproducer the fuzzers found
// (tests/fuzz/corpus/<target>/ and tests/fuzz/regressions/<target>/) through the same targets as
// the libFuzzer executables, with any compiler and without libFuzzer. A target returns for every
// input; a regression shows up as a crash, an abort (uncaught exception, broken round trip), a
// sanitizer report in the ASan build, or a CTest timeout.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "../source_dir.h"
#include "fuzz_model.h"
#include "fuzz_targets.h"
#include "moewb/engine/config.h"
#include "moewb/engine/trainer.h"

namespace moewb::fuzz {
namespace {

namespace fs = std::filesystem;

// The files of tests/fuzz/<kind>/<target>/, sorted (README files are documentation).
std::vector<fs::path> inputsOf(const std::string& kind, const std::string& target) {
  std::vector<fs::path> files;
  const fs::path dir = fs::path(test::sourceDir()) / "tests" / "fuzz" / kind / target;
  if (!fs::is_directory(dir)) return files;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.is_regular_file() && entry.path().filename() != "README.md") {
      files.push_back(entry.path());
    }
  }
  std::sort(files.begin(), files.end());
  return files;
}

std::vector<uint8_t> readBytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Feeds every corpus and regression file of `target` to `fuzz`; returns how many.
size_t replay(const std::string& target, int (*fuzz)(const uint8_t*, size_t)) {
  size_t count = 0;
  for (const char* kind : {"corpus", "regressions"}) {
    for (const fs::path& path : inputsOf(kind, target)) {
      SCOPED_TRACE(path.string());
      const std::vector<uint8_t> bytes = readBytes(path);
      EXPECT_EQ(fuzz(bytes.data(), bytes.size()), 0);
      ++count;
    }
  }
  return count;
}

TEST(FuzzRegressions, ConfigParserSurvivesEveryKeptInput) {
  EXPECT_GT(replay("config", fuzzConfig), 0u);
}

TEST(FuzzRegressions, TraceReaderSurvivesEveryKeptInput) {
  EXPECT_GT(replay("trace_reader", fuzzTraceReader), 0u);
}

TEST(FuzzRegressions, SafetensorsReaderSurvivesEveryKeptInput) {
  EXPECT_GT(replay("safetensors", fuzzSafetensors), 0u);
}

// The safetensors target's parameter table is the model of tiny.toml with its overrides, so the
// seed checkpoints and dumps (make_seeds.sh) load and the fuzzer reaches past the shape checks.
TEST(FuzzRegressions, FuzzModelTableMatchesTheEngineModel) {
  auto config = engine::loadConfigFile(test::sourceDir() + "/samples/configs/tiny.toml");
  ASSERT_TRUE(config.isOk()) << config.status().toString();
  for (const char* assignment : kFuzzModelOverrides) {
    ASSERT_TRUE(engine::applyOverride(*config, assignment).isOk()) << assignment;
  }
  auto trainer = engine::Trainer::create(*config, nullptr);
  ASSERT_TRUE(trainer.isOk()) << trainer.status().toString();
  const auto infos = (*trainer)->parameterInfos();
  const auto& table = fuzzModelParameters();
  ASSERT_EQ(infos.size(), table.size());
  for (size_t i = 0; i < table.size(); ++i) {
    EXPECT_EQ(infos[i].name, table[i].name);
    EXPECT_EQ(infos[i].shape, table[i].shape) << table[i].name;
  }
  EXPECT_EQ(config->model.numLayers, kFuzzModelLayers);
  EXPECT_EQ(config->moe.numExperts, kFuzzModelExperts);
}

}  // namespace
}  // namespace moewb::fuzz
