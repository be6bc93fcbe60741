// GpuCapture in a build without CUPTI (MOEWB_CUDA=OFF): create() says why it is unavailable.
#include "moewb/profiler/gpu_capture.h"

namespace moewb::profiler {

Result<std::unique_ptr<GpuCapture>> GpuCapture::create(storage::TraceWriter*,
                                                       const GpuCaptureOptions&) {
  return unimplemented(
      "GPU trace capture needs a build with CUDA and CUPTI (configure with -DMOEWB_CUDA=ON)");
}

bool GpuCapture::available() { return false; }

}  // namespace moewb::profiler
