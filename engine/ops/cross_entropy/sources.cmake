# The plain reference of ops/cross_entropy/cross_entropy.h (always built, the ground truth).
target_sources(moewb_engine_ops PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/cross_entropy_ref.cpp)
