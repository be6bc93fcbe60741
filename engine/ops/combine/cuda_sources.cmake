# CUDA weighted combine, its backward and the [N, k] <-> [R] maps.
target_sources(moewb_engine_ops PRIVATE ${CMAKE_CURRENT_LIST_DIR}/combine_cuda.cu)
