# Causal softmax attention (mixer 'A') on the GPU, ops/attention/attention_cuda.h: the flash
# kernels (flash_attention_cuda.cuh) and the cuBLAS fallback for other head dims.
target_sources(moewb_engine_ops PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/attention_cuda.cpp
  ${CMAKE_CURRENT_LIST_DIR}/attention_cuda.cu
  ${CMAKE_CURRENT_LIST_DIR}/flash_attention_cuda.cu)
