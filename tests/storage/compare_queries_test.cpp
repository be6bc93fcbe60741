// compare_queries.h: step ranges, per-step statistics, the significance rule, and sampleTrace /
// findPatchSplit / compareSamples on a small hand-written trace whose every number is known
// (a golden test: 4 steps, phases on rank 0 and a rank-1 track that must be ignored, GPU kernels
// in two steps only, expert loads of two layers, a config change at step 2).
#include "moewb/storage/compare_queries.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <optional>

#include "test_util.h"

namespace moewb::storage {
namespace {

constexpr int64_t kMs = 1'000'000;

TEST(CompareRange, ParsesClosedOpenAndSingleRangesAndRefusesTheRest) {
  EXPECT_EQ(parseCompareRange("10:50", "--a-steps")->first, 10);
  EXPECT_EQ(parseCompareRange("10:50", "--a-steps")->end, 50);
  EXPECT_EQ(parseCompareRange("7:", "--a-steps")->end, kOpenEnd);
  EXPECT_EQ(parseCompareRange(":9", "--a-steps")->first, 0);
  EXPECT_EQ(parseCompareRange(":9", "--a-steps")->end, 9);
  EXPECT_EQ(parseCompareRange("4", "--a-steps")->end, 5);
  for (const char* bad : {"", ":", "5:2", "5:5", "-1:3", "a:b", ":0", "1:2:3", " 1:2", "x:"}) {
    auto r = parseCompareRange(bad, "--b-steps");
    ASSERT_FALSE(r.isOk()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("--b-steps"), std::string::npos) << r.status().message();
  }
  EXPECT_EQ(formatStepRange({3, 9}), "3:9");
  EXPECT_EQ(formatStepRange({0, 9}), ":9");
  EXPECT_EQ(formatStepRange({3, kOpenEnd}), "3:");
  EXPECT_EQ(formatStepRange(kAllSteps), "0:");
}

TEST(CompareStats, SummarizeGivesMeanMedianSampleStddevAndExtremes) {
  const MetricStats s = summarize({4, 1, 3, 2});
  EXPECT_EQ(s.n, 4);
  EXPECT_DOUBLE_EQ(s.mean, 2.5);
  EXPECT_DOUBLE_EQ(s.p50, 2.5);
  EXPECT_NEAR(s.stddev, std::sqrt(5.0 / 3.0), 1e-12);
  EXPECT_EQ(s.min, 1);
  EXPECT_EQ(s.max, 4);
  EXPECT_EQ(summarize({7}).stddev, 0);
  EXPECT_EQ(summarize({7, 1, 3}).p50, 3);
  EXPECT_EQ(summarize({}), MetricStats{});
}

MetricStats stats(int64_t n, double mean, double stddev) {
  MetricStats s;
  s.n = n;
  s.mean = mean;
  s.stddev = stddev;
  return s;
}

TEST(CompareStats, SignificantOnlyBeyondTwoStandardErrorsAndOnePercent) {
  // noise = 2 sqrt(100/10 + 100/10) = 8.94
  MetricDelta d = compareMetric(stats(10, 100, 10), stats(10, 110, 10));
  EXPECT_DOUBLE_EQ(d.delta, 10);
  EXPECT_DOUBLE_EQ(d.ratio, 1.1);
  EXPECT_NEAR(d.noise, 2 * std::sqrt(20.0), 1e-12);
  EXPECT_TRUE(d.significant);
  EXPECT_FALSE(compareMetric(stats(10, 100, 10), stats(10, 108, 10)).significant);
  // No noise at all, but under 1% of the larger mean (10.1 of 1010): not flagged; over it is.
  EXPECT_FALSE(compareMetric(stats(10, 1000, 0), stats(10, 1010, 0)).significant);
  EXPECT_TRUE(compareMetric(stats(10, 1000, 0), stats(10, 1011, 0)).significant);
  // One step on a side has no spread to judge by.
  EXPECT_FALSE(compareMetric(stats(1, 100, 0), stats(10, 200, 1)).significant);
  EXPECT_EQ(compareMetric(stats(5, 0, 0), stats(5, 3, 1)).ratio, 0);
}

// The golden trace: steps 0..3 on rank 0 (step s lasts 10 + s ms, loss 4 - s/2); per step two
// "experts.fwd" slices (layers 0 and 1) of (s + 1) ms each; a kernel "gemm" of 100 us in steps 1
// and 3 only; an "experts.fwd" slice of rank 1 that must not count; a phase "swap.wait" in step 3
// only; expert loads per (step, layer) that give known imbalances; moe.top_k 2 -> 1 at step 2.
class CompareGolden : public ::testing::Test {
 protected:
  void SetUp() override {
    m_path = m_dir.path("golden.sqlite");
    auto created = TraceWriter::create(m_path);
    ASSERT_TRUE(created.isOk()) << created.status().toString();
    auto writer = std::move(created).value();
    RunRow run;
    run.name = "golden";
    const RunId id = writer->addRun(run);
    const TrackId main = writer->addTrack({TrackId(), "trainer thread", "thread", 0, 1});
    const TrackId other = writer->addTrack({TrackId(), "trainer thread", "thread", 1, 2});
    const TrackId stream = writer->addTrack({TrackId(), "GPU 0 stream 7", "stream", 0, 7});
    writer->addConfigChange(id, {2, 0, "moe.top_k", "2", "1", "cli"});
    for (int64_t s = 0; s < 4; ++s) {
      const int64_t t0 = s * 100 * kMs;
      writer->addSlice(testing::makeSlice(main, "step", t0, (10 + s) * kMs, s, -1, "step"));
      for (int32_t layer = 0; layer < 2; ++layer) {
        writer->addSlice(testing::makeSlice(main, "experts.fwd", t0 + (1 + 2 * layer) * kMs,
                                            (s + 1) * kMs, s, layer));
      }
      writer->addSlice(testing::makeSlice(other, "experts.fwd", t0, 50 * kMs, s, 0));
      if (s % 2 == 1) {
        writer->addSlice(testing::makeSlice(stream, "gemm", t0 + kMs, kMs / 10, s, 0, "kernel"));
      }
      if (s == 3) writer->addSlice(testing::makeSlice(main, "swap.wait", t0 + 8 * kMs, kMs, s));
      // Layer 0: tokens {3, 1} (max/mean 1.5); layer 1: {2, 2} (1.0); rank 1 adds 1 to expert 1
      // of layer 0 from step 2 on ({3, 2}: 1.2).
      for (int32_t e = 0; e < 2; ++e) {
        writer->addExpertLoad({s, 0, e, 0, e == 0 ? 3 : 1, 0, 0});
        writer->addExpertLoad({s, 1, e, 0, 2, 0, 0});
      }
      if (s >= 2) writer->addExpertLoad({s, 0, 1, 1, 1, 0, 0});
      StepRow step;
      step.run = id;
      step.step = s;
      step.startNs = t0;
      step.endNs = t0 + (10 + s) * kMs;
      step.loss = 4.0 - 0.5 * double(s);
      step.tokensPerSecond = 1000.0 * double(s + 1);
      writer->addStep(step);
    }
    ASSERT_TRUE(writer->close().isOk());
    auto reader = TraceReader::open(m_path);
    ASSERT_TRUE(reader.isOk()) << reader.status().toString();
    m_reader = std::move(reader).value();
  }

  static const NameStats* find(const TraceSample& s, const std::string& name) {
    for (const NameStats& n : s.names) {
      if (n.name == name) return &n;
    }
    return nullptr;
  }

  testing::TempDir m_dir;
  std::string m_path;
  std::unique_ptr<TraceReader> m_reader;
};

TEST_F(CompareGolden, SamplesTheStepsAfterWarmUpOnTheLowestRank) {
  auto sample = sampleTrace(*m_reader);
  ASSERT_TRUE(sample.isOk()) << sample.status().toString();
  EXPECT_EQ(sample->runName, "golden");
  EXPECT_EQ(sample->firstStep, 1);
  EXPECT_EQ(sample->lastStep, 3);
  EXPECT_EQ(sample->phaseSteps, 3);
  EXPECT_EQ(sample->gpuSteps, 2);
  EXPECT_DOUBLE_EQ(sample->stepNs.mean, 12.0 * kMs);  // 11, 12, 13 ms
  EXPECT_DOUBLE_EQ(sample->stepNs.stddev, 1.0 * kMs);
  EXPECT_DOUBLE_EQ(sample->loss.mean, 3.0);     // 3.5, 3, 2.5
  EXPECT_DOUBLE_EQ(sample->lossEnd.mean, 2.5);  // the last step (a tenth of 3, at least 1)
  EXPECT_DOUBLE_EQ(sample->tokensPerSecond.mean, 3000);
  const NameStats* experts = find(*sample, "experts.fwd");
  ASSERT_NE(experts, nullptr);
  EXPECT_DOUBLE_EQ(experts->perStepNs.mean, 6.0 * kMs);  // both layers: 4, 6, 8 ms; rank 1 not
  EXPECT_DOUBLE_EQ(experts->slicesPerStep, 2.0);
  const NameStats* wait = find(*sample, "swap.wait");
  ASSERT_NE(wait, nullptr);
  EXPECT_EQ(wait->perStepNs.n, 3);  // 0, 0, 1 ms: the steps without it count as 0
  EXPECT_DOUBLE_EQ(wait->perStepNs.mean, kMs / 3.0);
  const NameStats* gemm = find(*sample, "gemm");
  ASSERT_NE(gemm, nullptr);
  EXPECT_EQ(gemm->kind, CompareKind::kKernel);
  EXPECT_EQ(gemm->perStepNs.n, 2);  // only the steps with GPU work
  EXPECT_DOUBLE_EQ(gemm->perStepNs.mean, kMs / 10.0);
  ASSERT_EQ(sample->layers.size(), 2u);
  EXPECT_DOUBLE_EQ(sample->layers[0].maxOverMean.mean, (1.5 + 1.2 + 1.2) / 3);
  EXPECT_DOUBLE_EQ(sample->layers[1].maxOverMean.mean, 1.0);
  EXPECT_DOUBLE_EQ(sample->imbalance.mean, ((1.5 + 1.0) / 2 + 2 * (1.2 + 1.0) / 2) / 3);
  ASSERT_EQ(sample->series.size(), 3u);
  EXPECT_EQ(sample->series[2].stepNs, 13 * kMs);
}

// A reader that is not the SQLite one (as a test double or another store would be): sampleTrace
// then goes through forEachSlice instead of its own scan of the file, with the same result.
class ForwardingReader : public TraceReader {
 public:
  explicit ForwardingReader(TraceReader& inner) : m_inner(inner) {}
  const std::string& path() const override { return m_inner.path(); }
  Result<std::map<std::string, std::string>> meta() override { return m_inner.meta(); }
  Result<std::vector<RunRow>> runs() override { return m_inner.runs(); }
  Result<std::vector<TrackRow>> tracks() override { return m_inner.tracks(); }
  Result<std::vector<StepRow>> steps(RunId run, int64_t from) override {
    return m_inner.steps(run, from);
  }
  Result<std::vector<SliceRow>> slices(TimeWindow w, std::optional<TrackId> t) override {
    return m_inner.slices(w, t);
  }
  Result<TimeWindow> timeBounds() override { return m_inner.timeBounds(); }
  Result<std::vector<ExpertLoadRow>> expertLoad(int64_t from, int64_t to) override {
    return m_inner.expertLoad(from, to);
  }
  Result<std::vector<CounterRow>> counters(TimeWindow w) override { return m_inner.counters(w); }
  Result<std::vector<ConfigChangeRow>> configChanges() override { return m_inner.configChanges(); }
  Result<std::vector<StatRow>> stats() override { return m_inner.stats(); }
  Result<std::vector<PhaseTotal>> phaseTotals(const std::string& c) override {
    return m_inner.phaseTotals(c);
  }
  Result<std::vector<LayerImbalance>> layerImbalance() override { return m_inner.layerImbalance(); }

 private:
  TraceReader& m_inner;
};

TEST_F(CompareGolden, AnyReaderGivesTheSameSampleAsTheSqliteScan) {
  ForwardingReader other(*m_reader);
  for (const SampleOptions& options :
       {SampleOptions{}, SampleOptions{.range = {2, 3}, .warmupSteps = 0}}) {
    auto direct = sampleTrace(*m_reader, options);
    auto streamed = sampleTrace(other, options);
    ASSERT_TRUE(direct.isOk() && streamed.isOk());
    ASSERT_EQ(direct->names.size(), streamed->names.size());
    for (size_t i = 0; i < direct->names.size(); ++i) {
      EXPECT_EQ(direct->names[i].name, streamed->names[i].name);
      EXPECT_EQ(direct->names[i].perStepNs, streamed->names[i].perStepNs) << direct->names[i].name;
      EXPECT_EQ(direct->names[i].slicesPerStep, streamed->names[i].slicesPerStep);
    }
    EXPECT_EQ(direct->gpuSteps, streamed->gpuSteps);
  }
  // One step (a quarter of the file): the scan reads its time window only.
  auto one = sampleTrace(*m_reader, {.range = {2, 3}, .warmupSteps = 0});
  ASSERT_TRUE(one.isOk());
  EXPECT_DOUBLE_EQ(find(*one, "experts.fwd")->perStepNs.mean, 6.0 * kMs);
  EXPECT_EQ(find(*one, "gemm"), nullptr);  // step 2 ran no kernel
}

TEST_F(CompareGolden, SplitsAtThePatchAndComparesOneSidedNamesAgainstZeros) {
  auto split = findPatchSplit(*m_reader);
  ASSERT_TRUE(split.isOk()) << split.status().toString();
  EXPECT_EQ(split->step, 2);
  EXPECT_EQ(split->description, "moe.top_k 2 -> 1 (cli)");
  EXPECT_FALSE(split->nextStep.has_value());
  EXPECT_EQ(findPatchSplit(*m_reader, 3).status().code(), StatusCode::kInvalidArgument);

  auto a = sampleTrace(*m_reader, {.range = {0, 2}, .warmupSteps = 0});
  auto b = sampleTrace(*m_reader, {.range = {2, kOpenEnd}, .warmupSteps = 0});
  ASSERT_TRUE(a.isOk() && b.isOk());
  EXPECT_EQ(a->lastStep, 1);
  EXPECT_EQ(b->firstStep, 2);
  const SampleComparison cmp = compareSamples(*a, *b);
  // experts.fwd: A 2, 4 ms; B 6, 8 ms -> +4 ms, the largest |delta|, first.
  ASSERT_FALSE(cmp.names.empty());
  EXPECT_EQ(cmp.names.front().name, "experts.fwd");
  EXPECT_DOUBLE_EQ(cmp.names.front().perStepNs.delta, 4.0 * kMs);
  for (const NameDelta& n : cmp.names) {
    if (n.name != "swap.wait") continue;
    EXPECT_FALSE(n.inA);
    EXPECT_TRUE(n.inB);
    EXPECT_EQ(n.perStepNs.a.n, 2);  // A's two steps, at zero
    EXPECT_DOUBLE_EQ(n.perStepNs.delta, kMs / 2.0);
  }
  ASSERT_EQ(cmp.layers.size(), 2u);
  EXPECT_DOUBLE_EQ(cmp.layers[0].maxOverMean.delta, 1.2 - 1.5);

  auto empty = sampleTrace(*m_reader, {.range = {10, 20}});
  ASSERT_FALSE(empty.isOk());
  EXPECT_NE(empty.status().message().find("no committed step in steps 10:20 (it has steps 0..3"),
            std::string::npos)
      << empty.status().message();
  EXPECT_NE(empty.status().message().find(m_path), std::string::npos);
  auto allWarmup = sampleTrace(*m_reader, {.warmupSteps = 4});
  EXPECT_EQ(allWarmup.status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace moewb::storage
