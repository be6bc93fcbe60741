# The plain reference of ops/adamw/adamw.h (always built, the ground truth).
target_sources(moewb_engine_ops PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/adamw_ref.cpp)
