# The plain reference of ops/permute/permute.h (always built, the ground truth).
target_sources(moewb_engine_ops PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/permute_ref.cpp)
