// End-to-end tests of the `moewb` binary: run (training + trace), bad input, info, export.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <map>
#include <set>

#include "cli_process.h"
#include "moewb/storage/trace_reader.h"
#include "moewb/storage/trace_writer.h"
#include "../source_dir.h"

namespace moewb::cli::testing {
namespace {

// One 200-step run of tiny.toml shared by the tests that read its trace.
class CliRunTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    s_dir = new TempDir("cli-run");
    s_trace = s_dir->file("tiny.sqlite");
    s_result = new ProcessResult(
        runMoewb("run --config " + tinyConfig() + " --steps 200 --out " + s_trace, s_dir->path()));
  }
  static void TearDownTestSuite() {
    delete s_result;
    delete s_dir;
  }
  static std::unique_ptr<storage::TraceReader> openTrace() {
    auto reader = storage::TraceReader::open(s_trace);
    EXPECT_TRUE(reader.isOk()) << reader.status().toString();
    return reader.isOk() ? std::move(reader).value() : nullptr;
  }

  static inline TempDir* s_dir = nullptr;
  static inline std::string s_trace;
  static inline ProcessResult* s_result = nullptr;
};

TEST_F(CliRunTest, TrainsAndPrintsSummary) {
  ASSERT_EQ(s_result->exitCode, 0) << s_result->err;
  EXPECT_NE(s_result->out.find("run summary"), std::string::npos) << s_result->out;
  EXPECT_NE(s_result->out.find("tokens/s"), std::string::npos);
  EXPECT_NE(s_result->out.find("layer 1"), std::string::npos);
  EXPECT_NE(s_result->err.find("step 200/200"), std::string::npos) << s_result->err;
}

TEST_F(CliRunTest, LossFallsByAtLeastHalf) {
  auto reader = openTrace();
  ASSERT_TRUE(reader);
  auto runs = reader->runs();
  ASSERT_TRUE(runs.isOk());
  ASSERT_EQ(runs->size(), 1u);
  EXPECT_EQ(runs->front().status, "completed");
  auto steps = reader->steps(runs->front().id);
  ASSERT_TRUE(steps.isOk());
  ASSERT_EQ(steps->size(), 200u);  // one step row per step
  for (size_t i = 0; i < steps->size(); ++i) EXPECT_EQ((*steps)[i].step, int64_t(i));
  EXPECT_LE(steps->back().loss, 0.5 * steps->front().loss)
      << "first " << steps->front().loss << " last " << steps->back().loss;
}

TEST_F(CliRunTest, ExpertLoadRowForEveryStepLayerExpert) {
  auto reader = openTrace();
  ASSERT_TRUE(reader);
  auto load = reader->expertLoad(0, 1'000'000);
  ASSERT_TRUE(load.isOk());
  const int kLayers = 2, kExperts = 8, kTopK = 2, kTokens = 8 * 64;
  ASSERT_EQ(load->size(), size_t(200 * kLayers * kExperts));
  std::map<std::pair<int64_t, int32_t>, int64_t> assigned;
  std::set<std::tuple<int64_t, int32_t, int32_t>> keys;
  for (const auto& row : *load) {
    assigned[{row.step, row.layer}] += row.tokens;
    keys.insert({row.step, row.layer, row.expert});
  }
  EXPECT_EQ(keys.size(), load->size());
  for (const auto& [key, total] : assigned) EXPECT_EQ(total, kTokens * kTopK);
}

TEST_F(CliRunTest, PhaseSlicesForEveryLayerOfEveryStep) {
  auto reader = openTrace();
  ASSERT_TRUE(reader);
  auto bounds = reader->timeBounds();
  ASSERT_TRUE(bounds.isOk());
  auto slices = reader->slices(*bounds);
  ASSERT_TRUE(slices.isOk());
  const std::vector<std::string> kPerLayer = {"attention.fwd", "router.fwd", "permute.fwd",
                                              "experts.fwd",   "combine.fwd", "attention.bwd",
                                              "router.bwd",    "permute.bwd", "experts.bwd",
                                              "combine.bwd"};
  std::set<std::tuple<int64_t, int32_t, std::string>> seen;
  int stepSlices = 0;
  for (const auto& s : *slices) {
    if (s.name == "step") ++stepSlices;
    if (s.layer >= 0) seen.insert({s.step, s.layer, s.name});
    EXPECT_GE(s.durNs, 0);
  }
  EXPECT_EQ(stepSlices, 200);
  for (int64_t step = 0; step < 200; ++step) {
    for (int32_t layer = 0; layer < 2; ++layer) {
      for (const auto& name : kPerLayer) {
        ASSERT_TRUE(seen.count({step, layer, name})) << name << " step " << step << " layer " << layer;
      }
    }
  }
}

TEST_F(CliRunTest, InfoSummarisesTheTrace) {
  ProcessResult info = runMoewb("info " + s_trace, s_dir->path());
  ASSERT_EQ(info.exitCode, 0) << info.err;
  for (const char* expected : {"run      tiny", "steps    200 committed", "top phases by total time",
                               "experts.bwd", "expert load imbalance per layer", "[moe]",
                               "memory   weights", "device   CPU, ",
                               "start-up ", "weight initialisation",
                               "top_k = 2"}) {
    EXPECT_NE(info.out.find(expected), std::string::npos) << expected << "\n" << info.out;
  }
}

TEST_F(CliRunTest, InfoPrintsNoDeviceMemoryForACpuRun) {
  ProcessResult info = runMoewb("info " + s_trace, s_dir->path());
  ASSERT_EQ(info.exitCode, 0) << info.err;
  EXPECT_EQ(info.out.find("device memory"), std::string::npos) << info.out;
}

// A trace with allocator events (as a CUDA run writes them): info prints the peaks per category
// and the allocation/free counts (baseline rows are not allocations).
TEST(CliInfo, PrintsDeviceMemoryPeaksAndCounts) {
  TempDir dir("cli-info-memory");
  const std::string trace = dir.file("gpu.sqlite");
  {
    auto writer = storage::TraceWriter::create(trace);
    ASSERT_TRUE(writer.isOk()) << writer.status().toString();
    storage::TraceWriter& w = **writer;
    storage::RunRow run;
    run.name = "gpu";
    run.backend = "cuda";
    w.addRun(run);
    const TrackId memory = w.addTrack({TrackId(), "device memory", storage::kTrackKindMemory, 0, 0});
    const int64_t mib = 1 << 20;
    w.addMemoryEvent({memory, 100, 0, true, 512 * mib, 0, "weights", 512 * mib});
    for (int64_t i = 0; i < 3; ++i) {
      w.addMemoryEvent({memory, 200 + i, 0, true, 64 * mib, 0x1000 + i, "activations", (i + 1) * 64 * mib});
    }
    w.addMemoryEvent({memory, 300, 0, false, 64 * mib, 0x1000, "activations", 128 * mib});
    ASSERT_TRUE(w.close().isOk());
  }
  ProcessResult info = runMoewb("info " + trace, dir.path());
  ASSERT_EQ(info.exitCode, 0) << info.err;
  EXPECT_NE(info.out.find("device memory  peak activations 192 MiB weights 512 MiB   "
                          "3 allocations, 1 frees"),
            std::string::npos)
      << info.out;
}

TEST_F(CliRunTest, ExportsChromeTraceJson) {
  std::string json = s_dir->file("trace.json");
  ProcessResult exported = runMoewb("export " + s_trace + " --chrome " + json, s_dir->path());
  ASSERT_EQ(exported.exitCode, 0) << exported.err;
  std::string text = readFile(json);
  EXPECT_NE(text.find("\"traceEvents\""), std::string::npos);
  EXPECT_NE(text.find("\"experts.fwd\""), std::string::npos);
  EXPECT_NE(text.find("\"ph\":\"X\""), std::string::npos);
}

TEST(CliBadInput, BadConfigExitsTwoNamingTheKeyAndWritesNothing) {
  TempDir dir("cli-bad");
  std::string trace = dir.file("never.sqlite");
  ProcessResult r = runMoewb("run --config " + tinyConfig() + " --set moe.top_k=9 --out " + trace,
                             dir.path());
  EXPECT_EQ(r.exitCode, 2);
  EXPECT_NE(r.err.find("moe.top_k"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("accepted: 1..8"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(trace));
  EXPECT_FALSE(std::filesystem::exists(trace + "-wal"));

  std::ofstream(dir.file("bad.toml")) << "[moe]\ntopk = 2\n";
  r = runMoewb("run --config " + dir.file("bad.toml") + " --out " + trace, dir.path());
  EXPECT_EQ(r.exitCode, 2);
  EXPECT_NE(r.err.find("unknown key 'moe.topk'"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("bad.toml:2"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(trace));

  std::ofstream(dir.file("type.toml")) << "[model]\nd_model = \"wide\"\n";
  r = runMoewb("run --config " + dir.file("type.toml") + " --out " + trace, dir.path());
  EXPECT_EQ(r.exitCode, 2);
  EXPECT_NE(r.err.find("model.d_model must be an integer"), std::string::npos) << r.err;

  // A huge value is quoted by its ends and length, not echoed whole (was a 1 MB message).
  std::ofstream(dir.file("huge.toml")) << "[model]\nd_model = \"" << std::string(1 << 20, 'A')
                                       << "\"\n";
  r = runMoewb("config --config " + dir.file("huge.toml"), dir.path());
  EXPECT_EQ(r.exitCode, 2);
  EXPECT_NE(r.err.find("model.d_model must be an integer"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("(1048578 characters)"), std::string::npos) << r.err.substr(0, 400);
  EXPECT_LT(r.err.size(), 1000u);

  r = runMoewb("run --config " + dir.file("missing.toml"), dir.path());
  EXPECT_EQ(r.exitCode, 2);
  EXPECT_NE(r.err.find("missing.toml"), std::string::npos) << r.err;
}

TEST(CliBadInput, ExistingTraceIsKeptWithoutForce) {
  TempDir dir("cli-keep");
  std::string trace = dir.file("keep.sqlite");
  std::ofstream(trace) << "precious";
  ProcessResult r = runMoewb("run --config " + tinyConfig() + " --steps 2 --out " + trace, dir.path());
  EXPECT_EQ(r.exitCode, 2);
  EXPECT_NE(r.err.find("--force"), std::string::npos);
  EXPECT_EQ(readFile(trace), "precious");
}

TEST(CliBadInput, InfoOnNonTraceNamesTheFile) {
  TempDir dir("cli-info-bad");
  std::ofstream(dir.file("notes.txt")) << "hello, not a database\n";
  ProcessResult r = runMoewb("info " + dir.file("notes.txt"), dir.path());
  EXPECT_EQ(r.exitCode, 2);
  EXPECT_NE(r.err.find("notes.txt"), std::string::npos) << r.err;
  r = runMoewb("export " + dir.file("nope.sqlite") + " --chrome " + dir.file("x.json"), dir.path());
  EXPECT_EQ(r.exitCode, 2);
  EXPECT_FALSE(std::filesystem::exists(dir.file("x.json")));
}

TEST(CliBadInput, UnknownSubcommandOrOptionExitsTwo) {
  TempDir dir("cli-args");
  ProcessResult r = runMoewb("frobnicate", dir.path());
  EXPECT_EQ(r.exitCode, 2);
  EXPECT_NE(r.err.find("unknown command 'frobnicate' (accepted: run, info"), std::string::npos)
      << r.err;
  // CLI11 alone printed the top help and exited 0 for an unknown command with --help.
  r = runMoewb("frobnicate --help", dir.path());
  EXPECT_EQ(r.exitCode, 2);
  EXPECT_NE(r.err.find("unknown command 'frobnicate'"), std::string::npos) << r.err;
  r = runMoewb("", dir.path());
  EXPECT_EQ(r.exitCode, 2);
  EXPECT_NE(r.err.find("name a command (accepted: run"), std::string::npos) << r.err;
  EXPECT_EQ(runMoewb("tune --help", dir.path()).exitCode, 0);
  EXPECT_EQ(runMoewb("run --config " + tinyConfig() + " --steps zero", dir.path()).exitCode, 2);
  EXPECT_EQ(runMoewb("--version", dir.path()).exitCode, 0);
}

TEST(CliBadInput, GpuCaptureModeOptionsAreValidatedBeforeAnythingIsWritten) {
  TempDir dir("cli-capture-modes");
  const std::string trace = dir.file("never.sqlite");
  const std::string run = "run --config " + tinyConfig() + " --steps 4 --out " + trace + " ";
  const std::pair<std::string, std::string> cases[] = {
      {"--trace-every 2", "--trace-every chooses which steps the GPU capture records; it needs "
                          "--gpu-trace"},
      {"--gpu-trace --trace-every 0", "--trace-every 0 is out of range; accepted: N >= 1"},
      {"--gpu-trace --trace-steps 5:3", "--trace-steps '5:3' is not a step range; accepted: A:B"},
      {"--gpu-trace --trace-steps 10:20", "captures nothing: the run trains steps 0..3"},
      {"--gpu-trace --flight-recorder 4", "has no trigger and would never write"},
      {"--gpu-trace --trigger-step-ms 5", "--trigger-step-ms needs --flight-recorder N"},
      {"--gpu-trace --flight-recorder 4 --trigger-load 0.5",
       "--trigger-load 0.5 is out of range; accepted: a max/mean expert load X > 1"},
      {"--gpu-trace --flight-recorder 4 --trigger-step-ms 5 --trace-steps 1:3",
       "cannot be combined with --trace-steps"},
  };
  for (const auto& [options, message] : cases) {
    ProcessResult r = runMoewb(run + options, dir.path());
    EXPECT_EQ(r.exitCode, 2) << options;
    EXPECT_NE(r.err.find(message), std::string::npos) << options << ": " << r.err;
    EXPECT_FALSE(std::filesystem::exists(trace)) << options;
  }
}

}  // namespace
}  // namespace moewb::cli::testing

namespace moewb::cli::testing {
namespace {

TEST(CliConfig, ValidatesAndPrintsEffectiveConfig) {
  TempDir dir("cli-config");
  ProcessResult r = runMoewb("config --config " + tinyConfig() + " --set moe.top_k=1", dir.path());
  ASSERT_EQ(r.exitCode, 0) << r.err;
  EXPECT_NE(r.out.find("top_k = 1"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("[optim]"), std::string::npos);
  r = runMoewb("config --set model.num_heads=7", dir.path());
  EXPECT_EQ(r.exitCode, 2);
  EXPECT_NE(r.err.find("model.num_heads"), std::string::npos) << r.err;
}

// Issue 19, item 8: `moewb config` accepted (exit 0) what `moewb run` then refused (exit 1) for
// memory. Both now give the same refusal with exit 2; --no-machine-check validates only.
TEST(CliConfig, ConfigAndRunRefuseWhatDoesNotFitThisMachineAlike) {
  TempDir dir("cli-config-fit");
  const std::string huge = " --config " + tinyConfig() +
                           " --set run.backend=cpu --set model.d_model=65536 --set moe.d_ff=1048576";
  ProcessResult config = runMoewb("config" + huge, dir.path());
  ProcessResult run = runMoewb("run" + huge + " --out " + dir.file("never.sqlite"), dir.path());
  EXPECT_EQ(config.exitCode, 2) << config.err;
  EXPECT_EQ(run.exitCode, 2) << run.err;
  const std::string refusal = "more than half of the";
  ASSERT_NE(run.err.find(refusal), std::string::npos) << run.err;
  const std::string message = run.err.substr(run.err.find(": ") + 2);  // after "moewb run: "
  EXPECT_NE(config.err.find(message.substr(0, message.size() - 1)), std::string::npos)
      << config.err << "\nvs\n" << run.err;
  EXPECT_FALSE(std::filesystem::exists(dir.file("never.sqlite")));
  EXPECT_EQ(runMoewb("config --no-machine-check" + huge, dir.path()).exitCode, 0);
}

// docs/CONFIG.md's config reference is the output of `moewb config --reference`, so it stays true.
TEST(CliConfig, DocsReferenceMatchesTheKeyTable) {
  TempDir dir("cli-reference");
  ProcessResult r = runMoewb("config --reference", dir.path());
  ASSERT_EQ(r.exitCode, 0) << r.err;
  std::string doc = readFile(moewb::test::sourceDir() + "/docs/CONFIG.md");
  std::istringstream lines(r.out);
  int rows = 0;
  for (std::string line; std::getline(lines, line); ++rows) {
    EXPECT_NE(doc.find(line), std::string::npos)
        << "docs/CONFIG.md's config reference lacks or differs from:\n" << line
        << "\n(regenerate it with: moewb config --reference)";
  }
  EXPECT_GT(rows, 20);
}

}  // namespace
}  // namespace moewb::cli::testing

namespace moewb::cli::testing {
namespace {

int64_t lastStepOf(const std::string& trace, double* lastLoss) {
  auto reader = storage::TraceReader::open(trace);
  if (!reader.isOk()) return -1;
  auto runs = (*reader)->runs();
  auto steps = (*reader)->steps(runs->front().id);
  if (!steps.isOk() || steps->empty()) return -1;
  *lastLoss = steps->back().loss;
  return steps->back().step;
}

// `base` run straight for `total` steps, and to `stop` with a checkpoint every `stop` steps then
// resumed from it to `total`: both end at step total - 1 with the same loss. Returns the
// checkpoint's path ("" after a failure).
std::string checkResumeEndsLikeStraight(TempDir& dir, const std::string& base, int stop,
                                        int total) {
  ProcessResult straight = runMoewb(base + "--steps " + std::to_string(total) + " --out " +
                                        dir.file("straight.sqlite"), dir.path());
  EXPECT_EQ(straight.exitCode, 0) << straight.err;
  ProcessResult first = runMoewb(base + "--steps " + std::to_string(stop) +
                                     " --checkpoint-every " + std::to_string(stop) +
                                     " --checkpoint-dir " + dir.file("ckpt") + " --out " +
                                     dir.file("first.sqlite"),
                                 dir.path());
  EXPECT_EQ(first.exitCode, 0) << first.err;
  char name[64];
  std::snprintf(name, sizeof name, "ckpt/step-%08d.safetensors", stop);
  const std::string ckpt = dir.file(name);
  EXPECT_TRUE(std::filesystem::exists(ckpt));
  ProcessResult resumed = runMoewb(base + "--steps " + std::to_string(total) + " --resume " +
                                       ckpt + " --out " + dir.file("resumed.sqlite"),
                                   dir.path());
  EXPECT_EQ(resumed.exitCode, 0) << resumed.err;
  double straightLoss = 0, resumedLoss = 0;
  EXPECT_EQ(lastStepOf(dir.file("straight.sqlite"), &straightLoss), total - 1);
  EXPECT_EQ(lastStepOf(dir.file("resumed.sqlite"), &resumedLoss), total - 1);
  EXPECT_EQ(straightLoss, resumedLoss);
  return ::testing::Test::HasFailure() ? "" : ckpt;
}

TEST(CliCheckpoint, ResumedRunEndsWithTheSameLossAsAnUninterruptedOne) {
  TempDir dir("cli-ckpt");
  std::string base = "run --config " + tinyConfig() + " --quiet --set model.seq_len=16 ";
  const std::string ckpt = checkResumeEndsLikeStraight(dir, base, 8, 12);
  ASSERT_FALSE(ckpt.empty());

  ProcessResult bad = runMoewb(base + "--steps 12 --set moe.d_ff=32 --resume " + ckpt + " --out " +
                                   dir.file("bad.sqlite"), dir.path());
  EXPECT_EQ(bad.exitCode, 2);
  EXPECT_NE(bad.err.find("moe.gate"), std::string::npos) << bad.err;
  EXPECT_FALSE(std::filesystem::exists(dir.file("bad.sqlite")));
}

// In-process ranks: the group's checkpoint resumes to the uninterrupted run's last loss.
TEST(CliCheckpoint, RankGroupResumesToTheSameLoss) {
  TempDir dir("cli-ckpt-ranks");
  std::string base = "run --config " + tinyConfig() +
                     " --quiet --set model.seq_len=16 --ranks 2 --set parallel.ep=2 ";
  EXPECT_FALSE(checkResumeEndsLikeStraight(dir, base, 4, 8).empty());
}

}  // namespace
}  // namespace moewb::cli::testing

namespace moewb::cli::testing {
namespace {

TEST(CliDump, WritesOneAlignmentDumpPerStepInTheRange) {
  TempDir dir("cli-dump");
  std::string base = "run --config " + tinyConfig() + " --quiet --steps 4 --set model.seq_len=16 ";
  ProcessResult r = runMoewb(base + "--dump-steps 1:3 --dump-dir " + dir.file("dumps") + " --out " +
                                 dir.file("t.sqlite"), dir.path());
  ASSERT_EQ(r.exitCode, 0) << r.err;
  EXPECT_FALSE(std::filesystem::exists(dir.file("dumps/step-00000000.safetensors")));
  EXPECT_TRUE(std::filesystem::exists(dir.file("dumps/step-00000001.safetensors")));
  EXPECT_TRUE(std::filesystem::exists(dir.file("dumps/step-00000002.safetensors")));
  EXPECT_FALSE(std::filesystem::exists(dir.file("dumps/step-00000003.safetensors")));
  for (const char* bad : {"3:1", "x", "1:", "-1:2"}) {
    ProcessResult refused = runMoewb(base + "--dump-steps " + std::string(bad) + " --out " +
                                         dir.file("never.sqlite"), dir.path());
    EXPECT_EQ(refused.exitCode, 2) << bad;
    EXPECT_NE(refused.err.find("--dump-steps"), std::string::npos) << refused.err;
  }
  EXPECT_FALSE(std::filesystem::exists(dir.file("never.sqlite")));
}

}  // namespace
}  // namespace moewb::cli::testing

namespace moewb::cli::testing {
namespace {

// Mean loss over the last `count` steps of a trace's first run (-1 when unreadable).
double tailLossOf(const std::string& trace, size_t count) {
  auto reader = storage::TraceReader::open(trace);
  if (!reader.isOk()) return -1;
  auto runs = (*reader)->runs();
  auto steps = (*reader)->steps(runs->front().id);
  if (!steps.isOk() || steps->size() < count) return -1;
  double sum = 0;
  for (size_t i = steps->size() - count; i < steps->size(); ++i) sum += (*steps)[i].loss;
  return sum / double(count);
}

// Full training -> checkpoint -> LoRA fine-tuning from its weights (--init-weights) -> merged
// export, which a LoRA-off run accepts as its starting weights. The synthetic batches differ in
// difficulty, so the LoRA run is compared with the same run at a negligible learning rate.
TEST(CliLora, InitWeightsThenLoraLowersTheLossAndExportsMergedWeights) {
  TempDir dir("cli-lora");
  std::string base = "run --config " + tinyConfig() + " --quiet --set model.seq_len=16 ";
  ProcessResult full = runMoewb(base + "--steps 20 --checkpoint-every 20 --checkpoint-dir " +
                                    dir.file("ckpt") + " --out " + dir.file("full.sqlite"),
                                dir.path());
  ASSERT_EQ(full.exitCode, 0) << full.err;
  std::string ckpt = dir.file("ckpt/step-00000020.safetensors");
  ASSERT_TRUE(std::filesystem::exists(ckpt));
  std::string lora = base +
                     "--set lora.enabled=true --set lora.rank=4 --set lora.alpha=8 --steps 40 "
                     "--init-weights " + ckpt + " ";
  ProcessResult tuned = runMoewb(lora + "--export-merged " + dir.file("merged.safetensors") +
                                     " --out " + dir.file("lora.sqlite"),
                                 dir.path());
  ASSERT_EQ(tuned.exitCode, 0) << tuned.err;
  ProcessResult frozen = runMoewb(lora + "--set optim.lr=1e-9 --out " + dir.file("frozen.sqlite"),
                                  dir.path());
  ASSERT_EQ(frozen.exitCode, 0) << frozen.err;
  double lastLoss = 0;
  EXPECT_EQ(lastStepOf(dir.file("lora.sqlite"), &lastLoss), 39);
  const double tunedTail = tailLossOf(dir.file("lora.sqlite"), 10);
  const double frozenTail = tailLossOf(dir.file("frozen.sqlite"), 10);
  EXPECT_GT(tunedTail, 0);
  EXPECT_LT(tunedTail, frozenTail - 0.03);
  ASSERT_TRUE(std::filesystem::exists(dir.file("merged.safetensors")));
  ProcessResult plain = runMoewb(base + "--steps 1 --init-weights " +
                                     dir.file("merged.safetensors") + " --out " +
                                     dir.file("plain.sqlite"),
                                 dir.path());
  EXPECT_EQ(plain.exitCode, 0) << plain.err;

  ProcessResult bad = runMoewb(base + "--steps 2 --set moe.d_ff=32 --init-weights " + ckpt +
                                   " --out " + dir.file("bad.sqlite"),
                               dir.path());
  EXPECT_EQ(bad.exitCode, 2);
  EXPECT_NE(bad.err.find("moe.gate"), std::string::npos) << bad.err;
  EXPECT_FALSE(std::filesystem::exists(dir.file("bad.sqlite")));
}

}  // namespace
}  // namespace moewb::cli::testing
