# Communicators (engine/src/comm/): the Communicator interface and the in-process ranks.
target_sources(moewb_engine PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/src/comm/communicator.cpp
                                    ${CMAKE_CURRENT_SOURCE_DIR}/src/comm/in_process_comm.cpp)
