# Fused AdamW, global gradient norm and clipping on the GPU, ops/adamw/adamw_cuda.h.
target_sources(moewb_engine PRIVATE ${CMAKE_CURRENT_LIST_DIR}/adamw_cuda.cu
                                    ${CMAKE_CURRENT_LIST_DIR}/adamw_cuda.cpp)
