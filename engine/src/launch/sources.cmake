# Launch (engine/src/launch/): the TCP store where the ranks of a multi-process run meet, their
# liveness, and the rendezvous from torchrun-style or Slurm environment variables.
target_sources(moewb_engine PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/src/launch/store_protocol.cpp
                                    ${CMAKE_CURRENT_SOURCE_DIR}/src/launch/tcp_store_server.cpp
                                    ${CMAKE_CURRENT_SOURCE_DIR}/src/launch/tcp_store_client.cpp
                                    ${CMAKE_CURRENT_SOURCE_DIR}/src/launch/peer_description.cpp
                                    ${CMAKE_CURRENT_SOURCE_DIR}/src/launch/launch_env.cpp
                                    ${CMAKE_CURRENT_SOURCE_DIR}/src/launch/rendezvous.cpp)
