# LoRA merge and gradient conversion, the reference (ops/lora/lora.h; ENGINE-MATH §5.10).
target_sources(moewb_engine_ops PRIVATE ${CMAKE_CURRENT_LIST_DIR}/lora_ref.cpp)
