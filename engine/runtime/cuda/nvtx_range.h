// NvtxRange: an RAII NVTX range (nvtx3, header-only) on the "moewb" domain around an engine
// phase, named like its host event ("experts.fwd"), so Nsight Systems and our CUPTI capture see
// the same names. Costs a few tens of nanoseconds when no tool is attached.
#pragma once

#include <nvtx3/nvToolsExt.h>

namespace moewb::engine::cuda {

class NvtxRange {
 public:
  explicit NvtxRange(const char* name) {
    nvtxEventAttributes_t attributes{};
    attributes.version = NVTX_VERSION;
    attributes.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
    attributes.messageType = NVTX_MESSAGE_TYPE_ASCII;
    attributes.message.ascii = name;
    nvtxDomainRangePushEx(domain(), &attributes);
  }
  ~NvtxRange() { nvtxDomainRangePop(domain()); }
  NvtxRange(const NvtxRange&) = delete;
  NvtxRange& operator=(const NvtxRange&) = delete;

  // The process-wide "moewb" domain.
  static nvtxDomainHandle_t domain() {
    static nvtxDomainHandle_t handle = nvtxDomainCreateA("moewb");
    return handle;
  }
};

}  // namespace moewb::engine::cuda
