# The dense GLU FFN of the shared experts (ENGINE-MATH §5.6).
target_sources(moewb_engine_ops PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/dense_ffn_ref.cpp)
