# MoE variants (ENGINE-MATH §5.2-5.8): capacity / token dropping and the dense shared-expert FFN.
# The aux-loss-free bias and MoeOptions live in model/moe/.
target_sources(moewb_engine_ops PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/capacity_ref.cpp
  ${CMAKE_CURRENT_LIST_DIR}/dense_ffn_ref.cpp)
