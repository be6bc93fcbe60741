# CUDA grouped GLU experts (bf16 tensor-core grouped GEMMs over variable-size expert groups) and
# the GLU activation launchers the experts and the dense FFN share.
target_sources(moewb_engine_ops PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/experts_cuda.cpp
  ${CMAKE_CURRENT_LIST_DIR}/experts_cuda.cu
  ${CMAKE_CURRENT_LIST_DIR}/experts_mma_cuda.cu
  ${CMAKE_CURRENT_LIST_DIR}/glu_activation_cuda.cu)

# The wgmma stages (grouped_gemm_wgmma_cuda.cuh) need sm_90a, which runs on compute capability 9.0
# only: their one translation unit is an object library of its own, built for exactly that
# architecture (CUDA_ARCHITECTURES OFF: none of the engine's arch flags), whenever the engine
# targets 90 and nvcc knows sm_90a (12.0+). experts_cuda.cpp and experts_mma_cuda.cu then see
# MOEWB_EXPERTS_WGMMA=1 and pick the stages at run time (experts_wgmma_cuda.h).
if(CMAKE_CUDA_ARCHITECTURES MATCHES "(^|;)90" AND
   CMAKE_CUDA_COMPILER_VERSION VERSION_GREATER_EQUAL 12.0)
  add_library(moewb_experts_wgmma OBJECT ${CMAKE_CURRENT_LIST_DIR}/experts_wgmma_cuda.cu)
  target_include_directories(moewb_experts_wgmma PRIVATE ${PROJECT_SOURCE_DIR}/engine)
  target_link_libraries(moewb_experts_wgmma PRIVATE moewb_engine_api moewb_engine_runtime)
  set_target_properties(moewb_experts_wgmma PROPERTIES CUDA_ARCHITECTURES OFF
                                                       POSITION_INDEPENDENT_CODE ON)
  target_compile_options(moewb_experts_wgmma PRIVATE
    --extended-lambda --expt-relaxed-constexpr -lineinfo -gencode=arch=compute_90a,code=sm_90a)
  moewb_strict(moewb_experts_wgmma)
  target_sources(moewb_engine_ops PRIVATE $<TARGET_OBJECTS:moewb_experts_wgmma>)
  set_property(SOURCE ${CMAKE_CURRENT_LIST_DIR}/experts_cuda.cpp
                      ${CMAKE_CURRENT_LIST_DIR}/experts_mma_cuda.cu
               APPEND PROPERTY COMPILE_DEFINITIONS MOEWB_EXPERTS_WGMMA=1)
endif()
