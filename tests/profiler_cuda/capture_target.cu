// A tiny CUDA program with known GPU work, the target of the `moewb capture` GPU test
// (capture_test.cpp): inside one NVTX range "capture.work" it copies 4096 floats host -> device,
// sets 4096 floats to zero, launches capture_fill_kernel 3 times and capture_scale_kernel twice,
// and copies the result back; nothing else runs on the GPU. Exits 0 when the result is right,
// 1 on a CUDA error or a wrong result, 3 when no device is visible.
#include <cuda_runtime.h>
#include <nvtx3/nvToolsExt.h>

#include <cstdio>
#include <vector>

namespace {

constexpr int kCount = 4096;
constexpr int kThreads = 128;

__global__ void capture_fill_kernel(float* out, float value, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] += value;
}

__global__ void capture_scale_kernel(float* out, float factor, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] *= factor;
}

bool check(cudaError_t error, const char* call) {
  if (error == cudaSuccess) return true;
  std::fprintf(stderr, "capture_target: %s: %s\n", call, cudaGetErrorString(error));
  return false;
}

}  // namespace

int main() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) return 3;
  std::vector<float> host(kCount, 1.0f);
  float* device = nullptr;
  if (!check(cudaMalloc(&device, kCount * sizeof(float)), "cudaMalloc")) return 1;
  nvtxRangePushA("capture.work");
  bool ok = check(cudaMemcpy(device, host.data(), kCount * sizeof(float), cudaMemcpyHostToDevice),
                  "cudaMemcpy HtoD") &&
            check(cudaMemset(device, 0, kCount * sizeof(float)), "cudaMemset");
  const int blocks = (kCount + kThreads - 1) / kThreads;
  for (int i = 0; ok && i < 3; ++i) {
    capture_fill_kernel<<<blocks, kThreads>>>(device, 1.0f, kCount);
    ok = check(cudaGetLastError(), "capture_fill_kernel");
  }
  for (int i = 0; ok && i < 2; ++i) {
    capture_scale_kernel<<<blocks, kThreads>>>(device, 2.0f, kCount);
    ok = check(cudaGetLastError(), "capture_scale_kernel");
  }
  ok = ok && check(cudaMemcpy(host.data(), device, kCount * sizeof(float), cudaMemcpyDeviceToHost),
                   "cudaMemcpy DtoH");
  nvtxRangePop();
  ok = check(cudaFree(device), "cudaFree") && ok;
  for (int i = 0; ok && i < kCount; ++i) ok = host[i] == 12.0f;  // (0 + 3) * 2 * 2
  return ok ? 0 : 1;
}
