# CUDA dispatch plan and permute (gather / per-token row sum).
target_sources(moewb_engine_ops PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/permute_cuda.cpp
  ${CMAKE_CURRENT_LIST_DIR}/permute_cuda.cu)
