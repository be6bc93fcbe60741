// writeSlowRankTrace: a 4-rank trace with one slower rank per step (see slow_rank_trace.h).
#include "slow_rank_trace.h"

#include "moewb/storage/trace_writer.h"

namespace moewb::gui::testing {

int64_t slowRankExtraNs(int64_t step, int32_t rank) {
  if (step == 1 && rank == 2) return 1'500'000;
  if (step == 2 && rank == 3) return 800'000;
  if (step == 3 && (rank == 1 || rank == 2)) return 300'000;
  return 0;
}

int32_t slowRankExpected(int64_t step) {
  static constexpr int32_t kExpected[] = {0, 2, 3, 1};
  return kExpected[step];
}

Status writeSlowRankTrace(const std::string& path) {
  storage::WriterOptions options;
  options.overwrite = true;
  MOEWB_ASSIGN_OR_RETURN(auto writer, storage::TraceWriter::create(path, options));
  constexpr int64_t kOriginNs = 7'000'000'000, kStepStrideNs = 5'000'000;
  storage::RunRow run;
  run.name = "slow-rank";
  run.backend = "cpu";
  run.worldSize = kSlowRankWorld;
  run.startNs = kOriginNs;
  run.status = "running";
  const RunId runId = writer->addRun(run);
  std::vector<TrackId> threads, comms;
  for (int32_t r = 0; r < kSlowRankWorld; ++r) {
    threads.push_back(writer->addTrack({{}, "trainer thread", "thread", r, 100 + r}));
    comms.push_back(writer->addTrack({{}, "comm", "comm", r, 200 + r}));
  }
  for (int64_t s = 0; s < kSlowRankSteps; ++s) {
    const int64_t start = kOriginNs + s * kStepStrideNs;
    for (int32_t r = 0; r < kSlowRankWorld; ++r) {
      const int64_t extra = slowRankExtraNs(s, r), durNs = kSlowRankBaseNs + extra;
      auto slice = [&](TrackId track, int64_t at, int64_t dur, const char* name,
                       const char* category, int32_t depth) {
        storage::SliceRow row;
        row.track = track;
        row.startNs = start + at;
        row.durNs = dur;
        row.name = name;
        row.category = category;
        row.step = s;
        row.layer = depth == 2 ? 0 : -1;
        row.depth = depth;
        writer->addSlice(row);
      };
      slice(threads[size_t(r)], 0, durNs, "step", storage::kCategoryStep, 0);
      slice(threads[size_t(r)], 100'000, 300'000, "attention.fwd", storage::kCategoryPhase, 2);
      slice(threads[size_t(r)], 500'000, kSlowRankExpertsNs + extra, "experts.fwd",
            storage::kCategoryPhase, 2);
      slice(comms[size_t(r)], 500'000 + kSlowRankExpertsNs + extra, 200'000, "all_to_all_v",
            storage::kCategoryCollective, 0);
      slice(threads[size_t(r)], durNs - 350'000, 300'000, "optimizer", storage::kCategoryPhase,
            1);
      storage::StepRow row;
      row.run = runId;
      row.rank = r;
      row.step = s;
      row.startNs = start;
      row.endNs = start + durNs;
      row.loss = 4.0 - 0.1 * double(s);
      writer->addStep(row);
    }
    MOEWB_RETURN_IF_ERROR(writer->flush());
  }
  writer->finishRun(runId, "completed", "", kOriginNs + kSlowRankSteps * kStepStrideNs);
  return writer->close();
}

}  // namespace moewb::gui::testing
