# KDA (Kimi Delta Attention) core: naive recurrence (the oracle), chunked WY/UT form with its
# backward, gates / short conv / L2 norm (kda.h, kda_gate.h). The mixer layer is
# model/layers/kda_layer.*.
target_sources(moewb_engine_ops PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/kda_ref.cpp
  ${CMAKE_CURRENT_LIST_DIR}/kda_cpu.cpp
  ${CMAKE_CURRENT_LIST_DIR}/kda_gate.cpp)
