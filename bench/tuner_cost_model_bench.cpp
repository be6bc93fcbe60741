// How fast the tuner's cost model scores candidates (issue 17's target: >= 100,000 in <= 60 s on
// a 2-core CPU, from a stored trace). A plain timing program, run by hand; figures go to
// bench/RESULTS.md, never into a test.
//
//   tuner_cost_model_bench [TRACE]
//
// Calibrates from TRACE (default: a fresh 8-step CPU trace of samples/configs/tiny.toml written to
// a temporary file), then scores the cartesian product of 11 knobs on an 8-rank layout (138,240
// candidates): each is built with the tuner's applySettings (override text + the engine's
// validation, as the model strategy does) and, when valid, predicted on 8 devices. Prints the
// calibration time, candidates, valid ones, wall time and candidates per second (one thread).
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "moewb/engine/config.h"
#include "moewb/run/training_run.h"
#include "moewb/tuner/cost_model.h"
#include "moewb/tuner/search_space.h"

namespace {

using Clock = std::chrono::steady_clock;

double secondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Writes an 8-step trace of the tiny sample to `path`.
moewb::Status makeTrace(const std::string& path) {
  MOEWB_ASSIGN_OR_RETURN(auto config, moewb::engine::loadConfigFile(std::string(MOEWB_SOURCE_DIR) +
                                                                    "/samples/configs/tiny.toml"));
  MOEWB_ASSIGN_OR_RETURN(auto valid, moewb::engine::ValidConfig::validate(config));
  moewb::run::TrainingRunOptions options;
  options.outPath = path;
  options.overwrite = true;
  options.steps = 8;
  MOEWB_ASSIGN_OR_RETURN(auto run, moewb::run::TrainingRun::create(valid, options, nullptr));
  MOEWB_ASSIGN_OR_RETURN(auto summary, run->run());
  (void)summary;
  return moewb::Status::ok();
}

}  // namespace

int main(int argc, char** argv) {
  using namespace moewb;
  std::string trace = argc > 1 ? argv[1] : "";
  if (trace.empty()) {
    trace = (std::filesystem::temp_directory_path() / "moewb-tuner-bench-tiny.sqlite").string();
    if (Status s = makeTrace(trace); !s.isOk()) {
      std::fprintf(stderr, "tuner_cost_model_bench: %s\n", s.toString().c_str());
      return 1;
    }
  }
  const auto calStart = Clock::now();
  auto cal = tuner::calibrate(trace);
  if (!cal.isOk()) {
    std::fprintf(stderr, "tuner_cost_model_bench: %s\n", cal.status().toString().c_str());
    return 1;
  }
  const double calSeconds = secondsSince(calStart);
  engine::RunConfig base = cal->config;
  base.parallel.worldSize = 8;
  base.parallel.fsdp = 0;
  base.parallel.replicate = 0;
  const std::vector<std::pair<std::string, std::vector<std::string>>> knobs = {
      {"parallel.ep", {"1", "2", "4", "8"}},
      {"parallel.fsdp", {"1", "2", "4", "8"}},
      {"parallel.a2a_chunks", {"1", "2", "4", "8"}},
      {"moe.capacity_factor", {"0.0", "1.0", "1.25", "1.5", "2.0"}},
      {"moe.drop_policy", {"\"probs\"", "\"position\""}},
      {"loss.kind", {"\"dense\"", "\"chunk\"", "\"cce\""}},
      {"loss.chunk_tokens", {"64", "256", "1024"}},
      {"loss.cce_vocab_block", {"64", "256", "1024"}},
      {"loss.cce_filter_eps", {"0.0", "1e-6"}},
      {"fusion.permute_into_experts", {"false", "true"}},
      {"data.batch_size", {"8", "16"}},
  };
  size_t total = 1;
  for (const auto& k : knobs) total *= k.second.size();
  const tuner::CostModel model(*cal, tuner::Interconnect{});
  tuner::PredictOptions options;
  options.devices = 8;
  std::vector<size_t> at(knobs.size(), 0);
  size_t valid = 0;
  double bestMs = 0;
  const auto start = Clock::now();
  for (size_t n = 0; n < total; ++n) {
    tuner::Settings settings;
    for (size_t i = 0; i < knobs.size(); ++i) {
      const std::string& value = knobs[i].second[at[i]];
      settings.emplace_back(knobs[i].first, value);
    }
    auto config = tuner::applySettings(base, settings);
    if (config.isOk()) {
      auto p = model.predict(config->get(), options);
      if (p.isOk()) {
        ++valid;
        if (bestMs == 0 || p->stepMs < bestMs) bestMs = p->stepMs;
      }
    }
    for (size_t i = at.size(); i-- > 0;) {
      if (++at[i] < knobs[i].second.size()) break;
      at[i] = 0;
    }
  }
  const double seconds = secondsSince(start);
  std::printf("calibration from %s: %.3f s\n", trace.c_str(), calSeconds);
  std::printf(
      "candidates %zu (valid and predicted %zu) in %.2f s: %.0f candidates/s, "
      "%.1f us each; best predicted step %.3f ms\n",
      total, valid, seconds, double(total) / seconds, seconds / double(total) * 1e6, bestMs);
  return 0;
}
