# Multimodal patch embedding on the GPU (ops/patchify/patch_embed_cuda.h).
target_sources(moewb_engine_ops PRIVATE ${CMAKE_CURRENT_LIST_DIR}/patch_embed_cuda.cu)
