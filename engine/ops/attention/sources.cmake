# The plain reference of ops/attention/attention.h (always built, the ground truth).
target_sources(moewb_engine_ops PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/attention_ref.cpp)
