// The switch of the grouped experts' wgmma stages (experts_cuda.h, grouped_gemm_wgmma_cuda.cuh):
// on a compute capability 9.0 device, with the sm_90a object in the build, forward gate+up,
// forward down (plain or row-weighted), the folded combine's dRowWeight recompute ("fc" stages),
// the dgrad stages dh and dx, and the three weight gradients run the wgmma mainloop; other
// devices and builds run the mma.sync path. Results differ from v2's by rounding inside a
// 16-deep K slice only (deterministic run to run). The environment variable MOEWB_GROUPED_WGMMA
// (read once per process): 0 no wgmma, fc the fc stages only, dgrad the fc and dgrad stages, 1 or
// unset all of them (docs/GPU.md). Which kernel a wgmma stage runs: setExpertsWarpSpecialized.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define MOEWB_EXPERTS_HOST_DEVICE __host__ __device__
#else
#define MOEWB_EXPERTS_HOST_DEVICE
#endif

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
// shape); gate+up, dRowWeight and dh stay on round 2 (the weight gradients: round 6, below,
// expertsWsWgrad). Outputs are bitwise equal to round 2's. Default on
// (kExpertsWarpSpecializedDefault; MOEWB_GROUPED_WS=0 / 1 forces it); when off, or when the
// driver has no cuTensorMapEncodeTiled or rejects a map, those launches run round 2.
constexpr bool kExpertsWarpSpecializedDefault = true;

// Process-wide choice for every later wgmma down / dx launch (tests and A/B benchmarks; race-free
// but not meant to change while launches are being issued from other threads).
void setExpertsWarpSpecialized(bool on);

// The current choice (setExpertsWarpSpecialized, else MOEWB_GROUPED_WS, else the default).
bool expertsWarpSpecialized();

// Round 7 (grouped_gemm_ws_pingpong_cuda.cuh, bench/scratch/grouped_gemm_07.md): forward gate+up
// (GLU epilogue) and dh (GLU-backward epilogue) on the ping-pong warp-specialized kernel, whose
// outputs are bitwise equal to round 2's. Default off (kExpertsGluPingPongDefault): measured
// slower on the H200 (dh 1.85 -> 3.56 ms; MoE layer fwd+bwd 15.15 -> 15.96 ms). The environment
// variable MOEWB_GROUPED_WS_GLU (read once per process) forces it: 1 on, 0 off. When the driver
// has no cuTensorMapEncodeTiled or rejects a map, those launches run round 2.
constexpr bool kExpertsGluPingPongDefault = false;

// Process-wide choice for every later wgmma gate+up / dh launch (tests and A/B benchmarks;
// race-free but not meant to change while launches are being issued from other threads).
void setExpertsGluPingPong(bool on);

// The current choice (setExpertsGluPingPong, else MOEWB_GROUPED_WS_GLU=1 / 0, else
// kExpertsGluPingPongDefault).
bool expertsGluPingPong();

// Round 9 (glu_split_cuda.cuh, bench/scratch/grouped_gemm_09.md), the GLU split: forward gate+up
// and dh on round 5's warp-specialized kernel with plain epilogues (gatePre / upPre; dh in fp32
// into a [rows, F] workspace) and the GLU forward / backward as elementwise passes. dGate / dUp
// are round 2's bits; hidden comes from the bf16 gatePre / upPre (round 2: from the fp32
// accumulators), so it and what follows from it differ in the last bits. Takes precedence over
// expertsGluPingPong. Default on (kExpertsGluSplitDefault; H200, the sixteenth session: MoE layer
// fwd+bwd 14.10 -> 13.41 ms at D = 2048, 7.31 -> 7.01 ms at D = 1024; h200.toml 233.3 -> 226.6 ms
// a step; +0.5 GB of transient workspace at those sizes); MOEWB_GROUPED_GLU_SPLIT=1 / 0 forces it
// (read once per process). When a TMA map cannot be encoded, or F % 8 != 0, round 7 / round 2.
constexpr bool kExpertsGluSplitDefault = true;

// Process-wide choice for every later wgmma gate+up / dh launch (tests and A/B benchmarks;
// race-free but not meant to change while launches are being issued from other threads).
void setExpertsGluSplit(bool on);

// The current choice (setExpertsGluSplit, else MOEWB_GROUPED_GLU_SPLIT, else the default).
bool expertsGluSplit();

// Round 6 (grouped_gemm_ws_wgrad_cuda.cuh, bench/scratch/grouped_gemm_06.md): the three weight
// gradients (dDown, dGate, dUp) on the warp-specialized persistent kernel, round 2's per-element
// K order (bitwise equal to round 2; ExpertsWgmmaCudaTest.WsWgradEqualsRound2Bitwise checks it).
// Default on (kExpertsWsWgradDefault; H200: 1.86-1.95 -> 1.30-1.48 ms a gradient, MoE layer
// fwd+bwd 15.15 -> 13.47 ms balanced). The environment variable MOEWB_GROUPED_WS_WGRAD (read once
// per process) forces it: 1 on, 0 off (round 2, for A/B runs).
constexpr bool kExpertsWsWgradDefault = true;

// Process-wide choice for every later wgmma weight-gradient launch (tests and A/B benchmarks;
// race-free but not meant to change while launches are being issued from other threads).
void setExpertsWsWgrad(bool on);

// The current choice (setExpertsWsWgrad, else MOEWB_GROUPED_WS_WGRAD=1 / 0, else
// kExpertsWsWgradDefault).
bool expertsWsWgrad();

// How round 6 hands tiles to its persistent CTAs. The results are the same bits either way (a
// tile's sum does not depend on the CTA that computes it); only the time differs. H200, ms per
// gradient down / gate / up (grouped_gemm_06.md): balanced static 1.319 / 1.318 / 1.351, dynamic
// 1.300 / 1.459 / 1.384; skewed (max / mean rows 8) static 1.457 / 1.473 / 1.479, dynamic
// 1.372 / 1.395 / 1.324. So the engine takes the dynamic walk exactly when the routing is skewed,
// decided on the device from the offsets (the host does not know the counts without a sync).
enum class ExpertsWgradWalk {
  kBySkew,   // dynamic when expertsWgradSkewed, static otherwise (the default)
  kStatic,   // CTA b takes tiles b, b + #CTAs, ...
  kDynamic,  // after its first tile, a CTA takes the next tile from an atomic ticket
};

// Process-wide choice for every later round-6 launch (tests and A/B benchmarks; race-free but not
// meant to change while launches are being issued from other threads). The environment variable
// MOEWB_GROUPED_WGRAD_WALK (read once per process: skew, static or dynamic) sets the default.
void setExpertsWgradWalk(ExpertsWgradWalk walk);

// The current choice (setExpertsWgradWalk, else MOEWB_GROUPED_WGRAD_WALK, else kBySkew).
ExpertsWgradWalk expertsWgradWalk();

// The dynamic walk pays one atomic ticket per tile; it wins once the hottest expert's K-long
// tiles would pile up on the static walk's first CTAs. The figures above put the crossover
// between max / mean 1.1 (static wins balanced gate / up) and 8 (dynamic wins all three).
constexpr int64_t kExpertsWgradSkewMinRatio = 2;

// True when the routing counts as skewed for kBySkew: the most rows of one expert `mostRows`
// exceed kExpertsWgradSkewMinRatio times the mean (`rows` over `experts`). Host and device.
MOEWB_EXPERTS_HOST_DEVICE constexpr bool expertsWgradSkewed(int64_t mostRows, int64_t rows,
                                                            int64_t experts) {
  return mostRows * experts > kExpertsWgradSkewMinRatio * rows;
}

// True when this build contains the sm_90a kernels and the current device (compute capability
// 9.0) loads them. Queries the device once per device ordinal; false on any CUDA error.
bool expertsWgmmaSupported();

}  // namespace moewb::engine::cuda
