# The plain reference of ops/rmsnorm/rmsnorm.h (always built, the ground truth).
target_sources(moewb_engine_ops PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/rmsnorm_ref.cpp)
