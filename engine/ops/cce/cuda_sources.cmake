# CCE (vocabulary-tiled fused LM-head loss) on the GPU, ops/cce/cce_cuda.h; its strip kernels are
# shared with the GPU chunk loss.
target_sources(moewb_engine_ops PRIVATE ${CMAKE_CURRENT_LIST_DIR}/cce_cuda.cu
                                    ${CMAKE_CURRENT_LIST_DIR}/cce_filter_cuda.cu
                                    ${CMAKE_CURRENT_LIST_DIR}/cce_cuda.cpp)
