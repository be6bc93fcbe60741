// Waiting on a real `moewb` process from tests: poll a condition with a generous deadline (never a
// fixed sleep as an assertion), and count the steps a run has committed to its trace so far.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <thread>

#include "moewb/storage/trace_reader.h"

namespace moewb::cli::testing {

// Polls `done` every 20 ms until it holds or `limit` passed; returns its last value.
template <typename Condition>
bool waitFor(Condition done, std::chrono::seconds limit = std::chrono::seconds(120)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!done() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return done();
}

// Steps of the first run of `trace` committed so far; -1 when the file cannot be read (yet).
inline int64_t committedSteps(const std::string& trace) {
  auto reader = storage::TraceReader::open(trace);
  if (!reader.isOk()) return -1;
  auto runs = (*reader)->runs();
  if (!runs.isOk() || runs->empty()) return -1;
  auto steps = (*reader)->steps(runs->front().id);
  return steps.isOk() ? int64_t(steps->size()) : -1;
}

}  // namespace moewb::cli::testing
