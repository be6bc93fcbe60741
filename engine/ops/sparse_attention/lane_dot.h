// laneDot: the dot product used by the sparse attention kernels. It keeps 8 independent partial
// sums (element i goes to lane i % 8) and adds them in a fixed tree, so the compiler can
// vectorise it without -ffast-math and the result is still a pure function of the inputs
// (independent of threads and of where the call runs). Cost: len multiply-adds.
#pragma once

#include <cstdint>

namespace moewb::engine {

template <typename T>
inline T laneDot(const T* a, const T* b, int64_t len) {
  constexpr int64_t kLanes = 8;
  T acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= len; i += kLanes) {
    for (int64_t l = 0; l < kLanes; ++l) acc[l] += a[i + l] * b[i + l];
  }
  T tail = 0;
  for (; i < len; ++i) tail += a[i] * b[i];
  return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7])) + tail;
}

}  // namespace moewb::engine
