# Dense (shared-expert) FFN on the GPU and the GLU activation launchers it uses (those live in
# ops/experts/ beside glu_activation.h, so that expert kernels can include the .cuh).
target_sources(moewb_engine PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/dense_ffn_cuda.cpp
  ${CMAKE_CURRENT_LIST_DIR}/dense_ffn_cuda.cu
  ${CMAKE_CURRENT_LIST_DIR}/../experts/glu_activation_cuda.cu)
