# The plain reference of ops/combine/combine.h (always built, the ground truth).
target_sources(moewb_engine_ops PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/combine_ref.cpp)
