// Helpers of the tuner tests: the tiny sample config made quicker (fewer, shorter sequences, one
// thread), per-test temporary directories, and a file's bytes for byte-identity checks.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "../source_dir.h"
#include "moewb/engine/config.h"

namespace moewb::tuner::testing {

inline std::string tinyPath() {
  return moewb::test::sourceDir() + "/samples/configs/tiny.toml";
}

// samples/configs/tiny.toml with 4 sequences of 32 tokens on one thread: a step takes a few ms.
inline engine::RunConfig quickTiny() {
  auto loaded = engine::loadConfigFile(tinyPath());
  engine::RunConfig config = loaded.isOk() ? *loaded : engine::RunConfig{};
  config.model.seqLen = 32;
  config.data.batchSize = 4;
  config.run.threads = 1;
  return config;
}

inline std::string fileBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

class TempDir {
 public:
  explicit TempDir(const std::string& name) {
    m_path = std::filesystem::temp_directory_path() /
             ("moewb-tuner-" + name + "-" + std::to_string(::getpid()));
    std::filesystem::remove_all(m_path);
    std::filesystem::create_directories(m_path);
  }
  ~TempDir() { std::filesystem::remove_all(m_path); }
  std::string file(const std::string& name) const { return (m_path / name).string(); }

 private:
  std::filesystem::path m_path;
};

}  // namespace moewb::tuner::testing
