// Checkpoints: safetensors round trip and validation of untrusted files; resume reproduces the
// losses of an uninterrupted run bit-exactly; a checkpoint of another model is refused untouched.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "train/checkpoint/safetensors.h"
#include "moewb/engine/trainer.h"

namespace moewb::engine {
namespace {

std::string tempPath(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          ("moewb-ckpt-" + name + "-" + std::to_string(getpid())))
      .string();
}

RunConfig smallConfig() {
  RunConfig config;
  config.model.numLayers = 2;
  config.model.seqLen = 16;
  config.data.batchSize = 4;
  config.run.threads = 2;
  return config;
}

TEST(Safetensors, RoundTripsTensorsAndMetadata) {
  std::string path = tempPath("rt.safetensors");
  SafetensorsWriter writer;
  const float values[6] = {1.5f, -2, 3, 4, 5, 6.25f};
  const int32_t ids[3] = {7, -1, 42};
  writer.addF32("w", {2, 3}, values);
  writer.addI32("tokens", {3}, ids);
  writer.addF32("scalar", {}, values);
  writer.setMetadata("step", "12");
  ASSERT_TRUE(writer.write(path).isOk());
  auto file = readSafetensors(path);
  ASSERT_TRUE(file.isOk()) << file.status().toString();
  EXPECT_EQ(file->metadata.at("step"), "12");
  ASSERT_EQ(file->tensors.size(), 3u);
  const SafetensorsEntry* w = file->find("w");
  ASSERT_TRUE(w);
  EXPECT_EQ(w->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(w->f32()[5], 6.25f);
  EXPECT_EQ(file->find("tokens")->i32()[2], 42);
  EXPECT_EQ(file->find("scalar")->numel(), 1);
  // The 8-byte length prefix plus a JSON header padded to 8 bytes: data starts aligned.
  EXPECT_EQ(std::filesystem::file_size(path) % 4, 0u);
  std::filesystem::remove(path);
}

TEST(Safetensors, RejectsBadFilesNamingThem) {
  std::string path = tempPath("bad.safetensors");
  std::ofstream(path) << "hello";
  auto r = readSafetensors(path);
  EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(r.status().message().find(path), std::string::npos);

  SafetensorsWriter writer;
  std::vector<float> values(100, 1.0f);
  writer.addF32("big", {100}, values.data());
  ASSERT_TRUE(writer.write(path).isOk());
  std::filesystem::resize_file(path, std::filesystem::file_size(path) - 40);  // truncate
  r = readSafetensors(path);
  EXPECT_EQ(r.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(r.status().message().find("'big'"), std::string::npos) << r.status().message();

  std::string header = R"({"x":{"dtype":"F16","shape":[1],"data_offsets":[0,2]}})";
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  uint64_t n = header.size();
  out.write(reinterpret_cast<const char*>(&n), 8);
  out << header << "ab";
  out.close();
  r = readSafetensors(path);
  EXPECT_NE(r.status().message().find("F16"), std::string::npos) << r.status().message();
  EXPECT_EQ(readSafetensors(tempPath("missing")).status().code(), StatusCode::kNotFound);
  std::filesystem::remove(path);
}

std::vector<double> losses(Trainer& trainer, int steps) {
  std::vector<double> out;
  for (int i = 0; i < steps; ++i) {
    auto step = trainer.step();
    EXPECT_TRUE(step.isOk()) << step.status().toString();
    out.push_back(step.isOk() ? step->loss : -1);
  }
  return out;
}

TEST(Checkpoint, ResumeReproducesAnUninterruptedRunBitExactly) {
  std::string path = tempPath("resume.safetensors");
  auto straight = Trainer::create(smallConfig(), nullptr);
  ASSERT_TRUE(straight.isOk());
  std::vector<double> expected = losses(**straight, 10);

  auto first = Trainer::create(smallConfig(), nullptr);
  ASSERT_TRUE(first.isOk());
  losses(**first, 5);
  ASSERT_TRUE((*first)->saveCheckpoint(path).isOk());

  auto resumed = Trainer::create(smallConfig(), nullptr);
  ASSERT_TRUE(resumed.isOk());
  ASSERT_TRUE((*resumed)->loadCheckpoint(path).isOk());
  EXPECT_EQ((*resumed)->stepsDone(), 5);
  std::vector<double> tail = losses(**resumed, 5);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(tail[size_t(i)], expected[size_t(5 + i)]) << "step " << 5 + i;
  std::filesystem::remove(path);
}

TEST(Checkpoint, PolicySavesEveryNSteps) {
  std::string dir = tempPath("policy");
  std::filesystem::remove_all(dir);
  auto trainer = Trainer::create(smallConfig(), nullptr);
  ASSERT_TRUE(trainer.isOk());
  (*trainer)->setCheckpointPolicy(2, dir);
  ASSERT_TRUE((*trainer)->run(5).isOk());
  EXPECT_TRUE(std::filesystem::exists(dir + "/step-00000002.safetensors"));
  EXPECT_TRUE(std::filesystem::exists(dir + "/step-00000004.safetensors"));
  EXPECT_FALSE(std::filesystem::exists(dir + "/step-00000005.safetensors"));
  std::filesystem::remove_all(dir);
}

// A checkpoint whose step metadata is not a number is refused (it used to resume at step 0), and
// the partial file a killed run left beside the checkpoints is removed at the next save.
TEST(Checkpoint, BadStepMetadataIsRefusedAndStalePartialFilesGo) {
  const std::string dir = tempPath("bad-step");
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string good = dir + "/good.safetensors", bad = dir + "/bad.safetensors";
  auto trainer = Trainer::create(smallConfig(), nullptr);
  ASSERT_TRUE(trainer.isOk());
  ASSERT_TRUE((*trainer)->step().isOk());
  ASSERT_TRUE((*trainer)->saveCheckpoint(good).isOk());
  auto file = readSafetensors(good);
  ASSERT_TRUE(file.isOk());
  SafetensorsWriter rewritten;
  for (const auto& [key, value] : file->metadata) rewritten.setMetadata(key, value);
  rewritten.setMetadata("step", "abc");
  for (const auto& entry : file->tensors) {
    ASSERT_EQ(entry.dtype, SafetensorsDtype::kF32);
    rewritten.addF32(entry.name, entry.shape, entry.f32());
  }
  ASSERT_TRUE(rewritten.write(bad).isOk());
  auto fresh = Trainer::create(smallConfig(), nullptr);
  ASSERT_TRUE(fresh.isOk());
  Status loaded = (*fresh)->loadCheckpoint(bad);
  EXPECT_EQ(loaded.code(), StatusCode::kDataLoss);
  EXPECT_NE(loaded.message().find("'abc' is not a step number"), std::string::npos)
      << loaded.message();
  EXPECT_EQ((*fresh)->stepsDone(), 0);
  EXPECT_TRUE((*fresh)->loadCheckpoint(good).isOk());

  std::ofstream(dir + "/step-00000002.safetensors.tmp") << "half a checkpoint";
  (*fresh)->setCheckpointPolicy(2, dir);
  ASSERT_TRUE((*fresh)->run(1).isOk());  // step 2 saves step-00000002.safetensors
  EXPECT_TRUE(std::filesystem::exists(dir + "/step-00000002.safetensors"));
  EXPECT_FALSE(std::filesystem::exists(dir + "/step-00000002.safetensors.tmp"));
  std::filesystem::remove_all(dir);
}

TEST(Checkpoint, OtherModelIsRefusedAndNothingChanges) {
  std::string path = tempPath("other.safetensors");
  auto small = Trainer::create(smallConfig(), nullptr);
  ASSERT_TRUE(small.isOk());
  ASSERT_TRUE((*small)->saveCheckpoint(path).isOk());

  RunConfig wider = smallConfig();
  wider.moe.dFf = 64;
  auto other = Trainer::create(wider, nullptr);
  ASSERT_TRUE(other.isOk());
  auto before = (*other)->step();
  Status loaded = (*other)->loadCheckpoint(path);
  EXPECT_EQ(loaded.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(loaded.message().find("moe.gate"), std::string::npos) << loaded.message();
  EXPECT_EQ((*other)->stepsDone(), 1);

  std::ofstream(path) << "not a checkpoint";
  EXPECT_EQ((*other)->loadCheckpoint(path).code(), StatusCode::kDataLoss);
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace moewb::engine
