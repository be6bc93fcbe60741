// Rng: the engine's seeded random source for weight init and synthetic data.
//
// Built on std::mt19937_64 (its output sequence is fixed by the C++ standard) with our own
// uniform, integer and Box-Muller normal transforms, because the standard library's distributions
// may differ between implementations; the same seed gives bit-identical values everywhere.
// Costs: O(1) per draw. Not thread-safe; use one Rng per thread or per purpose.
#pragma once

#include <cstdint>
#include <random>

namespace moewb::engine {

// Mixes two 64-bit values into a well-spread seed (SplitMix64 finaliser); used to derive
// independent streams, e.g. mixSeed(runSeed, step).
uint64_t mixSeed(uint64_t a, uint64_t b);

class Rng {
 public:
  explicit Rng(uint64_t seed) : m_engine(seed) {}

  uint64_t nextU64() { return m_engine(); }
  // Uniform in [0, 1) with 53 random bits.
  double uniform() { return double(m_engine() >> 11) * 0x1.0p-53; }
  // Uniform integer in [0, n); n must be > 0.
  int64_t uniformInt(int64_t n);
  // Standard normal N(0, 1) by the Box-Muller transform (the second value is cached).
  double normal();

 private:
  std::mt19937_64 m_engine;
  bool m_hasSpare = false;
  double m_spare = 0;
};

}  // namespace moewb::engine
