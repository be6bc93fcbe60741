// The answers of a build without the CUDA backend (MOEWB_CUDA=OFF or no toolkit).
#include "train/device_backend.h"
#include "train/parallel/rank_common.h"

namespace moewb::engine {

Result<std::unique_ptr<DeviceBackend>> createCudaBackend(const RunConfig&, Model<float>&, int,
                                                         std::vector<StartupPhase>*) {
  return unimplemented(
      "run.backend = \"cuda\": this build of moewb has no CUDA backend (it was configured without "
      "the CUDA toolkit or with -DMOEWB_CUDA=OFF); use run.backend = \"cpu\", or rebuild with "
      "the CUDA toolkit present");
}

bool cudaDeviceAvailable() { return false; }

namespace {
constexpr const char* kNoCudaRanks =
    "GPU ranks (run.backend = \"cuda\" with parallel.world_size > 1, or NCCL): this build of "
    "moewb has no CUDA backend (configured without the CUDA toolkit or with -DMOEWB_CUDA=OFF); "
    "use run.backend = \"cpu\" for in-process ranks";
}  // namespace

Result<std::unique_ptr<RankStepper>> createCudaRankStepper(const ValidConfig&, Communicator&,
                                                           EventSink*, int) {
  return unimplemented(kNoCudaRanks);
}

Result<std::string> newNcclUniqueId() { return unimplemented(kNoCudaRanks); }

Result<std::unique_ptr<Communicator>> createNcclCommunicator(int32_t, int32_t, int,
                                                             const std::string&,
                                                             std::chrono::milliseconds,
                                                             std::function<std::string()>) {
  return unimplemented(kNoCudaRanks);
}

Status runVirtualGpuRanks(int32_t, int, const std::function<Status(Communicator&)>&,
                          std::chrono::milliseconds) {
  return unimplemented(kNoCudaRanks);
}

}  // namespace moewb::engine
