# Embedding gather / scatter-add on the GPU, ops/embedding/embedding_cuda.h.
target_sources(moewb_engine_ops PRIVATE ${CMAKE_CURRENT_LIST_DIR}/embedding_cuda.cu)
