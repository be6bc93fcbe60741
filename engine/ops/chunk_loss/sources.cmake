# Chunk Loss (token-chunked fused LM-head loss, ENGINE-MATH §6.1): the plain reference.
target_sources(moewb_engine_ops PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/chunk_loss_ref.cpp)
