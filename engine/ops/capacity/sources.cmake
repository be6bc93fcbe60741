# Expert capacity and token dropping (ENGINE-MATH §5.5). The aux-loss-free bias and MoeOptions
# live in model/moe/.
target_sources(moewb_engine_ops PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/capacity_ref.cpp)
