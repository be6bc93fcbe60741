# Chunk Loss (token-chunked fused LM-head loss) on the GPU, ops/chunk_loss/chunk_loss_cuda.h; its
# kernels are the strip kernels of ops/cce/cce_cuda.cu.
target_sources(moewb_engine_ops PRIVATE ${CMAKE_CURRENT_LIST_DIR}/chunk_loss_cuda.cpp)
