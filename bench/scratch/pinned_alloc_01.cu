// Scratch benchmark 01 (issue 16): why the first swap step of h200.toml took 11 s, and what pins
// a 16 GiB host pool fastest. The swap tier's PinnedHostPool makes one cudaHostAlloc of the whole
// budget. Variants, each timed from nothing to a pool whose every page is pinned, then checked by
// a 1 GiB H2D copy (a pageable source would run at a fraction of the pinned rate):
//   alloc1     one cudaHostAlloc of the whole size (today's pool)
//   allocN     T threads, each one cudaHostAlloc of size / T, at once
//   touchReg1  mmap, T threads write every page once (first touch), then one cudaHostRegister
//   touchRegN  mmap, T threads write their slice, then each registers its slice, at once
//   reg1       mmap, one cudaHostRegister of untouched pages (the driver faults them in)
// Prediction: the cost is the kernel faulting in and zeroing 4M pages on one thread (~1.5 GB/s
// matches 11 s for 16 GiB); splitting the faults over threads should bring it near the memory
// bandwidth of page zeroing, a few GB/s per thread, if the driver's pinning does not serialise.
// Build: nvcc -O2 -std=c++17 -arch=sm_90 pinned_alloc_01.cu -o pinned_alloc_01 -lpthread
// Usage: pinned_alloc_01 [GiB = 16] [threads = 8]
#include <cuda_runtime.h>
#include <sys/mman.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

namespace {

#define CHECK(call)                                                               \
  do {                                                                            \
    cudaError_t e_ = (call);                                                      \
    if (e_ != cudaSuccess) {                                                      \
      std::fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); \
      std::exit(1);                                                               \
    }                                                                             \
  } while (0)

double nowS() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// GB/s of a 1 GiB host -> device copy from `host` (pinned if the pool works).
double h2dGbps(const void* host, void* device) {
  const size_t bytes = size_t(1) << 30;
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  CHECK(cudaMemcpy(device, host, bytes, cudaMemcpyHostToDevice));  // warm
  CHECK(cudaEventRecord(a));
  for (int i = 0; i < 3; ++i) CHECK(cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice));
  CHECK(cudaEventRecord(b));
  CHECK(cudaEventSynchronize(b));
  float ms = 0;
  CHECK(cudaEventElapsedTime(&ms, a, b));
  return 3.0 * double(bytes) / (double(ms) * 1e6);
}

void report(const char* name, double seconds, size_t bytes, const void* host, void* device) {
  std::printf("{\"variant\": \"%s\", \"seconds\": %.3f, \"GBps_pinning\": %.2f, "
              "\"h2d_GBps\": %.1f}\n",
              name, seconds, double(bytes) / seconds / 1e9, h2dGbps(host, device));
  std::fflush(stdout);
}

void parallelFor(int threads, const std::function<void(int)>& body) {
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) pool.emplace_back(body, t);
  for (auto& t : pool) t.join();
}

}  // namespace

int main(int argc, char** argv) {
  const size_t gib = argc > 1 ? size_t(std::atoll(argv[1])) : 16;
  const int threads = argc > 2 ? std::atoi(argv[2]) : 8;
  const size_t bytes = gib << 30;
  const size_t slice = bytes / size_t(threads);
  void* device = nullptr;
  CHECK(cudaSetDevice(0));
  CHECK(cudaMalloc(&device, size_t(1) << 30));
  CHECK(cudaFree(nullptr));

  {  // alloc1
    const double t0 = nowS();
    void* host = nullptr;
    CHECK(cudaHostAlloc(&host, bytes, cudaHostAllocDefault));
    const double t = nowS() - t0;
    report("alloc1", t, bytes, host, device);
    const double f0 = nowS();
    CHECK(cudaFreeHost(host));
    std::printf("{\"variant\": \"alloc1_free\", \"seconds\": %.3f}\n", nowS() - f0);
  }
  {  // allocN
    std::vector<void*> hosts(size_t(threads), nullptr);
    const double t0 = nowS();
    parallelFor(threads, [&](int t) { CHECK(cudaHostAlloc(&hosts[size_t(t)], slice, 0)); });
    report("allocN", nowS() - t0, bytes, hosts[0], device);
    for (void* h : hosts) CHECK(cudaFreeHost(h));
  }
  for (int variant = 0; variant < 3; ++variant) {  // touchReg1, touchRegN, reg1
    const double t0 = nowS();
    char* base = static_cast<char*>(
        mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    if (base == MAP_FAILED) return 1;
    if (variant < 2) {
      parallelFor(threads, [&](int t) {
        char* p = base + size_t(t) * slice;
        for (size_t i = 0; i < slice; i += 4096) p[i] = 0;
      });
    }
    const double touched = nowS() - t0;
    if (variant == 1) {
      parallelFor(threads, [&](int t) {
        CHECK(cudaHostRegister(base + size_t(t) * slice, slice, cudaHostRegisterDefault));
      });
    } else {
      CHECK(cudaHostRegister(base, bytes, cudaHostRegisterDefault));
    }
    const char* name = variant == 0 ? "touchReg1" : variant == 1 ? "touchRegN" : "reg1";
    std::printf("{\"variant\": \"%s_touch\", \"seconds\": %.3f}\n", name, touched);
    report(name, nowS() - t0, bytes, base, device);
    if (variant == 1) {
      for (int t = 0; t < threads; ++t) CHECK(cudaHostUnregister(base + size_t(t) * slice));
    } else {
      CHECK(cudaHostUnregister(base));
    }
    munmap(base, bytes);
  }
  CHECK(cudaFree(device));
  return 0;
}
