// Waiting for a CUDA stream with a deadline: the GPU communicators' synchronizeDevice polls
// cudaStreamQuery (never cudaStreamSynchronize, which cannot time out when a peer never joins a
// collective). Polls spin briefly, then sleep with a growing interval up to 1 ms, so a wait costs
// little CPU and adds at most ~1 ms of latency.
#pragma once

#include <cuda_runtime.h>

#include <chrono>
#include <functional>

#include "moewb/base/status.h"

namespace moewb::engine {

enum class StreamPoll { kDone, kTimedOut };

// Polls until every piece of work queued on `stream` so far is complete (kDone), `deadline`
// passes (kTimedOut), or stop() returns a non-ok Status (returned as the error; stop may be
// empty). Errors: a CUDA error other than "not
// ready" from cudaStreamQuery (a failed kernel), as kInternal naming the call.
Result<StreamPoll> pollStream(cudaStream_t stream, std::chrono::steady_clock::time_point deadline,
                              const std::function<Status()>& stop = {});

// Sleeps for the poll interval of the attempt-th poll (0-based): nothing for the first few, then
// 20 us doubling to 1 ms. For the other polling loops (NCCL states).
void pollPause(int attempt);

}  // namespace moewb::engine
