# Fused AdamW, global gradient norm and clipping on the GPU, ops/adamw/adamw_cuda.h, and their
# multi-tensor launches, ops/adamw/multi_tensor_adamw.h.
target_sources(moewb_engine_ops PRIVATE ${CMAKE_CURRENT_LIST_DIR}/adamw_cuda.cu
                                    ${CMAKE_CURRENT_LIST_DIR}/adamw_cuda.cpp
                                    ${CMAKE_CURRENT_LIST_DIR}/multi_tensor_plan.cpp)
