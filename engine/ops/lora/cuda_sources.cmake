# LoRA merge and gradient conversion on the GPU (ops/lora/lora_cuda.h).
target_sources(moewb_engine_ops PRIVATE ${CMAKE_CURRENT_LIST_DIR}/lora_cuda.cpp)
