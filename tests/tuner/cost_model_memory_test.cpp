// The cost model's CUDA activation memory (tuner/src/cost_model_memory.cpp, white box): the saved
// tensors of samples/configs/h200.toml counted by hand from the engine's saved structs, and the
// model against the memory events of 23 H200 traces (tests/tuner/data/h200_heldout_memory.txt).
// Also the two step-time rules of the same round: the KDA recompute and the fused permute's
// backward.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "../source_dir.h"
#include "cost_model_rules.h"
#include "moewb/engine/config.h"
#include "moewb/tuner/cost_model.h"

namespace moewb::tuner {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;

engine::RunConfig h200() {
  auto loaded = engine::loadConfigFile(moewb::test::sourceDir() + "/samples/configs/h200.toml");
  EXPECT_TRUE(loaded.isOk()) << loaded.status().toString();
  return loaded.isOk() ? *loaded : engine::RunConfig{};
}

TEST(CostModelMemory, BlocksFollowTheEnginesAllocatorGranules) {
  EXPECT_DOUBLE_EQ(detail::allocatorBlockBytes(0), 0);
  EXPECT_DOUBLE_EQ(detail::allocatorBlockBytes(1), 512);
  EXPECT_DOUBLE_EQ(detail::allocatorBlockBytes(65536), 65536);          // [N] fp32 at N = 16384
  EXPECT_DOUBLE_EQ(detail::allocatorBlockBytes(kMiB - 1), kMiB);        // last 512-byte granule
  EXPECT_DOUBLE_EQ(detail::allocatorBlockBytes(kMiB), 2 * kMiB);        // [N, H] fp32: 2 MiB
  EXPECT_DOUBLE_EQ(detail::allocatorBlockBytes(64 * kMiB), 64 * kMiB);  // [N, D] bf16
  EXPECT_DOUBLE_EQ(detail::allocatorBlockBytes(64 * kMiB + 1), 66 * kMiB);
}

// h200.toml, N = 16384 tokens, D = 2048, 16 heads of 128, k = 8, F = 1024, latent 1024, E = 64,
// one shared expert, V = 32768, sparse top-512 with an 8 x 64 indexer, KKKS x 2, kept KDA.
TEST(CostModelMemory, H200SavedTensorsCountedByHand) {
  const engine::RunConfig c = h200();
  const detail::DeviceActivations a = detail::deviceActivations(c, 16384, 1.0);
  // MoE block: 3 [N, D] bf16 (64 MiB), 3 [N] fp32 (64 KiB), 3 [N, E] fp32 (4 MiB), 5 [N, k] (512
  // KiB), 3 latent [N, 1024] bf16 (32 MiB), 3 shared [N, 1024] bf16, 5 routed [N k, 1024] bf16.
  const double moe = 3 * 64 + 3 * 0.0625 + 3 * 4 + 5 * 0.5 + 3 * 32 + 3 * 32 + 5 * 256;
  EXPECT_DOUBLE_EQ(a.moeBytesPerLayer / kMiB, moe);
  // KDA: normed input + 15 [N, P] bf16 (64 MiB each), g fp32 (128), Aqk and M (64 each), two [N,
  // 128] bottlenecks (4), four [N, 16] fp32 (1 MiB, 2 MiB blocks); kept: 5 x 128 + 2 + 256.
  const double kda = 64 + 15 * 64 + 128 + 2 * 64 + 2 * 4 + 4 * 2 + (5 * 128 + 2 + 256);
  EXPECT_DOUBLE_EQ(a.kdaMixerBytesPerLayer / kMiB, kda);
  // Sparse: normed input, q/gate/context/gated (4 x 64), k and v of one kv head (4 each), the
  // selection [N, 512] int32 (32), probabilities [N, 16, 512] fp32 (512), sink (2), the
  // indexer's q [N, 512] fp32 (32), two keys [N, 64] fp32 (4 each), rstd (64 KiB), head weights
  // [N, 8] fp32 (512 KiB), indexer probabilities and target (32 each).
  const double sparse = 64 + 4 * 64 + 2 * 4 + 32 + 512 + 2 + 32 + 2 * 4 + 0.0625 + 0.5 + 2 * 32;
  EXPECT_DOUBLE_EQ(a.sparseMixerBytesPerLayer / kMiB, sparse);
  // Outside the layers: 3 [N, D] bf16 and 3 [N] fp32 (cce keeps no [N, V] logits).
  const double outside = 3 * 64 + 3 * 0.0625;
  EXPECT_DOUBLE_EQ(a.turnBytes / kMiB, outside + 8 * moe + 6 * kda + 2 * sparse);
  // The peak: the last layer's ('S') MoE backward, 2 x 256 + 2 x 256 + [N, D] fp32 on the stack.
  EXPECT_EQ(a.peakAt, "layer 7 MoE backward");
  EXPECT_DOUBLE_EQ((a.peakBytes - a.turnBytes) / kMiB, 2 * 256 + 2 * 256 + 128);
}

// The kept group is the engine's count (kdaKeptIntermediateBytes: fp32 rows x (3 K + 2 V) + slots
// x K x (V + 1), the figure cost_model_rules_test.cpp checks), in whole 2 MiB blocks here.
TEST(CostModelMemory, KeptKdaGroupIsTheEnginesBytes) {
  engine::RunConfig c = h200();
  const double kept = detail::deviceActivations(c, 16384, 1.0).turnBytes;
  c.kda.keepIntermediates = false;
  const double recomputed = detail::deviceActivations(c, 16384, 1.0).turnBytes;
  constexpr double kKeptFloatsPerLayer = 262144.0 * 640 + 4096.0 * 128 * 129;
  EXPECT_DOUBLE_EQ(kept - recomputed, 6 * 4 * kKeptFloatsPerLayer);
}

TEST(CostModelMemory, ChunkLossKeepsItsGradientsAndDenseAddsTheLogitGradient) {
  engine::RunConfig c = h200();
  const detail::DeviceActivations cce = detail::deviceActivations(c, 16384, 1.0);
  c.loss.kind = "chunk";  // dh [N, D] bf16 + dW [V, D] fp32 kept from the forward
  EXPECT_DOUBLE_EQ((detail::deviceActivations(c, 16384, 1.0).turnBytes - cce.turnBytes) / kMiB,
                   64 + 256);
  c.loss.kind = "dense";  // cce's turn + fp32 [N, V] logits and two [N] fp32; the backward
                          // adds [N, V] bf16 + dh [N, D]
  detail::DeviceActivations dense = detail::deviceActivations(c, 16384, 1.0);
  EXPECT_DOUBLE_EQ((dense.turnBytes - cce.turnBytes) / kMiB, 2048 + 2 * 0.0625);
  EXPECT_EQ(dense.peakAt, "layer 7 MoE backward");  // 1024 + 64 MiB < the MoE's 1152
  c.model.vocabSize = 65536;                        // 2048 + 64 MiB: now the loss is the peak
  dense = detail::deviceActivations(c, 16384, 1.0);
  EXPECT_EQ(dense.peakAt, "loss backward");
  EXPECT_DOUBLE_EQ((dense.peakBytes - dense.turnBytes) / kMiB, 2048 + 64);
}

struct TraceLine {
  std::string name, overrides;
  double fixedMiB = 0, turnMiB = 0, actPeakMiB = 0, peakMiB = 0;
};

std::vector<TraceLine> readTraceTable() {
  std::ifstream in(moewb::test::sourceDir() + "/tests/tuner/data/h200_heldout_memory.txt");
  std::vector<TraceLine> out;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::vector<std::string> f;
    std::stringstream ss(line);
    for (std::string part; std::getline(ss, part, '|');) {
      const auto b = part.find_first_not_of(' '), e = part.find_last_not_of(' ');
      f.push_back(b == std::string::npos ? "" : part.substr(b, e - b + 1));
    }
    if (f.size() != 6) continue;
    out.push_back({f[0], f[1], std::stod(f[2]), std::stod(f[3]), std::stod(f[4]), std::stod(f[5])});
  }
  return out;
}

// Every held-out change: the saved tensors at the turn within 0.5% of the trace's blocks, except
// where the allocator handed out a larger cached block (up to twice a request): h8 (the freed
// KDA forward workspace's 128 MiB blocks serve 64 MiB requests) and h18 (the released expert
// outputs' 256 MiB blocks serve 128 MiB ones), within 4%. The peak predicted from the base trace
// (its activations times the model's ratio, plus the candidate's measured parameter state)
// within 3% of the candidate's measured peak.
TEST(CostModelMemory, HeldOutTracesTurnAndPeak) {
  const std::vector<TraceLine> lines = readTraceTable();
  ASSERT_GE(lines.size(), 23u);  // base, h1..h19, h21..h23
  ASSERT_EQ(lines[0].name, "base");
  const double baseModel = detail::deviceActivations(h200(), 16384, 1.0).peakBytes / kMiB;
  for (const TraceLine& t : lines) {
    engine::RunConfig c = h200();
    std::stringstream ss(t.overrides);
    for (std::string kv; ss >> kv;) {
      if (kv == "-") continue;
      ASSERT_TRUE(engine::applyOverride(c, kv).isOk()) << kv;
    }
    const double n = double(c.tokensPerStep());
    const detail::DeviceActivations a = detail::deviceActivations(c, n, 1.0);
    const bool reused = t.name == "h8" || t.name == "h18";
    EXPECT_NEAR(a.turnBytes / kMiB / t.turnMiB, 1.0, reused ? 0.04 : 0.005) << t.name;
    const double predicted = lines[0].actPeakMiB * (a.peakBytes / kMiB / baseModel) + t.fixedMiB;
    EXPECT_NEAR(predicted / (t.fixedMiB + t.actPeakMiB), 1.0, 0.03) << t.name;
  }
}

// A calibration of h200.toml with the base trace's KDA phase times (ms per step).
Calibration kdaCalibration(bool keep) {
  Calibration cal;
  cal.config = h200();
  cal.config.kda.keepIntermediates = keep;
  cal.backend = "cuda";
  cal.stepMs = 100;
  cal.phaseMs = {{"kda.fwd", 26.78},
                 {"kda.bwd", 58.07},
                 {"sparse_attention.fwd", 8.32},
                 {"permute.fwd", 2.0},
                 {"permute.bwd", 2.98}};
  cal.weightsBytes = cal.gradsBytes = cal.optimizerBytes = cal.activationsBytes = 1 << 30;
  cal.peakBytes = 4LL << 30;
  return cal;
}

TEST(CostModelRecompute, KdaCoreForwardFromThePhasePair) {
  // kept: bwd = 2 x + 3 c, fwd = x + c  =>  c = bwd - 2 fwd = 4.51 ms.
  EXPECT_NEAR(detail::kdaCoreForwardMs(kdaCalibration(true)), 58.07 - 2 * 26.78, 1e-9);
  // recomputed: bwd = 2 x + 4 c  =>  c = (bwd - 2 fwd) / 2.
  EXPECT_NEAR(detail::kdaCoreForwardMs(kdaCalibration(false)), (58.07 - 2 * 26.78) / 2, 1e-9);
  Calibration odd = kdaCalibration(true);
  odd.phaseMs["kda.bwd"] = 40;  // less than twice the forward: no core time to find
  EXPECT_EQ(detail::kdaCoreForwardMs(odd), 0);
  odd.phaseMs.erase("kda.bwd");
  EXPECT_EQ(detail::kdaCoreForwardMs(odd), 0);
}

TEST(CostModelRecompute, KeepOffAddsTheCoreForwardToTheKdaBackward) {
  const CostModel model(kdaCalibration(true), Interconnect{});
  engine::RunConfig c = model.calibration().config;
  auto same = model.predict(c);
  ASSERT_TRUE(same.isOk()) << same.status().toString();
  EXPECT_NEAR(same->phaseMs.at("kda.bwd"), 58.07, 1e-9);
  c.kda.keepIntermediates = false;
  auto off = model.predict(c);
  ASSERT_TRUE(off.isOk()) << off.status().toString();
  EXPECT_NEAR(off->phaseMs.at("kda.bwd") - 58.07, 58.07 - 2 * 26.78, 1e-9);
  EXPECT_NEAR(off->phaseMs.at("kda.fwd"), 26.78, 1e-9);
  // And back: a calibration without kept intermediates predicts keeping them as that much less.
  const CostModel back(kdaCalibration(false), Interconnect{});
  c.kda.keepIntermediates = true;
  auto on = back.predict(c);
  ASSERT_TRUE(on.isOk()) << on.status().toString();
  EXPECT_NEAR(58.07 - on->phaseMs.at("kda.bwd"), (58.07 - 2 * 26.78) / 2, 1e-9);
}

TEST(CostModelRecompute, FusedPermuteKeepsTheBackwardScatter) {
  const CostModel model(kdaCalibration(true), Interconnect{});
  engine::RunConfig c = model.calibration().config;
  c.fusion.permuteIntoExperts = true;
  auto p = model.predict(c);
  ASSERT_TRUE(p.isOk()) << p.status().toString();
  EXPECT_NEAR(p->phaseMs.at("permute.bwd"), 2.98, 1e-9);        // dXPerm still scattered
  EXPECT_NEAR(p->phaseMs.at("permute.fwd"), 2.0 / 1024, 1e-9);  // the index, not 1024 wide
}

TEST(CostModelLoss, PassesAndTrafficCountedByHand) {
  EXPECT_EQ(detail::lossPasses("dense").forward, 1);
  EXPECT_EQ(detail::lossPasses("dense").backward, 2);
  EXPECT_EQ(detail::lossPasses("cce").backward, 3);   // the logits once more
  EXPECT_EQ(detail::lossPasses("chunk").forward, 3);  // logits, dh and dW, chunk by chunk
  EXPECT_EQ(detail::lossPasses("chunk").backward, 0);
  engine::RunConfig c = h200();                            // N = 16384, V = 32768, D = 2048
  EXPECT_EQ(detail::lossTrafficBytes(c, 16384, true), 0);  // cce
  c.loss.kind = "dense";
  EXPECT_DOUBLE_EQ(detail::lossTrafficBytes(c, 16384, true), 16384.0 * 32768 * 8);
  EXPECT_DOUBLE_EQ(detail::lossTrafficBytes(c, 16384, false), 16384.0 * 32768 * 10);
  c.loss.kind = "chunk";  // 64 chunks of 256 tokens, each reading and writing the fp32 dW
  EXPECT_DOUBLE_EQ(detail::lossTrafficBytes(c, 16384, true),
                   16384.0 * 32768 * 18 + 64.0 * 32768 * 2048 * 8);
  EXPECT_EQ(detail::lossTrafficBytes(c, 16384, false), 0);
}

// The base trace's loss and optimizer phases (cce, ms per step) and its weights counter.
Calibration lossCalibration() {
  Calibration cal = kdaCalibration(true);
  cal.phaseMs["loss.fwd"] = 4.16;
  cal.phaseMs["loss.bwd"] = 12.56;
  cal.phaseMs["optimizer"] = 16.55;
  cal.weightsBytes = 11823810560;  // 1.97e9 parameters x (fp32 + bf16)
  return cal;
}

TEST(CostModelLoss, ChunkFromACceTrace) {
  const Calibration cal = lossCalibration();
  const double rate = 34 * (11823810560.0 / 6) / 16.55;  // bytes per ms, ~4.05 TB/s
  EXPECT_NEAR(detail::hbmBytesPerMs(cal), rate, 1e-6);
  const CostModel model(cal, Interconnect{});
  engine::RunConfig c = cal.config;
  auto same = model.predict(c);
  ASSERT_TRUE(same.isOk()) << same.status().toString();
  EXPECT_NEAR(same->phaseMs.at("loss.fwd"), 4.16, 1e-9);
  EXPECT_NEAR(same->phaseMs.at("loss.bwd"), 12.56, 1e-9);
  c.loss.kind = "chunk";
  auto chunk = model.predict(c);
  ASSERT_TRUE(chunk.isOk()) << chunk.status().toString();
  const double traffic = 16384.0 * 32768 * 18 + 64.0 * 32768 * 2048 * 8;
  EXPECT_NEAR(chunk->phaseMs.at("loss.fwd"), 3 * 4.16 + traffic / rate, 1e-9);
  EXPECT_NEAR(chunk->phaseMs.at("loss.bwd"), 0, 1e-9);
  c.loss.kind = "dense";  // 1 + 2 products and the materialised logits
  auto dense = model.predict(c);
  ASSERT_TRUE(dense.isOk()) << dense.status().toString();
  EXPECT_NEAR(dense->phaseMs.at("loss.bwd"), 2 * 12.56 / 3 + 16384.0 * 32768 * 10 / rate, 1e-9);
  Calibration cpu = cal;  // the CPU backend: products only, no HBM rate
  cpu.backend = "cpu";
  EXPECT_EQ(detail::hbmBytesPerMs(cpu), 0);
}

}  // namespace
}  // namespace moewb::tuner
