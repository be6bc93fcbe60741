// Deadline waits on CUDA streams (stream_poll.h).
#include "comm/cuda/stream_poll.h"

#include <algorithm>
#include <thread>

#include "runtime/cuda/cuda_check.h"

namespace moewb::engine {

void pollPause(int attempt) {
  // Spin (yield) for the first few thousand looks, about the first millisecond: NCCL's
  // non-blocking calls and most collectives finish within it, and a sleep there would add its
  // own length to every call (it did: 1.7 ms per all-to-all of 1 MiB). Then back off to 200 us.
  constexpr int kSpins = 4096;
  if (attempt < kSpins) {
    std::this_thread::yield();
    return;
  }
  const int shift = std::min(attempt - kSpins, 4);  // 20 us << 4 = 320 us, capped at 200 us
  const auto pause =
      std::min(std::chrono::microseconds(20 << shift), std::chrono::microseconds(200));
  std::this_thread::sleep_for(pause);
}

Result<StreamPoll> pollStream(cudaStream_t stream, std::chrono::steady_clock::time_point deadline,
                              const std::function<Status()>& stop) {
  for (int attempt = 0;; ++attempt) {
    const cudaError_t state = cudaStreamQuery(stream);
    if (state == cudaSuccess) return StreamPoll::kDone;
    if (state != cudaErrorNotReady) {
      return cuda::cudaStatus(state, "cudaStreamQuery(stream)", __FILE__, __LINE__);
    }
    if (stop) MOEWB_RETURN_IF_ERROR(stop());
    if (std::chrono::steady_clock::now() >= deadline) return StreamPoll::kTimedOut;
    pollPause(attempt);
  }
}

}  // namespace moewb::engine
