// KernelChoice: which of two versions of a kernel a launcher runs, for kernels kept side by side
// until their successor has run long enough (docs/ARCHITECTURE.md). The newer one runs when a test
// forced it (force(1)), else when the environment variable `envName` says "1" (any other value:
// the older one; read once per process), else by `newerByDefault`.
// Thread-safe; one static instance per switch.
#pragma once

#include <atomic>
#include <cstdlib>
#include <cstring>

namespace moewb::engine::cuda {

class KernelChoice {
 public:
  KernelChoice(const char* envName, bool newerByDefault)
      : m_envName(envName), m_default(newerByDefault) {}

  // True when the newer kernel should run (see the class comment for the order).
  bool newer() const {
    const int forced = m_forced.load(std::memory_order_relaxed);
    if (forced >= 0) return forced == 1;
    int fromEnv = m_fromEnv.load(std::memory_order_relaxed);
    if (fromEnv < 0) {
      const char* text = std::getenv(m_envName);
      fromEnv = text != nullptr ? std::strcmp(text, "1") == 0 : m_default;
      m_fromEnv.store(fromEnv, std::memory_order_relaxed);
    }
    return fromEnv == 1;
  }

  // Tests and benchmarks: 1 forces the newer kernel, 0 the older, -1 goes back to the
  // environment variable or the default. Takes effect at the next launch.
  void force(int mode) {
    m_forced.store(mode < 0 ? -1 : (mode > 0 ? 1 : 0), std::memory_order_relaxed);
  }

 private:
  const char* m_envName;
  bool m_default;
  std::atomic<int> m_forced{-1};
  mutable std::atomic<int> m_fromEnv{-1};
};

}  // namespace moewb::engine::cuda
