# Parallelism on in-process ranks (engine/src/parallel/): config rules, expert-parallel dispatch,
# global router statistics, FSDP sharding and the multi-rank trainer.
target_sources(moewb_engine PRIVATE
  ${CMAKE_CURRENT_SOURCE_DIR}/src/parallel/parallel_config.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/src/parallel/ep_dispatch.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/src/parallel/global_router_stats.cpp)
target_sources(moewb_engine PRIVATE
  ${CMAKE_CURRENT_SOURCE_DIR}/src/parallel/fsdp_shards.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/src/parallel/rank_common.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/src/parallel/stuck_rank_watchdog.cpp
  ${CMAKE_CURRENT_SOURCE_DIR}/src/parallel/rank_trainer.cpp)
target_sources(moewb_engine PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/src/parallel/parallel_trainer.cpp
                                    ${CMAKE_CURRENT_SOURCE_DIR}/src/parallel/distributed_trainer.cpp)
