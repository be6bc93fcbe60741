# The CUDA backend's runtime (device tensors, caching allocator, streams, cuBLAS GEMM, NVTX) and,
# through engine/ops/<op>/cuda_sources.cmake, every op's <op>_cuda.cu. Only with MOEWB_CUDA=ON.
target_sources(moewb_engine PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/cuda_check.cpp
  ${CMAKE_CURRENT_LIST_DIR}/caching_allocator.cpp
  ${CMAKE_CURRENT_LIST_DIR}/cuda_context.cpp
  ${CMAKE_CURRENT_LIST_DIR}/elementwise.cu
  ${CMAKE_CURRENT_LIST_DIR}/transfer.cpp
  ${CMAKE_CURRENT_LIST_DIR}/gemm.cpp)
target_link_libraries(moewb_engine PUBLIC CUDA::cudart_static CUDA::cublas CUDA::cublasLt CUDA::nvtx3)
target_compile_definitions(moewb_engine PUBLIC MOEWB_HAVE_CUDA=1)
target_compile_options(moewb_engine PRIVATE
  $<$<COMPILE_LANGUAGE:CUDA>:--extended-lambda --expt-relaxed-constexpr -lineinfo>)
set_target_properties(moewb_engine PROPERTIES CUDA_SEPARABLE_COMPILATION OFF
                                              CUDA_RESOLVE_DEVICE_SYMBOLS ON)
