# AttnRes on the GPU (ops/attnres/attnres_cuda.h).
target_sources(moewb_engine_ops PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/attnres_cuda.cu
  ${CMAKE_CURRENT_LIST_DIR}/attnres_cuda.cpp)
