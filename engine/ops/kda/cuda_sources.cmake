# KDA on the GPU (kda_cuda.h): the chunked core (kda_chunk_cuda.*), the gate / L2 norm
# (kda_gate_cuda.*) and the short conv (kda_conv_cuda.cu). Kernels in .cu, host code that
# allocates device tensors in .cpp.
target_sources(moewb_engine_ops PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/kda_chunk_cuda.cu
  ${CMAKE_CURRENT_LIST_DIR}/kda_chunk_cuda.cpp
  ${CMAKE_CURRENT_LIST_DIR}/kda_conv_cuda.cu
  ${CMAKE_CURRENT_LIST_DIR}/kda_gate_cuda.cu
  ${CMAKE_CURRENT_LIST_DIR}/kda_gate_cuda.cpp)
