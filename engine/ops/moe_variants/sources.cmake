# MoE variants (ENGINE-MATH §5.2-5.8): capacity / token dropping, the aux-loss-free expert bias,
# the dense shared-expert FFN, and MoeOptions with the layer's parameter list.
target_sources(moewb_engine PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/capacity_ref.cpp
  ${CMAKE_CURRENT_LIST_DIR}/expert_bias.cpp
  ${CMAKE_CURRENT_LIST_DIR}/dense_ffn_ref.cpp
  ${CMAKE_CURRENT_LIST_DIR}/moe_options.cpp)
