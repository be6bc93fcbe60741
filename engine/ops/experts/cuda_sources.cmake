# CUDA grouped GLU experts (bf16 tensor-core grouped GEMMs over variable-size expert groups).
# glu_activation_cuda.cu is compiled from ops/moe_variants/cuda_sources.cmake (dense FFN).
target_sources(moewb_engine PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/experts_cuda.cpp
  ${CMAKE_CURRENT_LIST_DIR}/experts_cuda.cu)
