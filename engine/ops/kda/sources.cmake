# KDA (Kimi Delta Attention) op family: naive recurrence (the oracle), chunked WY/UT form with its
# backward, gates / short conv / L2 norm, and the whole mixer layer (see kda.h, kda_layer.h).
target_sources(moewb_engine PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/kda_naive.cpp
  ${CMAKE_CURRENT_LIST_DIR}/kda_chunk.cpp
  ${CMAKE_CURRENT_LIST_DIR}/kda_gate.cpp
  ${CMAKE_CURRENT_LIST_DIR}/kda_layer.cpp)
