# Capacity mask (on the permute plan) and the dense shared-expert FFN on the GPU.
target_sources(moewb_engine_ops PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/capacity_cuda.cpp
  ${CMAKE_CURRENT_LIST_DIR}/capacity_cuda.cu
  ${CMAKE_CURRENT_LIST_DIR}/dense_ffn_cuda.cpp
  ${CMAKE_CURRENT_LIST_DIR}/dense_ffn_cuda.cu)
