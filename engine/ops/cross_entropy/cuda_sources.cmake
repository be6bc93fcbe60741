# Dense softmax cross-entropy on the GPU, ops/cross_entropy/cross_entropy_cuda.h.
target_sources(moewb_engine_ops PRIVATE ${CMAKE_CURRENT_LIST_DIR}/cross_entropy_cuda.cu)
