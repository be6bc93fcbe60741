# Chunk Loss (token-chunked fused LM-head loss, ENGINE-MATH §6.1) and AttnRes (attention
# residuals, §4; engine/ops/attnres/ has no hook of its own in engine/CMakeLists.txt).
target_sources(moewb_engine PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/chunk_loss_ref.cpp
  ${CMAKE_CURRENT_LIST_DIR}/../attnres/attnres_ref.cpp
  ${CMAKE_CURRENT_LIST_DIR}/../attnres/attnres_state.cpp)
