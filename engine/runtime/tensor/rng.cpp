// Rng transforms: SplitMix64 seed mixing, rejection-free integer draw, Box-Muller normals.
#include "runtime/tensor/rng.h"

#include <cmath>

#include "moewb/base/check.h"

namespace moewb::engine {

uint64_t mixSeed(uint64_t a, uint64_t b) {
  uint64_t z = a + 0x9E3779B97F4A7C15ull * (b + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

int64_t Rng::uniformInt(int64_t n) {
  MOEWB_CHECK(n > 0);
  // 128-bit multiply-shift (Lemire) without the rejection step: the bias is below 2^-40 for the
  // small n used here, and the result stays a pure function of the engine's output.
  unsigned __int128 product = (unsigned __int128)m_engine() * (unsigned __int128)uint64_t(n);
  return int64_t(uint64_t(product >> 64));
}

double Rng::normal() {
  if (m_hasSpare) {
    m_hasSpare = false;
    return m_spare;
  }
  double u1 = 1.0 - uniform();  // (0, 1]: log(u1) is finite
  double u2 = uniform();
  double radius = std::sqrt(-2.0 * std::log(u1));
  double angle = 2.0 * M_PI * u2;
  m_spare = radius * std::sin(angle);
  m_hasSpare = true;
  return radius * std::cos(angle);
}

}  // namespace moewb::engine
