# The plain reference of ops/patchify/patchify.h (always built, the ground truth).
target_sources(moewb_engine_ops PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/patchify_ref.cpp)
