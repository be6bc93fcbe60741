// The device communicators as the parallel drivers see them (parallel/rank_common.h): virtual
// GPU ranks and NCCL from comm/cuda/, in a CUDA build.
#include "comm/cuda/nccl_comm.h"
#include "comm/cuda/virtual_gpu_comm.h"
#include "train/parallel/rank_common.h"

namespace moewb::engine {

Status runVirtualGpuRanks(int32_t worldSize, int deviceOrdinal,
                          const std::function<Status(Communicator&)>& fn,
                          std::chrono::milliseconds timeout) {
  return runVirtualRanks(worldSize, deviceOrdinal, fn, timeout);
}

Result<std::string> newNcclUniqueId() { return ncclNewUniqueId(); }

Result<std::unique_ptr<Communicator>> createNcclCommunicator(
    int32_t rank, int32_t worldSize, int deviceOrdinal, const std::string& uniqueId,
    std::chrono::milliseconds timeout, std::function<std::string()> describeMissing) {
  NcclWorldOptions options;
  options.rank = rank;
  options.worldSize = worldSize;
  options.deviceOrdinal = deviceOrdinal;
  options.uniqueId = uniqueId;
  options.timeout = timeout;
  options.describeMissingPeers = std::move(describeMissing);
  return createNcclWorld(options);
}

}  // namespace moewb::engine
