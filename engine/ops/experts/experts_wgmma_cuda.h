// The switch of the grouped experts' wgmma stages (experts_cuda.h, grouped_gemm_wgmma_cuda.cuh):
// on a compute capability 9.0 device, with the sm_90a object in the build, forward gate+up,
// forward down (plain or row-weighted), the folded combine's dRowWeight recompute ("fc" stages),
// the dgrad stages dh and dx, and the three weight gradients run the wgmma mainloop; other
// devices and builds run the mma.sync path. Results differ from v2's by rounding inside a
// 16-deep K slice only (deterministic run to run). The environment variable MOEWB_GROUPED_WGMMA
// (read once per process): 0 no wgmma, fc the fc stages only, dgrad the fc and dgrad stages, 1 or
// unset all of them (docs/GPU.md). Which kernel a wgmma stage runs: setExpertsWarpSpecialized.
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

// Round 5 (grouped_gemm_ws_cuda.cuh, bench/scratch/grouped_gemm_05.md): among the wgmma stages,
// forward down (plain and row-weighted) and dx run the warp-specialized persistent kernel with B
// loaded by TMA (the sweep's tma_rel0: 1.23-1.30x on fc2, 1.27x on dx at the H200 benchmark
// shape); gate+up, dRowWeight, dh and the weight gradients stay on round 2. Outputs are bitwise
// equal to round 2's. Default on (kExpertsWarpSpecializedDefault); when off, or when the driver
// has no cuTensorMapEncodeTiled or rejects a map, those launches run round 2.
constexpr bool kExpertsWarpSpecializedDefault = true;

// Process-wide choice for every later wgmma down / dx launch (tests and A/B benchmarks; race-free
// but not meant to change while launches are being issued from other threads).
void setExpertsWarpSpecialized(bool on);

// The current choice (setExpertsWarpSpecialized, else kExpertsWarpSpecializedDefault).
bool expertsWarpSpecialized();

// Round 7 (grouped_gemm_ws_pingpong_cuda.cuh, bench/scratch/grouped_gemm_07.md): forward gate+up
// (GLU epilogue) and dh (GLU-backward epilogue) on the ping-pong warp-specialized kernel, whose
// outputs are bitwise equal to round 2's. Default off (kExpertsGluPingPongDefault) until the H200
// measurement says otherwise; the environment variable MOEWB_GROUPED_WS_GLU=1 (read once per
// process) turns it on. When the driver has no cuTensorMapEncodeTiled or rejects a map, those
// launches run round 2.
constexpr bool kExpertsGluPingPongDefault = false;

// Process-wide choice for every later wgmma gate+up / dh launch (tests and A/B benchmarks;
// race-free but not meant to change while launches are being issued from other threads).
void setExpertsGluPingPong(bool on);

// The current choice (setExpertsGluPingPong, else MOEWB_GROUPED_WS_GLU=1, else
// kExpertsGluPingPongDefault).
bool expertsGluPingPong();

// Round 6 (grouped_gemm_ws_wgrad_cuda.cuh, bench/scratch/grouped_gemm_06.md): the three weight
// gradients (dDown, dGate, dUp) on the warp-specialized persistent kernel, round 2's per-element
// K order (bitwise equality with round 2 expected; ExpertsWgmmaCudaTest.WsWgradEqualsRound2Bitwise
// checks it). Default off (kExpertsWsWgradDefault) until the H200 measurement says otherwise; the
// environment variable MOEWB_GROUPED_WS_WGRAD=1 (read once per process) turns it on.
constexpr bool kExpertsWsWgradDefault = false;

// Process-wide choice for every later wgmma weight-gradient launch (tests and A/B benchmarks;
// race-free but not meant to change while launches are being issued from other threads).
void setExpertsWsWgrad(bool on);

// The current choice (setExpertsWsWgrad, else MOEWB_GROUPED_WS_WGRAD=1, else
// kExpertsWsWgradDefault).
bool expertsWsWgrad();

// True when this build contains the sm_90a kernels and the current device (compute capability
// 9.0) loads them. Queries the device once per device ordinal; false on any CUDA error.
bool expertsWgmmaSupported();

}  // namespace moewb::engine::cuda
