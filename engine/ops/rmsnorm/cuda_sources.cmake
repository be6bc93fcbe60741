# RMSNorm forward / backward on the GPU, ops/rmsnorm/rmsnorm_cuda.h.
target_sources(moewb_engine_ops PRIVATE ${CMAKE_CURRENT_LIST_DIR}/rmsnorm_cuda.cu
                                    ${CMAKE_CURRENT_LIST_DIR}/rmsnorm_cuda.cpp)
