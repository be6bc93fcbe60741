# Causal softmax attention (mixer 'A') on the GPU, ops/attention/attention_cuda.h.
target_sources(moewb_engine_ops PRIVATE ${CMAKE_CURRENT_LIST_DIR}/attention_cuda.cpp
                                    ${CMAKE_CURRENT_LIST_DIR}/attention_cuda.cu)
