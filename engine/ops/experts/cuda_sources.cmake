# CUDA grouped GLU experts (bf16 tensor-core grouped GEMMs over variable-size expert groups) and
# the GLU activation launchers the experts and the dense FFN share.
target_sources(moewb_engine_ops PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/experts_cuda.cpp
  ${CMAKE_CURRENT_LIST_DIR}/experts_cuda.cu
  ${CMAKE_CURRENT_LIST_DIR}/experts_mma_cuda.cu
  ${CMAKE_CURRENT_LIST_DIR}/glu_activation_cuda.cu)
