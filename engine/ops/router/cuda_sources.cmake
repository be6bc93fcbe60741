# CUDA router (softmax / sigmoid top-k, bias, group limit), its backward and the router losses.
target_sources(moewb_engine_ops PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/router_cuda.cpp
  ${CMAKE_CURRENT_LIST_DIR}/router_cuda.cu)
