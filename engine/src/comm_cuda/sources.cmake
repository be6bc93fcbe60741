# GPU communicators (engine/src/comm_cuda/, MOEWB_CUDA only): virtual ranks on one GPU and NCCL.
# NCCL: the header comes with the CUDA toolkit's include folder (/usr/local/cuda/include/nccl.h);
# the library lives in the toolkit (/usr/local/cuda/lib64) on the build machine and in the system
# folder (/usr/lib/x86_64-linux-gnu) on the GPU machines. moewb_nccl carries it to the engine and
# to programs that call NCCL themselves (bench/all_to_all_cuda_bench).
find_path(MOEWB_NCCL_INCLUDE_DIR nccl.h
          HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/include /usr/include)
find_library(MOEWB_NCCL_LIBRARY NAMES nccl libnccl.so.2
             HINTS ${CUDAToolkit_LIBRARY_DIR} /usr/local/cuda/lib64 /usr/lib/x86_64-linux-gnu)
if(NOT MOEWB_NCCL_INCLUDE_DIR OR NOT MOEWB_NCCL_LIBRARY)
  message(FATAL_ERROR "MOEWB_CUDA=ON needs NCCL (nccl.h and libnccl.so): header "
                      "'${MOEWB_NCCL_INCLUDE_DIR}', library '${MOEWB_NCCL_LIBRARY}'. Install NCCL "
                      "(libnccl-dev) or set MOEWB_NCCL_INCLUDE_DIR and MOEWB_NCCL_LIBRARY.")
endif()
message(STATUS "NCCL: ${MOEWB_NCCL_LIBRARY}")
if(NOT TARGET moewb_nccl)
  add_library(moewb_nccl INTERFACE)
  target_include_directories(moewb_nccl SYSTEM INTERFACE ${MOEWB_NCCL_INCLUDE_DIR})
  target_link_libraries(moewb_nccl INTERFACE ${MOEWB_NCCL_LIBRARY})
endif()
target_link_libraries(moewb_engine PRIVATE moewb_nccl)
target_sources(moewb_engine PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/stream_poll.cpp
  ${CMAKE_CURRENT_LIST_DIR}/peer_reduce.cu
  ${CMAKE_CURRENT_LIST_DIR}/virtual_gpu_comm.cpp
  ${CMAKE_CURRENT_LIST_DIR}/nccl_check.cpp
  ${CMAKE_CURRENT_LIST_DIR}/nccl_comm.cpp)
