# Linear layer on the GPU (cuBLAS wrappers), ops/linear/linear_cuda.h.
target_sources(moewb_engine_ops PRIVATE ${CMAKE_CURRENT_LIST_DIR}/linear_cuda.cpp)
