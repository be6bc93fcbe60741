// `moewb info` on traces with and without swap rows (written with the TraceWriter directly): the
// swap section's plan line, per-range table (the first swap step and the steps after it), the
// offload waits (part of exposed, printed on their own) and the layers with the most exposed copy
// time; no section without swap rows.
#include <gtest/gtest.h>

#include <string>

#include "cli_process.h"
#include "moewb/storage/trace_writer.h"

namespace moewb::cli::testing {
namespace {

constexpr int64_t kGiB = int64_t(1) << 30;

// A run of 4 steps on rank 0; with `swap`, a plan at step 0, per step a watermark row (2 late
// reloads of 4 in step 0, 1 in step 3), and one offload and reload per layer 0..6 whose stall
// grows with the layer; compute waited 250 us for layer 5's offload in step 2 and for layer 6's
// in step 3.
void writeTrace(const std::string& path, bool swap) {
  auto created = storage::TraceWriter::create(path);
  ASSERT_TRUE(created.isOk()) << created.status().toString();
  storage::TraceWriter& w = **created;
  storage::RunRow run;
  run.name = "swapinfo";
  run.backend = "cpu";
  const RunId id = w.addRun(run);
  const TrackId thread = w.addTrack({TrackId(), "trainer thread", "thread", 0, 1});
  const int64_t stepNs = 100'000'000;
  if (swap) {
    storage::SwapPlanRow plan;
    plan.mode = "auto";
    plan.tensors = {{0, "expert_fc1", kGiB, true, "picked"},
                    {1, "moe_act", kGiB, false, "not needed: target reached"},
                    {2, "moe_act", kGiB, false, "recompute: cheaper than its copy", true},
                    {2, "expert_fc2", kGiB / 2, false, "recompute: cheaper than its copy", true},
                    {3, "moe_act", kGiB, false, "recompute: cheaper than its copy", true}};
    plan.recomputeOps = "moe_act,expert_fc2";
    plan.layerRecomputeMs = {1.5, 1.5, 1.5, 1.5};
    plan.recomputeMsSource = "measured";
    plan.summary = "swap 1 of 5 tensors, peak 12.0 GiB -> 10.0 GiB";
    w.addSwapPlan(id, plan);
  }
  for (int64_t s = 0; s < 4; ++s) {
    const int64_t start = s * stepNs;
    if (swap) {
      for (int32_t layer = 0; layer < 7; ++layer) {
        const int64_t at = start + layer * 1'000'000;
        const bool waited = (s == 2 && layer == 5) || (s == 3 && layer == 6);
        w.addSwapEvent(id, {0, s, 0, layer, "expert_fc1", 1 << 20, true, at, at + 500'000,
                            waited ? at + 250'000 : 0, waited ? 250'000 : 0, true});
        w.addSwapEvent(id, {0, s, 0, layer, "expert_fc1", 1 << 20, false, at + 50'000'000,
                            at + 50'500'000, at + 50'400'000, (layer + 1) * 1000, true});
      }
      const bool first = s == 0;
      w.addSwapStep(id, {s, 0, 10 * kGiB, 12 * kGiB, 2 * kGiB, 4 * kGiB, 4, 4,
                         first ? 2 : (s == 3 ? 1 : 0), first ? 2'000'000'000 : 1'000'000'000,
                         first ? 10.0 : 8.0, first ? 2.0 : 0.4, true});
    }
    w.addSlice({SliceId(), thread, start, stepNs - 1, "step", "step", s, -1, 0, 0});
    w.addStep({id, 0, s, start, start + stepNs - 1, 2.0, 0.0, 64, 640.0, 0, 1.0, 1e-3});
  }
  w.finishRun(id, "completed", "", 4 * stepNs);
  ASSERT_TRUE(w.close().isOk());
}

TEST(CliInfoSwap, PrintsTheSwapSection) {
  TempDir dir("cli-info-swap");
  const std::string trace = dir.file("swap.sqlite");
  writeTrace(trace, true);
  ProcessResult info = runMoewb("info --no-config " + trace, dir.path());
  ASSERT_EQ(info.exitCode, 0) << info.err;
  const std::string& out = info.out;
  EXPECT_NE(out.find("\nswap     mode auto, 1 plan; last from step 0 (rank 0): 1 of 5 tensors "
                     "swapped, 3 recomputed\n"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("  plan     swap 1 of 5 tensors, peak 12.0 GiB -> 10.0 GiB\n"),
            std::string::npos)
      << out;
  // Layers 2 and 3 re-run their gate + up once each: 2 x 1.5 ms, 2.5 GiB dropped.
  EXPECT_NE(out.find("  recompute moe_act,expert_fc2: 2 layers, 2.50 GiB dropped after the "
                     "forward, 3.00 ms a step (measured)\n"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("simulated on the CPU backend"), std::string::npos) << out;
  // The first step: 2 GB, 10 ms copy, 2 ms exposed (20%), 2 of 4 reloads late.
  const size_t first = out.find("  0            first");
  ASSERT_NE(first, std::string::npos) << out;
  const std::string firstRow = out.substr(first, out.find('\n', first) - first);
  EXPECT_NE(firstRow.find("    4.0     4.0    2.000     10.00      2.00 ( 20.0%)      2 ( 50.0%)"),
            std::string::npos)
      << firstRow;
  EXPECT_NE(firstRow.find("10.0 GiB  12.0 GiB   2.00 GiB / 4.00 GiB"), std::string::npos)
      << firstRow;
  // Steps 1..3: 1 GB/step, 8 ms copy, 0.4 ms exposed (5%), 1 of 12 reloads late (8.3%).
  const size_t after = out.find("  1..3         after");
  ASSERT_NE(after, std::string::npos) << out;
  const std::string afterRow = out.substr(after, out.find('\n', after) - after);
  EXPECT_NE(afterRow.find("    1.000      8.00      0.40 (  5.0%)      1 (  8.3%)"),
            std::string::npos)
      << afterRow;
  EXPECT_NE(out.find("exposed = reload stalls + offload waits"), std::string::npos) << out;
  // The offload waits on their own line: 2 of 250 us.
  EXPECT_NE(out.find("\n  offload waits 2, 0.50 ms "), std::string::npos) << out;
  // The 5 layers with the most exposed time, most first: 6 (4 reload stalls of 7 us and an
  // offload wait of 250 us: 0.28 ms, 1 wait), 5, 4, 3, 2.
  const size_t layers = out.find("layers with the most exposed copy time");
  ASSERT_NE(layers, std::string::npos) << out;
  const size_t six = out.find("\n  6      0 ", layers);
  ASSERT_NE(six, std::string::npos) << out;
  const std::string sixRow = out.substr(six + 1, out.find('\n', six + 1) - six - 1);
  EXPECT_NE(sixRow.find("        0.28      4      1     0.250 ms"), std::string::npos) << sixRow;
  size_t at = layers;
  for (int layer : {6, 5, 4, 3, 2}) {
    const size_t row = out.find("\n  " + std::to_string(layer) + "      0 ", at);
    ASSERT_NE(row, std::string::npos) << "layer " << layer << "\n" << out;
    at = row + 1;
  }
  EXPECT_EQ(out.find("\n  1      0 ", layers), std::string::npos) << out;
}

TEST(CliInfoSwap, SilentWithoutSwapRows) {
  TempDir dir("cli-info-noswap");
  const std::string trace = dir.file("plain.sqlite");
  writeTrace(trace, false);
  ProcessResult info = runMoewb("info --no-config " + trace, dir.path());
  ASSERT_EQ(info.exitCode, 0) << info.err;
  EXPECT_EQ(info.out.find("\nswap "), std::string::npos) << info.out;
}

}  // namespace
}  // namespace moewb::cli::testing
