# Gated sparse attention (ENGINE-MATH §3): selection helpers, lightning indexer, core, layer.
target_sources(moewb_engine_ops PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/selection_ref.cpp
  ${CMAKE_CURRENT_LIST_DIR}/indexer_ref.cpp
  ${CMAKE_CURRENT_LIST_DIR}/sparse_attention_core_ref.cpp
  ${CMAKE_CURRENT_LIST_DIR}/sparse_attention_ref.cpp)
