# GPU ranks of a parallel run (engine/src/cuda_parallel/): FSDP shards on the device and the GPU
# rank trainer over virtual-GPU or NCCL communicators. CUDA builds only.
target_sources(moewb_engine PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/cuda_fsdp_shards.cpp
  ${CMAKE_CURRENT_LIST_DIR}/cuda_rank_trainer.cpp
  ${CMAKE_CURRENT_LIST_DIR}/device_comms.cpp)
