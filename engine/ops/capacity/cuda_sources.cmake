# The capacity mask (on the permute plan) on the GPU.
target_sources(moewb_engine_ops PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/capacity_cuda.cpp
  ${CMAKE_CURRENT_LIST_DIR}/capacity_cuda.cu)
