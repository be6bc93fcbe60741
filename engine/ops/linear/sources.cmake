# The plain reference of ops/linear/linear.h (always built, the ground truth).
target_sources(moewb_engine_ops PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/linear_ref.cpp)
