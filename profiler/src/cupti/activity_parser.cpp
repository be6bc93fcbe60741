// ActivityParser: CUPTI activity records -> plain records (see activity_parser.h). The record
// structs are the CUDA 13 versions CUPTI delivers for the kinds CuptiCapture enables.
#include "cupti/activity_parser.h"

#include <cupti.h>

#include "cupti/cupti_check.h"

namespace moewb::profiler::cupti {

const std::string& ActivityParser::kernelName(const char* mangled) {
  auto [it, inserted] = m_kernelNames.try_emplace(mangled);
  if (inserted) {
    it->second.second = mangled != nullptr ? mangled : "";
    it->second.first = gpu::demangle(it->second.second);
  }
  return it->second.first;
}

const std::string& ActivityParser::apiName(bool driver, uint32_t cbid) {
  const uint64_t key = (uint64_t(driver) << 32) | cbid;
  auto [it, inserted] = m_apiNames.try_emplace(key);
  if (inserted) {
    const char* name = nullptr;
    const CUpti_CallbackDomain domain =
        driver ? CUPTI_CB_DOMAIN_DRIVER_API : CUPTI_CB_DOMAIN_RUNTIME_API;
    if (cuptiGetCallbackName(domain, cbid, &name) == CUPTI_SUCCESS && name != nullptr) {
      it->second = gpu::apiShortName(name);
    } else {
      it->second = std::string(driver ? "driver" : "runtime") + " call " + std::to_string(cbid);
    }
  }
  return it->second;
}

Status ActivityParser::parse(uint8_t* buffer, size_t validBytes, std::vector<gpu::Record>& out) {
  CUpti_Activity* record = nullptr;
  while (true) {
    const CUptiResult result = cuptiActivityGetNextRecord(buffer, validBytes, &record);
    if (result == CUPTI_ERROR_MAX_LIMIT_REACHED) return Status::ok();
    MOEWB_CUPTI_RETURN_IF_ERROR(result);
    switch (record->kind) {
      case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
      case CUPTI_ACTIVITY_KIND_KERNEL: {
        const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
        if (k->start == 0 || k->end == 0) {
          ++m_incomplete;
          break;
        }
        gpu::KernelActivity a;
        a.startNs = steady(k->start);
        a.endNs = steady(k->end);
        a.deviceId = k->deviceId;
        a.streamId = k->streamId;
        a.correlationId = k->correlationId;
        a.grid[0] = k->gridX, a.grid[1] = k->gridY, a.grid[2] = k->gridZ;
        a.block[0] = k->blockX, a.block[1] = k->blockY, a.block[2] = k->blockZ;
        a.registersPerThread = k->registersPerThread;
        a.staticSharedBytes = k->staticSharedMemory;
        a.dynamicSharedBytes = k->dynamicSharedMemory;
        a.name = kernelName(k->name);
        a.mangledName = m_kernelNames[k->name].second;
        out.emplace_back(std::move(a));
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMCPY: {
        const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(record);
        if (m->start == 0 || m->end == 0) {
          ++m_incomplete;
          break;
        }
        out.emplace_back(gpu::MemcpyActivity{steady(m->start), steady(m->end), m->deviceId,
                                             m->streamId, m->correlationId, m->copyKind,
                                             m->srcKind, m->dstKind, int64_t(m->bytes)});
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMSET: {
        const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(record);
        if (m->start == 0 || m->end == 0) {
          ++m_incomplete;
          break;
        }
        out.emplace_back(gpu::MemsetActivity{steady(m->start), steady(m->end), m->deviceId,
                                             m->streamId, m->correlationId, int64_t(m->bytes),
                                             int32_t(m->value), int32_t(m->memoryKind)});
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMORY2: {
        const auto* m = reinterpret_cast<const CUpti_ActivityMemory4*>(record);
        if (m->memoryOperationType != CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION &&
            m->memoryOperationType != CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_RELEASE) {
          ++m_ignored;
          break;
        }
        out.emplace_back(gpu::MemoryActivity{
            steady(m->timestamp), m->deviceId, m->streamId, m->correlationId,
            m->memoryOperationType == CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION,
            int32_t(m->memoryKind), int64_t(m->bytes), m->address});
        break;
      }
      case CUPTI_ACTIVITY_KIND_SYNCHRONIZATION: {
        const auto* s = reinterpret_cast<const CUpti_ActivitySynchronization2*>(record);
        const bool anyStream = s->streamId == uint32_t(CUPTI_SYNCHRONIZATION_INVALID_VALUE);
        out.emplace_back(gpu::SyncActivity{steady(s->start), steady(s->end), s->correlationId,
                                           anyStream ? -1 : int64_t(s->streamId), int32_t(s->type),
                                           int64_t(s->cudaEventId)});
        break;
      }
      case CUPTI_ACTIVITY_KIND_RUNTIME:
      case CUPTI_ACTIVITY_KIND_DRIVER: {
        const auto* api = reinterpret_cast<const CUpti_ActivityAPI*>(record);
        const bool driver = record->kind == CUPTI_ACTIVITY_KIND_DRIVER;
        out.emplace_back(gpu::ApiCall{api->correlationId, steady(api->start), steady(api->end),
                                      api->threadId, driver, api->cbid,
                                      apiName(driver, api->cbid), api->returnValue});
        break;
      }
      case CUPTI_ACTIVITY_KIND_MARKER: {
        const auto* m = reinterpret_cast<const CUpti_ActivityMarker2*>(record);
        gpu::NvtxMarker marker;
        marker.kind = (m->flags & CUPTI_ACTIVITY_FLAG_MARKER_START) ? gpu::NvtxMarker::Kind::kStart
                      : (m->flags & CUPTI_ACTIVITY_FLAG_MARKER_END) ? gpu::NvtxMarker::Kind::kEnd
                                                                    : gpu::NvtxMarker::Kind::kInstant;
        marker.id = m->id;
        marker.tsNs = steady(m->timestamp);
        marker.threadId =
            m->objectKind == CUPTI_ACTIVITY_OBJECT_THREAD ? m->objectId.pt.threadId : 0;
        if (m->name != nullptr) marker.name = m->name;
        if (m->domain != nullptr) marker.domain = m->domain;
        out.emplace_back(std::move(marker));
        break;
      }
      default:
        ++m_ignored;
        break;
    }
  }
}

}  // namespace moewb::profiler::cupti
