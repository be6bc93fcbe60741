# Gated sparse attention on the GPU, ops/sparse_attention/sparse_attention_cuda.h (kernels in the
# .cu files, allocating entry points in the .cpp files); the dense warm-up stage on the flash
# kernels of ops/attention (dense_stage_cuda.h).
target_sources(moewb_engine_ops PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/indexer_cuda.cu
  ${CMAKE_CURRENT_LIST_DIR}/indexer_cuda.cpp
  ${CMAKE_CURRENT_LIST_DIR}/selection_cuda.cu
  ${CMAKE_CURRENT_LIST_DIR}/selection_cuda.cpp
  ${CMAKE_CURRENT_LIST_DIR}/sparse_attention_core_cuda.cu
  ${CMAKE_CURRENT_LIST_DIR}/sparse_attention_core_cuda.cpp
  ${CMAKE_CURRENT_LIST_DIR}/sparse_attention_layer_cuda.cpp
  ${CMAKE_CURRENT_LIST_DIR}/dense_stage_cuda.cu)
