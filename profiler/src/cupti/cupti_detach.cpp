// detachCupti (see cupti_detach.h).
#include "cupti/cupti_detach.h"

#include <cuda_runtime_api.h>
#include <cupti.h>

#include <atomic>
#include <string>

#include "cupti/cupti_check.h"

namespace moewb::profiler::cupti {

namespace {

std::atomic<bool> g_detachArmed{false};
std::atomic<bool> g_detached{false};
std::atomic<CUptiResult> g_finalizeResult{CUPTI_SUCCESS};

// Runs on the thread of any runtime call while subscribed; the first call's exit site detaches.
void CUPTIAPI detachAtApiExit(void*, CUpti_CallbackDomain domain, CUpti_CallbackId,
                              const void* callbackData) {
  if (domain != CUPTI_CB_DOMAIN_RUNTIME_API) return;
  const auto* data = static_cast<const CUpti_CallbackData*>(callbackData);
  if (data->callbackSite != CUPTI_API_EXIT) return;
  if (!g_detachArmed.exchange(false)) return;
  g_finalizeResult.store(cuptiFinalize());  // also removes this subscription
  g_detached.store(true);
}

}  // namespace

Status detachCupti() {
  g_detached.store(false);
  g_finalizeResult.store(CUPTI_SUCCESS);
  CUpti_SubscriberHandle subscriber = nullptr;
  MOEWB_CUPTI_RETURN_IF_ERROR(
      cuptiSubscribe(&subscriber, &detachAtApiExit, nullptr));
  if (CUptiResult r = cuptiEnableDomain(1, subscriber, CUPTI_CB_DOMAIN_RUNTIME_API);
      r != CUPTI_SUCCESS) {
    (void)cuptiUnsubscribe(subscriber);
    MOEWB_CUPTI_RETURN_IF_ERROR(r);
  }
  g_detachArmed.store(true);
  // The first runtime call's exit, on this thread or another, detaches; more tries cover a call
  // that entered before the flag was armed.
  constexpr int kMaxCalls = 1000;
  for (int i = 0; i < kMaxCalls && !g_detached.load(); ++i) {
    int device = 0;
    if (cudaError_t e = cudaGetDevice(&device); e != cudaSuccess && !g_detached.load()) {
      g_detachArmed.store(false);
      (void)cuptiUnsubscribe(subscriber);
      return internalError(std::string("detaching CUPTI: cudaGetDevice failed: ") +
                           cudaGetErrorString(e));
    }
  }
  if (!g_detached.load()) {
    g_detachArmed.store(false);
    (void)cuptiUnsubscribe(subscriber);
    return internalError("detaching CUPTI: no CUDA runtime call reached the detach callback");
  }
  if (CUptiResult r = g_finalizeResult.load(); r != CUPTI_SUCCESS) {
    (void)cuptiUnsubscribe(subscriber);  // still attached: leave no callback behind
    MOEWB_CUPTI_RETURN_IF_ERROR(r);
  }
  return Status::ok();
}

}  // namespace moewb::profiler::cupti
