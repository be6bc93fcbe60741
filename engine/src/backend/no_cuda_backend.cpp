// The answers of a build without the CUDA backend (MOEWB_CUDA=OFF or no toolkit).
#include "backend/device_backend.h"

namespace moewb::engine {

Result<std::unique_ptr<DeviceBackend>> createCudaBackend(const RunConfig&, Model<float>&, int) {
  return unimplemented(
      "run.backend = \"cuda\": this build of moewb has no CUDA backend (it was configured without "
      "the CUDA toolkit or with -DMOEWB_CUDA=OFF); use run.backend = \"cpu\", or rebuild with "
      "the CUDA toolkit present");
}

bool cudaDeviceAvailable() { return false; }

}  // namespace moewb::engine
