// The op registry (engine/ops/registry.h): it covers every op folder, names files that exist,
// lists the ops a model uses, and its limit checks name the key that does not fit.
#include "ops/registry.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <set>
#include <string>
#include "../../source_dir.h"

namespace moewb::engine {
namespace {

namespace fs = std::filesystem;

fs::path engineDir() { return fs::path(moewb::test::sourceDir()) / "engine"; }

TEST(OpRegistry, EveryOpFolderHasAReference) {
  std::set<std::string> folders;
  for (const auto& entry : fs::directory_iterator(engineDir() / "ops")) {
    if (entry.is_directory()) folders.insert(entry.path().filename().string());
  }
  ASSERT_FALSE(folders.empty());
  for (const std::string& op : folders) {
    EXPECT_NE(findOpImplementation(op, OpBackend::kReference), nullptr)
        << "engine/ops/" << op << " has no reference entry in ops/registry.cpp";
  }
  for (const OpImplementation& impl : opImplementations()) {
    EXPECT_TRUE(folders.count(std::string(impl.op))) << impl.op << " is not an op folder";
  }
}

TEST(OpRegistry, NamedFilesExist) {
  for (const OpImplementation& impl : opImplementations()) {
    std::string file(impl.files.substr(0, impl.files.find(' ')));
    if (file.find_first_of("{*") != std::string::npos) continue;  // a pattern, not one file
    EXPECT_TRUE(fs::exists(engineDir() / file)) << impl.op << ": engine/" << file;
  }
}

TEST(OpRegistry, OpsUsedFollowTheModel) {
  OpProblem problem{.mixerPattern = "KKKS", .kdaHeadDim = 16, .kdaChunk = 16, .lossKind = "cce"};
  std::vector<std::string> ops = opsUsedBy(problem);
  std::set<std::string> used(ops.begin(), ops.end());
  EXPECT_TRUE(used.count("kda"));
  EXPECT_TRUE(used.count("sparse_attention"));
  EXPECT_TRUE(used.count("cce"));
  EXPECT_FALSE(used.count("attention"));
  EXPECT_FALSE(used.count("cross_entropy"));
  EXPECT_FALSE(used.count("lora"));
  problem.lora = true;
  problem.images = true;
  ops = opsUsedBy(problem);
  used = {ops.begin(), ops.end()};
  EXPECT_TRUE(used.count("lora"));
  EXPECT_TRUE(used.count("patchify"));
}

TEST(OpRegistry, ReferenceRunsEveryModel) {
  OpProblem problem{.mixerPattern = "AKS", .kdaHeadDim = 512, .kdaChunk = 256, .lossKind = "chunk",
                    .lora = true, .attnRes = true, .images = true};
  EXPECT_TRUE(checkOpsSupported(OpBackend::kReference, problem).isOk());
}

TEST(OpRegistry, UnknownMixerIsNamed) {
  Status status = checkOpsSupported(OpBackend::kReference, {.mixerPattern = "KX"});
  EXPECT_EQ(status.code(), StatusCode::kUnimplemented);
  EXPECT_NE(status.message().find("'X'"), std::string::npos) << status.message();
}

TEST(OpRegistry, CudaLimitsNameTheKey) {
  OpProblem problem{.mixerPattern = "K", .kdaHeadDim = 256, .kdaChunk = 64, .lossKind = "dense"};
  Status status = checkOpsSupported(OpBackend::kCuda, problem);
  EXPECT_EQ(status.code(), StatusCode::kUnimplemented);
#ifdef MOEWB_HAVE_CUDA
  EXPECT_NE(status.message().find("kda.head_dim = 256"), std::string::npos) << status.message();
  problem.kdaHeadDim = 128;
  EXPECT_TRUE(checkOpsSupported(OpBackend::kCuda, problem).isOk());
#else
  // A build without CUDA registers no CUDA implementation at all.
  EXPECT_NE(status.message().find("no cuda implementation"), std::string::npos) << status.message();
#endif
}

}  // namespace
}  // namespace moewb::engine
