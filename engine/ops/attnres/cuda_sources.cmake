# AttnRes on the GPU (ops/attnres/attnres_cuda.h) and its Block AttnRes bookkeeping
# (ops/attnres/attnres_state_cuda.h).
target_sources(moewb_engine PRIVATE ${CMAKE_CURRENT_LIST_DIR}/attnres_cuda.cu
                                    ${CMAKE_CURRENT_LIST_DIR}/attnres_cuda.cpp
                                    ${CMAKE_CURRENT_LIST_DIR}/attnres_state_cuda.cpp)
