// Shared pieces of the GPU op benchmarks (bench/*_cuda_bench.cpp): exit-on-error helpers, random
// device tensors drawn on the device (a counter-based hash, so multi-GiB inputs cost no host time
// and every run sees fresh non-zero values), a CUDA-event median timer and one-line JSON output.
// Timing follows ../shared/anchors/common.py (warm-up runs, then the median of timed runs, each
// bracketed by CUDA events on the context's stream) so our lines and the anchors' compare.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "runtime/cuda/cuda_context.h"
#include "runtime/cuda/device_tensor.h"
#include "runtime/cuda/elementwise.h"
#include "runtime/cuda/transfer.h"
#include "cuda_bench_fill.h"
#include "moewb/base/status.h"
#include "runtime/tensor/rng.h"
#include "runtime/tensor/tensor.h"

namespace moewb::engine::cuda::bench {

// Prints the status and exits with 1 when it is an error.
inline void check(const Status& status) {
  if (!status.isOk()) {
    std::fprintf(stderr, "error: %s\n", status.toString().c_str());
    std::exit(1);
  }
}

inline void checkCuda(cudaError_t error, const char* what) {
  if (error != cudaSuccess) {
    std::fprintf(stderr, "error: %s: %s\n", what, cudaGetErrorString(error));
    std::exit(1);
  }
}

template <typename T>
T take(Result<T> result) {
  check(result.status());
  return std::move(result).value();
}

inline int64_t argOr(int argc, char** argv, int i, int64_t fallback) {
  return argc > i ? std::atoll(argv[i]) : fallback;
}

inline DeviceTensor<bf16> randomBf16(CudaContext& c, const std::vector<int64_t>& shape,
                                     float stddev, uint64_t seed, float mean = 0.0f,
                                     MemoryCategory category = MemoryCategory::kActivations) {
  auto t = take(c.newTensor<bf16>(shape, category));
  check(fillNormalBf16(c.stream(), t.data(), t.numel(), mean, stddev, seed));
  return t;
}

inline DeviceTensor<float> randomFloat(CudaContext& c, const std::vector<int64_t>& shape,
                                       float stddev, uint64_t seed, float mean = 0.0f,
                                       MemoryCategory category = MemoryCategory::kActivations) {
  auto t = take(c.newTensor<float>(shape, category));
  check(fillNormalFloat(c.stream(), t.data(), t.numel(), mean, stddev, seed));
  return t;
}

inline DeviceTensor<float> uniformFloat(CudaContext& c, const std::vector<int64_t>& shape,
                                        float lo, float hi, uint64_t seed) {
  auto t = take(c.newTensor<float>(shape, MemoryCategory::kActivations));
  check(fillUniformFloat(c.stream(), t.data(), t.numel(), lo, hi, seed));
  return t;
}

// fp32 weight-gradient accumulators (the ops add into them): small random values, not zeros.
inline DeviceTensor<float> gradFloat(CudaContext& c, const std::vector<int64_t>& shape,
                                     uint64_t seed) {
  return randomFloat(c, shape, 1e-4f, seed, 0.0f, MemoryCategory::kGrads);
}

// Output buffers (contents undefined, every op under test writes them).
template <typename T>
DeviceTensor<T> empty(CudaContext& c, const std::vector<int64_t>& shape) {
  return take(c.newTensor<T>(shape, MemoryCategory::kActivations));
}

// Exits with 1 when a device tensor holds a NaN or an infinity: a broken op must not report a
// time. Copies to the host (call it outside the timed region).
inline void checkFinite(CudaContext& c, const DeviceTensor<bf16>& t, const char* what) {
  const Tensor<float> host = take(toHostFloat(c, t));
  for (int64_t i = 0; i < host.numel(); ++i) {
    if (!std::isfinite(host[i])) {
      std::fprintf(stderr, "error: %s[%" PRId64 "] = %f is not finite\n", what, i, double(host[i]));
      std::exit(1);
    }
  }
}
inline void checkFinite(CudaContext& c, const DeviceTensor<float>& t, const char* what) {
  const Tensor<float> host = take(toHost(c, t));
  for (int64_t i = 0; i < host.numel(); ++i) {
    if (!std::isfinite(host[i])) {
      std::fprintf(stderr, "error: %s[%" PRId64 "] = %f is not finite\n", what, i, double(host[i]));
      std::exit(1);
    }
  }
}
// One fp32 device scalar (t[0]) on the host.
inline float readScalar(CudaContext& c, const DeviceTensor<float>& t) {
  return take(toHost(c, t))[0];
}

// A bf16 device copy of a host parameter drawn by the model's own init, with every element the
// init leaves exactly 0 (biases, sinks, A_log of the lower-bound gate) replaced by N(0, 0.01^2)
// so that no input is zero.
inline DeviceTensor<bf16> parameterToDevice(CudaContext& c, Tensor<float>& host, Rng& rng) {
  for (int64_t i = 0; i < host.numel(); ++i) {
    if (host[i] == 0.0f) host[i] = float(0.01 * rng.normal());
  }
  return take(toDeviceBf16(c, host, MemoryCategory::kWeights));
}

struct Timing {
  double medianMs = 0;
  double minMs = 0;
  double maxMs = 0;
  int iters = 0;
  double peakExtraGib = 0;  // device memory the step held beyond what was in use before it
};

// Runs step() `warmup` times, then `iters` times each between two CUDA events on the context's
// stream; returns the median. step() queues work on c.stream() and checks its own Statuses.
// Asynchronous errors surface at the synchronisations (exit 1).
template <typename Step>
Timing timeSteps(CudaContext& c, Step&& step, int warmup = 3, int iters = 10) {
  for (int i = 0; i < warmup; ++i) step();
  check(c.synchronize());
  c.allocator().resetPeaks();
  const int64_t base = c.allocator().stats().totalInUseBytes;
  cudaEvent_t start = nullptr, stop = nullptr;
  checkCuda(cudaEventCreate(&start), "cudaEventCreate");
  checkCuda(cudaEventCreate(&stop), "cudaEventCreate");
  std::vector<double> times;
  for (int i = 0; i < iters; ++i) {
    checkCuda(cudaEventRecord(start, c.stream()), "cudaEventRecord");
    step();
    checkCuda(cudaEventRecord(stop, c.stream()), "cudaEventRecord");
    checkCuda(cudaEventSynchronize(stop), "cudaEventSynchronize");
    float ms = 0;
    checkCuda(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
    times.push_back(double(ms));
  }
  check(c.synchronize());
  checkCuda(cudaGetLastError(), "last error");
  checkCuda(cudaEventDestroy(start), "cudaEventDestroy");
  checkCuda(cudaEventDestroy(stop), "cudaEventDestroy");
  std::sort(times.begin(), times.end());
  Timing t;
  t.medianMs = times[times.size() / 2];
  t.minMs = times.front();
  t.maxMs = times.back();
  t.iters = iters;
  t.peakExtraGib = double(c.allocator().stats().totalPeakInUseBytes - base) / double(1 << 30);
  return t;
}

// One JSON object on one line, keys in insertion order.
class JsonLine {
 public:
  explicit JsonLine(const std::string& name) { m_text = "{\"name\": \"" + name + "\""; }
  // A number, or null when it is not finite (JSON has no NaN / Infinity).
  JsonLine& num(const char* key, double value, int precision = 3) {
    if (!std::isfinite(value)) return raw(key, "null");
    char buffer[64];
    std::snprintf(buffer, sizeof(buffer), "%.*f", precision, value);
    return raw(key, buffer);
  }
  JsonLine& integer(const char* key, int64_t value) {
    return raw(key, std::to_string(value));
  }
  JsonLine& str(const char* key, const std::string& value) {
    return raw(key, "\"" + value + "\"");
  }
  // ms (median), min/max, iterations, peak extra memory.
  JsonLine& timing(const Timing& t) {
    num("ms", t.medianMs);
    num("min_ms", t.minMs);
    num("max_ms", t.maxMs);
    integer("iters", t.iters);
    return num("peak_extra_gib", t.peakExtraGib, 2);
  }
  // Achieved rate against a flop count (TFLOP/s) and the count itself (GFLOP).
  JsonLine& flops(double flopCount, double ms) {
    num("gflop", flopCount / 1e9, 1);
    return num("tflops", flopCount / (ms * 1e-3) / 1e12, 2);
  }
  // Achieved bandwidth against a byte count (GB/s = 1e9 B/s) and the count itself (GB).
  JsonLine& bytes(double byteCount, double ms) {
    num("gbytes", byteCount / 1e9, 3);
    return num("gbps", byteCount / (ms * 1e-3) / 1e9, 1);
  }
  void print() {
    std::printf("%s}\n", m_text.c_str());
    std::fflush(stdout);
  }

 private:
  JsonLine& raw(const char* key, const std::string& value) {
    m_text += ", \"";
    m_text += key;
    m_text += "\": ";
    m_text += value;
    return *this;
  }
  std::string m_text;
};

}  // namespace moewb::engine::cuda::bench
