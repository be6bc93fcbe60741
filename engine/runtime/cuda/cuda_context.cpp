#include "runtime/cuda/cuda_context.h"

#include "runtime/cuda/cuda_check.h"
#include "runtime/driver_release.h"

namespace moewb::engine::cuda {
namespace {
constexpr int64_t kCublasWorkspaceBytes = int64_t(32) << 20;
}

int deviceCount() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return count;
}

Result<DeviceInfo> deviceInfo(int ordinal) {
  const int count = deviceCount();
  if (ordinal < 0 || ordinal >= count) {
    return notFound("CUDA device " + std::to_string(ordinal) + " does not exist: this process sees " +
                    std::to_string(count) + " device(s)" +
                    (count == 0 ? " (no driver, or CUDA_VISIBLE_DEVICES hides them); use "
                                  "run.backend = \"cpu\""
                                : ""));
  }
  cudaDeviceProp props{};
  MOEWB_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&props, ordinal));
  DeviceInfo info;
  info.ordinal = ordinal;
  info.name = props.name;
  info.computeMajor = props.major;
  info.computeMinor = props.minor;
  info.multiprocessors = props.multiProcessorCount;
  info.totalMemoryBytes = int64_t(props.totalGlobalMem);
  if (cudaDriverGetVersion(&info.driverCudaVersion) != cudaSuccess) info.driverCudaVersion = 0;
  info.driverRelease = nvidiaDriverRelease();
  return info;
}

Result<std::unique_ptr<CudaContext>> CudaContext::create(int ordinal, int64_t allocatorLimitBytes) {
  MOEWB_ASSIGN_OR_RETURN(DeviceInfo info, deviceInfo(ordinal));
  if (info.computeMajor < 8) {
    return failedPrecondition("CUDA device " + std::to_string(ordinal) + " (" + info.name +
                              ") has compute capability " + std::to_string(info.computeMajor) +
                              "." + std::to_string(info.computeMinor) +
                              "; the CUDA backend needs 8.0 or newer (bf16 tensor cores)");
  }
  MOEWB_CUDA_RETURN_IF_ERROR(cudaSetDevice(ordinal));
  std::unique_ptr<CudaContext> context(new CudaContext(allocatorLimitBytes));
  context->m_device = info;
  MOEWB_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&context->m_stream, cudaStreamNonBlocking));
  MOEWB_CUBLAS_RETURN_IF_ERROR(cublasCreate(&context->m_cublas));
  MOEWB_CUBLAS_RETURN_IF_ERROR(cublasSetStream(context->m_cublas, context->m_stream));
  MOEWB_CUDA_RETURN_IF_ERROR(cudaMalloc(&context->m_cublasWorkspace, kCublasWorkspaceBytes));
  MOEWB_CUBLAS_RETURN_IF_ERROR(
      cublasSetWorkspace(context->m_cublas, context->m_cublasWorkspace, kCublasWorkspaceBytes));
  return context;
}

CudaContext::~CudaContext() {
  if (m_sideStream != nullptr) {
    cudaStreamSynchronize(m_sideStream);
    cudaStreamDestroy(m_sideStream);
  }
  if (m_stream != nullptr) cudaStreamSynchronize(m_stream);
  if (m_cublas != nullptr) cublasDestroy(m_cublas);
  if (m_cublasWorkspace != nullptr) cudaFree(m_cublasWorkspace);
  m_allocator.emptyCache();
  if (m_stream != nullptr) cudaStreamDestroy(m_stream);
}

Result<cudaStream_t> CudaContext::sideStream() {
  if (m_sideStream == nullptr) {
    MOEWB_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&m_sideStream, cudaStreamNonBlocking));
  }
  return m_sideStream;
}

Status CudaContext::synchronize() {
  if (m_sideStream != nullptr) MOEWB_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(m_sideStream));
  MOEWB_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(m_stream));
  MOEWB_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return Status::ok();
}

}  // namespace moewb::engine::cuda
