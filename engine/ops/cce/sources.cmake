# CCE (cut cross-entropy, vocabulary-tiled fused LM-head loss), ENGINE-MATH §6.2.
target_sources(moewb_engine_ops PRIVATE ${CMAKE_CURRENT_LIST_DIR}/cce_ref.cpp)
