# The CUDA backend's model: the decoder stack on the device (cuda_model*), the device optimizer
# and the DeviceBackend the Trainer holds (cuda_backend.cpp).
target_sources(moewb_engine PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/cuda_parameters.cpp
  ${CMAKE_CURRENT_LIST_DIR}/cuda_moe.cpp
  ${CMAKE_CURRENT_LIST_DIR}/cuda_ep.cpp
  ${CMAKE_CURRENT_LIST_DIR}/cuda_ep_kernels.cu
  ${CMAKE_CURRENT_LIST_DIR}/cuda_global_router.cu
  ${CMAKE_CURRENT_LIST_DIR}/cuda_mixer.cpp
  ${CMAKE_CURRENT_LIST_DIR}/cuda_loss.cpp
  ${CMAKE_CURRENT_LIST_DIR}/cuda_optimizer.cpp
  ${CMAKE_CURRENT_LIST_DIR}/device_timeline.cpp
  ${CMAKE_CURRENT_LIST_DIR}/device_memory_reporter.cpp
  ${CMAKE_CURRENT_LIST_DIR}/cuda_model.cpp
  ${CMAKE_CURRENT_LIST_DIR}/cuda_backend.cpp)
