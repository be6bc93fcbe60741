# CUDA dispatch plan and permute (gather / per-token row sum), and the capacity mask built on that
# plan (ops/moe_variants/capacity_cuda.*; listed here because moe_variants/cuda_sources.cmake
# belongs to the dense FFN).
target_sources(moewb_engine PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/permute_cuda.cpp
  ${CMAKE_CURRENT_LIST_DIR}/permute_cuda.cu
  ${CMAKE_CURRENT_LIST_DIR}/../moe_variants/capacity_cuda.cpp
  ${CMAKE_CURRENT_LIST_DIR}/../moe_variants/capacity_cuda.cu)
