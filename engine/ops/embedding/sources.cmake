# The plain reference of ops/embedding/embedding.h (always built, the ground truth).
target_sources(moewb_engine_ops PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/embedding_ref.cpp)
