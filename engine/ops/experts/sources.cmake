# The plain reference of ops/experts/experts.h (always built, the ground truth).
target_sources(moewb_engine_ops PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/experts_ref.cpp)
