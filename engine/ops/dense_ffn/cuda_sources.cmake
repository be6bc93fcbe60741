# The dense shared-expert FFN on the GPU (its GLU kernels come with ops/experts).
target_sources(moewb_engine_ops PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/dense_ffn_cuda.cpp)
