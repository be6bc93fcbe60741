// The switch of the grouped experts' wgmma stages (experts_cuda.h, grouped_gemm_wgmma_cuda.cuh):
// on a compute capability 9.0 device, with the sm_90a object in the build, forward gate+up,
// forward down (plain or row-weighted), the folded combine's dRowWeight recompute ("fc" stages),
// the dgrad stages dh and dx, and the three weight gradients run the wgmma mainloop; other
// devices and builds run the mma.sync path. Results differ from v2's by rounding inside a
// 16-deep K slice only (deterministic run to run). The environment variable MOEWB_GROUPED_WGMMA
// (read once per process): 0 no wgmma, fc the fc stages only, dgrad the fc and dgrad stages, 1 or
// unset all of them (docs/GPU.md).
#pragma once

namespace moewb::engine::cuda {

enum class ExpertsWgmmaMode {
  kEnvironment,  // MOEWB_GROUPED_WGMMA decides (the default)
  kOn,           // every wgmma stage wherever expertsWgmmaSupported(), whatever the environment
  kOff,          // mma.sync everywhere
};

// Process-wide choice for every later experts launch (tests and A/B benchmarks; not meant to
// change while launches are being issued from other threads, though it is race-free).
void setExpertsWgmmaMode(ExpertsWgmmaMode mode);

// True when this build contains the sm_90a kernels and the current device (compute capability
// 9.0) loads them. Queries the device once per device ordinal; false on any CUDA error.
bool expertsWgmmaSupported();

}  // namespace moewb::engine::cuda
