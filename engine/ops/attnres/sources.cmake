# AttnRes (attention residuals, ENGINE-MATH §4): the plain reference.
target_sources(moewb_engine_ops PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/attnres_ref.cpp)
