// Grouped expert GEMMs, round 5 (issue 14; bench/scratch/grouped_gemm_05.md): warp-specialized
// persistent wgmma kernels (sm_90a only) for the forward-shaped stages: forward gate+up with the
// GLU epilogue (fc1), forward down plain and row-weighted (fc2), dh (+ GLU backward) and dx.
// Same inputs, outputs and numerics contract as round 2 (grouped_gemm_wgmma_cuda.cuh); a
// different CTA organisation:
//  - 384 threads = 3 warpgroups. Warpgroup 0 is the producer (setmaxnreg.dec to kProducerRegs):
//    its 128 threads copy the A tile (gathered token rows) and the B tile (weights) of each
//    64-deep K step with cp.async into a kStages-deep shared-memory ring, then each thread's
//    cp.async.mbarrier.arrive.noinc arrives on the stage's full barrier (128 arrivals) once its
//    copies have landed. Warpgroups 1 and 2 are consumers (setmaxnreg.inc to kConsumerRegs):
//    each waits on the full barrier, issues 4 wgmma.m64n256k16 (its 64 rows of the 128 x 256 CTA
//    tile, fp32 accumulators 128 per thread), keeps that batch in flight (wait_group 1) and
//    releases the previous stage (one arrival per consumer warp on its empty barrier, 8 in all).
//  - Persistent grid (one CTA per SM): CTA b walks tiles b, b + gridDim.x, ...; tile t is row
//    tile t / colTiles (v1's 128-row schedule from grouped_schedule_kernel, read on the device,
//    no host sync) and column tile t % colTiles, so the ~#SMs tiles in flight cover one or two
//    experts' row tiles against all their column tiles: that expert's weights are read from DRAM
//    once and then from L2.
//  - Tile 128 x 256 (two m64n256 consumers) rather than 256 x 128: it keeps v1's 128-row schedule
//    (less padding in ragged experts than 256-row tiles), gate+up gets 128 gate + 128 up columns
//    per tile (the GLU pairs accumulator i with i + 64 in the same thread), and 128 accumulators
//    per consumer thread fit its 232 registers. Smem: stage = A 16 KB + B 32 KB; 4 stages 192 KB.
//  - Epilogue straight from the accumulators (no shared-memory staging: the ring is still in use
//    by the producer's prefetch of the next tile): bf16x2 stores, with round 2's (v2's) per-element
//    arithmetic (gluForwardDevice / gluBackwardDevice, row weight multiply, __floats2bfloat162_rn),
//    so the same accumulator gives the same bits.
// Operand layouts as round 2: K-contiguous tiles in the 128-byte-swizzle K-major layout (rows of
// 128 bytes, chunk c of row r at c ^ (r % 8)); [K, N] weight tiles (dh, dx) MN-major (64-wide N
// atoms of 8 KB, chunk j % 8 of K row k at (j % 8) ^ (k % 8)), wgmma's bf16 transpose of B.
// Accumulation order per element: k16 slices in K order, as round 2 (m64n128k16 there, m64n256k16
// here); bitwise equality with round 2 is expected if the hardware's order within a k16 slice
// does not depend on N (grouped_gemm_05.cu measures it). Deterministic run to run; no atomics.
// Shape rules as v1 / v2: D % 8 == 0, F % 8 == 0, 16-byte aligned bases.
// Round 5b (grouped_gemm_05.md "Round 5b"): compile-time variants of the producer (strength-
// reduced copies, next-tile lookahead, optional B by TMA), the stage release point, the ring depth
// and dh's epilogue loads; the macros are documented with the constants below.
//
// Defines __global__ functions: include from ONE translation unit compiled for sm_90a, after
// the v1 / v2 / round-2 headers if their kernels are defined there too (grouped_gemm_05.cu).
// Launch: grid = multiprocessor count (or fewer), kThreads threads, kSmemBytes dynamic smem
// (cudaFuncSetAttribute first).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#if MOEWB_WS_TMA_B
#include <cuda.h>  // CUtensorMap (types only; the encoder comes from cudaGetDriverEntryPoint)
#include <cudaTypedefs.h>
#endif

#include "ops/experts/grouped_gemm_wgmma_cuda.cuh"
#include "runtime/cuda/warp_mma.cuh"

namespace moewb::engine::cuda::grouped::ws {

using grouped::bf16_t;

constexpr int kBM = 128;  // output rows per tile (v1's row-tile schedule)
constexpr int kBN = 256;  // output columns per tile (gate+up: 128 of g and 128 of u)
constexpr int kBK = 64;   // K step: one 128-byte swizzle row
// Compile-time variants (bench/scratch/grouped_gemm_05.md "Round 5b", grouped_gemm_05_sweep.sh):
//  MOEWB_WS_STAGES       ring depth (3 or 4; 5 does not fit at 48 KB a stage).
//  MOEWB_WS_PRODUCER     0: round 5a's copy loops (per-copy address math, generic smem pointers);
//                        1: strength-reduced copies (per-tile base pointers, constant strides,
//                        32-bit smem addresses, unrolled) and the next tile's row lookup and
//                        gather indices loaded during the current tile's last K step; the
//                        consumers look their next tile up before the last wait_group 0.
//  MOEWB_WS_RELEASE      1: release a stage after the NEXT step's batch is issued (wait_group 1,
//                        one batch in flight); 0: wait_group 0 and release the stage at once
//                        (one stage more of producer lead; the other consumer keeps the
//                        tensor cores busy meanwhile).
//  MOEWB_WS_DH_CHUNK     dh epilogue: gatePre / upPre loads batched this many 8-column groups at
//                        a time before the dependent math and stores (1: round 5a's order).
//  MOEWB_WS_EPI_PREFETCH dh: the producer prefetches the tile's gatePre / upPre lines to L2 this
//                        many K steps before the tile's end (0: off).
//  MOEWB_WS_TMA_B        1 (needs MOEWB_WS_PRODUCER 1): B by TMA (one elected producer thread,
//                        cp.async.bulk.tensor 3-D over [E][rows][cols] weights, 128-byte swizzle,
//                        out-of-bounds zero fill) with mbarrier expect_tx on the full barrier;
//                        the host fills Params::mapB1 / mapB2 with encodeWeightMaps().
#ifndef MOEWB_WS_STAGES
#define MOEWB_WS_STAGES 4
#endif
#ifndef MOEWB_WS_TMA_B
#define MOEWB_WS_TMA_B 0
#endif
#ifndef MOEWB_WS_PRODUCER
#define MOEWB_WS_PRODUCER 1
#endif
#ifndef MOEWB_WS_RELEASE
#define MOEWB_WS_RELEASE 1
#endif
#ifndef MOEWB_WS_DH_CHUNK
#define MOEWB_WS_DH_CHUNK 8
#endif
#ifndef MOEWB_WS_EPI_PREFETCH
#define MOEWB_WS_EPI_PREFETCH 6
#endif
#if MOEWB_WS_TMA_B && !MOEWB_WS_PRODUCER
#error "MOEWB_WS_TMA_B needs MOEWB_WS_PRODUCER 1"
#endif
constexpr int kStages = MOEWB_WS_STAGES;
static_assert(kStages >= 2 && kStages <= 4, "ring depth 2..4 (48 KB a stage)");
constexpr int kDhChunk = MOEWB_WS_DH_CHUNK;
static_assert(kDhChunk >= 1 && 32 % kDhChunk == 0, "dh chunk divides 32");
constexpr int kWarpgroup = 128;
constexpr int kThreads = 3 * kWarpgroup;  // producer + 2 consumers
// Register split (setmaxnreg; the kernel starts at 65536 / 384 = 168 per thread): the producer
// needs 56 with its copy loops rolled (40 spills), the consumers 128 accumulators + descriptors
// + epilogue. 128 x 56 + 256 x 224 = 64512 <= 65536. Overridable for experiments (-D).
#ifndef MOEWB_WS_PRODUCER_REGS
#define MOEWB_WS_PRODUCER_REGS 56
#endif
#ifndef MOEWB_WS_CONSUMER_REGS
#define MOEWB_WS_CONSUMER_REGS 224
#endif
constexpr int kProducerRegs = MOEWB_WS_PRODUCER_REGS;
constexpr int kConsumerRegs = MOEWB_WS_CONSUMER_REGS;
static_assert(kWarpgroup * (kProducerRegs + 2 * kConsumerRegs) <= 65536, "register file");
constexpr int kATileBytes = kBM * kBK * 2;  // 16 KB
constexpr int kBTileBytes = kBN * kBK * 2;  // 32 KB
constexpr int kStageBytes = kATileBytes + kBTileBytes;
constexpr int kAlign = 1024;  // 128-byte swizzle atom
constexpr int kSmemBytes = kStages * kStageBytes + kAlign;
constexpr int kMnAtomBytes = kBK * 128;  // one 64-wide MN-major atom: 8 KB
static_assert(kMnAtomBytes == wg::kMnHalfBytes, "round 2's MN-major descriptor applies");
static_assert(kBM == grouped::kBM, "row-tile schedule shared with v1");

// The four stages this header implements.
enum class Stage { kGateUp, kDown, kDh, kDx };

// Kernel arguments (by value). Shapes (R = offsets[numExperts] permuted rows, E experts):
//  kGateUp: a1 = x [tokens or R, d] through gather (or null: row r), b1 / b2 = gate / up
//           [E, f, d]; out1 / out2 / out3 = gatePre / upPre / hidden [R, f].
//  kDown:   a1 = hidden [R, f], b1 = down [E, d, f]; out1 = y [R, d] (x rowWeight[r] if set).
//  kDh:     a1 = dY [R, d], b1 = down [E, d, f] (read [K = d, N = f]); gatePre / upPre [R, f];
//           out1 / out2 = dGate / dUp [R, f].
//  kDx:     a1 / a2 = dGate / dUp [R, f] (K = 2 f: dg part then du part), b1 / b2 = gate / up
//           [E, f, d] (read [K, N = d]); out1 = dx [R, d].
struct Params {
  const bf16_t* a1 = nullptr;
  const bf16_t* a2 = nullptr;
  const int32_t* gather = nullptr;
  const bf16_t* b1 = nullptr;
  const bf16_t* b2 = nullptr;
  int64_t d = 0, f = 0;
  const int32_t* offsets = nullptr;    // [E + 1]
  const int32_t* tileStart = nullptr;  // [E + 1], grouped_schedule_kernel with tileRows kBM
  int numExperts = 0;
  GluDeviceParams glu;
  const float* rowWeight = nullptr;  // kDown only; null: plain
  const bf16_t* gatePre = nullptr;
  const bf16_t* upPre = nullptr;
  bf16_t* out1 = nullptr;
  bf16_t* out2 = nullptr;
  bf16_t* out3 = nullptr;  // kGateUp: hidden, or null (round 9's split: the GLU runs later)
  float* dHidden = nullptr;  // kDh round 9 (split): the fp32 dh tile [R, f] goes here, no GLU
                             //   backward (out1 / out2 / gatePre / upPre unused)
#if MOEWB_WS_TMA_B
  CUtensorMap mapB1;  // TMA maps over b1 / b2 (encodeWeightMaps)
  CUtensorMap mapB2;
#endif
};

// Per-stage geometry derived from Params.
template <Stage kS>
struct Geometry {
  static constexpr bool kMnB = kS == Stage::kDh || kS == Stage::kDx;
  int64_t aLd;      // A row length (K extent of each A source)
  int64_t nExtent;  // output columns
  int kTiles;       // K steps per tile
  int kTiles1;      // K steps from the first A / B source (kDx: f's; others kTiles)
  int colTiles;     // column tiles per row tile

  __device__ __forceinline__ explicit Geometry(const Params& p) {
    const bool kIsD = kS == Stage::kGateUp || kS == Stage::kDh;  // K = d
    aLd = kIsD ? p.d : p.f;
    kTiles1 = int((aLd + kBK - 1) / kBK);
    kTiles = kS == Stage::kDx ? 2 * kTiles1 : kTiles1;
    nExtent = (kS == Stage::kGateUp || kS == Stage::kDh) ? p.f : p.d;
    const int tileCols = kS == Stage::kGateUp ? kBN / 2 : kBN;
    colTiles = int((nExtent + tileCols - 1) / tileCols);
  }
  __device__ __forceinline__ int64_t colBase(int colTile) const {
    return int64_t(colTile) * (kS == Stage::kGateUp ? kBN / 2 : kBN);
  }
};

#if MOEWB_WS_TMA_B
// The driver's cuTensorMapEncodeTiled through the runtime (no link dependency on libcuda), looked
// up once per process (thread-safe); null when the driver lacks it. Clears the lookup's error.
inline PFN_cuTensorMapEncodeTiled_v12000 tensorMapEncoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 encoder = [] {
    cudaDriverEntryPointQueryResult q{};
    void* fn = nullptr;
    const cudaError_t e = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000,
                                                           cudaEnableDefault, &q);
    if (e != cudaSuccess) (void)cudaGetLastError();
    return e == cudaSuccess && q == cudaDriverEntryPointSuccess && fn != nullptr
               ? reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn)
               : nullptr;
  }();
  return encoder;
}

// Fills p.mapB1 / p.mapB2 for stage kS from p.b1 / p.b2, p.d, p.f, p.numExperts: 3-D bf16 maps
// {inner, rows, E} over the [E][rows][inner] weights, 128-byte swizzle (the smem layouts above),
// zero fill out of bounds. Boxes: K-major (kGateUp {64, 128}: gate and up halves; kDown
// {64, 256}) and MN-major 64 x 64 atoms (kDh, kDx). Returns cudaErrorInvalidValue when the driver
// has no cuTensorMapEncodeTiled or rejects a map (unaligned base, d or f not a multiple of 8).
template <Stage kS>
inline cudaError_t encodeWeightMaps(Params& p) {
  const PFN_cuTensorMapEncodeTiled_v12000 encode = tensorMapEncoder();
  if (encode == nullptr) return cudaErrorInvalidValue;
  // gate / up [E, f, d]; down [E, d, f]. kGateUp, kDx read gate / up; kDown, kDh read down.
  const bool gateUp = kS == Stage::kGateUp || kS == Stage::kDx;
  const uint64_t inner = uint64_t(gateUp ? p.d : p.f), rows = uint64_t(gateUp ? p.f : p.d);
  const cuuint64_t dims[3] = {inner, rows, cuuint64_t(p.numExperts)};
  const cuuint64_t strides[2] = {inner * 2, inner * rows * 2};
  const bool mn = kS == Stage::kDh || kS == Stage::kDx;
  const cuuint32_t box[3] = {64, mn ? 64u : (kS == Stage::kGateUp ? 128u : 256u), 1};
  const cuuint32_t unit[3] = {1, 1, 1};
  const bf16_t* srcs[2] = {p.b1, p.b2};
  CUtensorMap* maps[2] = {&p.mapB1, &p.mapB2};
  for (int i = 0; i < (p.b2 != nullptr ? 2 : 1); ++i) {  // kDown, kDh: b1 only (mapB2 unused)
    const CUresult r =
        encode(maps[i], CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, const_cast<bf16_t*>(srcs[i]), dims,
               strides, box, unit, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
               CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS) return cudaErrorInvalidValue;
  }
  return cudaSuccess;
}
#endif

// ---------------------------------------------------------------------------------------------
// PTX wrappers (sm_90a).

#if MOEWB_GROUPED_HAS_WGMMA
__device__ __forceinline__ void mbarInit(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count));
}
__device__ __forceinline__ void mbarWait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "WAIT_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT_%=;\n"
      "}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}
__device__ __forceinline__ void mbarArrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// Arrives on `bar` when all of this thread's earlier cp.async copies have landed (no pending
// count increment: the arrival counts against the barrier's expected count).
__device__ __forceinline__ void cpAsyncArriveNoinc(uint32_t bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}
template <int kRegs>
__device__ __forceinline__ void setMaxRegsDec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}
template <int kRegs>
__device__ __forceinline__ void setMaxRegsInc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}
template <int kPending>
__device__ __forceinline__ void wgmmaWait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}

// d (m64 x n256, fp32) += A (64 x 16 K-major at descA) B (16 x 256 at descB; kTransB 1:
// MN-major).
template <int kTransB>
__device__ __forceinline__ void wgmma256(float (&d)[128], uint64_t descA, uint64_t descB) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, "
      "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, "
      "%38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, "
      "%56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, "
      "%74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, "
      "%92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, "
      "%108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, "
      "%123, %124, %125, %126, %127"
      "}, %128, %129, p, 1, 1, 0, %131;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]),
        "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
        "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
        "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]),
        "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]),
        "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]),
        "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]),
        "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]),
        "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]),
        "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
        "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]),
        "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]),
        "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]),
        "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
      : "l"(descA), "l"(descB), "r"(1), "n"(kTransB));
}
#endif  // MOEWB_GROUPED_HAS_WGMMA

__device__ __forceinline__ void fenceAccum(float (&d)[128]) {
#pragma unroll
  for (int i = 0; i < 128; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// ---------------------------------------------------------------------------------------------
// Producer (warpgroup 0, threads 0..127): per tile, per K step, waits for the ring slot to be
// free, copies A and B with cp.async and arrives on the slot's full barrier (noinc).

// A tile [128 rows][64 K] of K step kt: rows aRow (-1: outside, zero), K-major 128-byte swizzle.
template <Stage kS>
__device__ __forceinline__ void loadA(const Params& p, const Geometry<kS>& g,
                                      const int32_t (&aRow)[8], unsigned char* a, int kt) {
  const int t = int(threadIdx.x), c = t % 8;
  const bool first = kt < g.kTiles1;
  const bf16_t* base = first ? p.a1 : p.a2;
  const int64_t k = int64_t(first ? kt : kt - g.kTiles1) * kBK + c * 8;
  const bool kOk = k < g.aLd;
#pragma unroll
  for (int q = 0; q < 8; ++q) {
    const int i = t / 8 + q * (kWarpgroup / 8);
    const bool ok = kOk && aRow[q] >= 0;
    cpAsync16(a + i * 128 + ((c ^ (i & 7)) << 4), ok ? base + int64_t(aRow[q]) * g.aLd + k : p.a1,
              ok);
  }
}

// B tile of K step kt for output columns n0..: kGateUp / kDown K-major [256 N][64 K] (gate+up:
// rows 0..127 gate, 128..255 up, both columns n0..n0+127); kDh / kDx MN-major [64 K][256 N] as
// four 64-wide atoms of 8 KB.
template <Stage kS>
__device__ __forceinline__ void loadB(const Params& p, const Geometry<kS>& g, int64_t w0,
                                      int64_t n0, unsigned char* b, int kt) {
  const int t = int(threadIdx.x);
  const bool first = kt < g.kTiles1;
  const int64_t kExtent = g.aLd;  // the weights' K extent equals A's
  if constexpr (!Geometry<kS>::kMnB) {
    const int c = t % 8;
    const int64_t k = int64_t(kt) * kBK + c * 8;
    const bool kOk = k < kExtent;
#pragma unroll 1  // rolled: the producer runs on kProducerRegs registers
    for (int q = 0; q < 16; ++q) {
      const int i = t / 8 + q * (kWarpgroup / 8);
      const bool upHalf = kS == Stage::kGateUp && i >= kBN / 2;
      const bf16_t* w = (upHalf ? p.b2 : p.b1) + w0;
      const int64_t n = n0 + (kS == Stage::kGateUp ? i % (kBN / 2) : i);
      const bool ok = kOk && n < g.nExtent;
      cpAsync16(b + i * 128 + ((c ^ (i & 7)) << 4), ok ? w + n * kExtent + k : p.b1, ok);
    }
  } else {
    const int j = t % 32;
    const int64_t col = n0 + j * 8, k0 = int64_t(first ? kt : kt - g.kTiles1) * kBK;
    const bool colOk = col < g.nExtent;
    const bf16_t* w = (first ? p.b1 : p.b2) + w0;
#pragma unroll 1  // rolled: the producer runs on kProducerRegs registers
    for (int q = 0; q < 16; ++q) {
      const int r = t / 32 + q * (kWarpgroup / 32);
      const bool ok = colOk && k0 + r < kExtent;
      cpAsync16(b + (j / 8) * kMnAtomBytes + r * 128 + (((j & 7) ^ (r & 7)) << 4),
                ok ? w + (k0 + r) * g.nExtent + col : p.b1, ok);
    }
  }
}

#if MOEWB_GROUPED_HAS_WGMMA
template <Stage kS>
__device__ __forceinline__ void produce(const Params& p, const Geometry<kS>& g, unsigned char* smem,
                                        uint32_t fullBar, uint32_t emptyBar) {
  const int total = p.tileStart[p.numExperts] * g.colTiles;
  uint32_t it = 0;  // K steps issued by this CTA (ring slot and phase)
  for (int id = int(blockIdx.x); id < total; id += int(gridDim.x)) {
    RowTile tile;
    findRowTile(p.offsets, p.tileStart, p.numExperts, id / g.colTiles, tile);
    const int64_t n0 = g.colBase(id % g.colTiles);
    const int64_t w0 = int64_t(tile.expert) * p.f * p.d;
    int32_t aRow[8];
#pragma unroll
    for (int q = 0; q < 8; ++q) {
      const int64_t logical = tile.begin + int(threadIdx.x) / 8 + q * (kWarpgroup / 8);
      aRow[q] = logical >= tile.end
                    ? -1
                    : int32_t(p.gather != nullptr ? int64_t(p.gather[logical]) : logical);
    }
    for (int kt = 0; kt < g.kTiles; ++kt, ++it) {
      const uint32_t s = it % kStages, phase = (it / kStages) & 1u;
      mbarWait(emptyBar + 8 * s, phase ^ 1u);  // a fresh barrier passes parity 1 at once
      unsigned char* a = smem + s * kStageBytes;
      loadA<kS>(p, g, aRow, a, kt);
      loadB<kS>(p, g, w0, n0, a + kATileBytes, kt);
      cpAsyncArriveNoinc(fullBar + 8 * s);
    }
  }
  asm volatile("cp.async.wait_all;\n" ::: "memory");  // no copy outlives the producer
}

#if MOEWB_WS_TMA_B
// TMA 3-D tile load into shared address dst, completing transaction bytes on mbarrier bar.
__device__ __forceinline__ void tmaLoad3d(uint32_t dst, const CUtensorMap* map, int c0, int c1,
                                          int c2, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3, %4}], [%5];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(bar)
      : "memory");
}
#endif

// 16 bytes global -> shared at a 32-bit shared address; zero-filled (nothing read) when !valid.

// One tile as the producer sees it (MOEWB_WS_PRODUCER 1): this thread's 8 A source rows (-1:
// outside the expert), the tile's rows and output column base.
struct ProducerTile {
  int32_t aRow[8];
  int64_t begin = 0, end = 0;
  int64_t n0 = 0;
  int expert = 0;
};

template <Stage kS>
__device__ __forceinline__ void lookupProducerTile(const Params& p, const Geometry<kS>& g, int id,
                                                   ProducerTile& pt) {
  RowTile tile;
  findRowTile(p.offsets, p.tileStart, p.numExperts, id / g.colTiles, tile);
  pt.begin = tile.begin;
  pt.end = tile.end;
  pt.expert = tile.expert;
  pt.n0 = g.colBase(id % g.colTiles);
#pragma unroll
  for (int q = 0; q < 8; ++q) {
    const int64_t logical = tile.begin + int(threadIdx.x) / 8 + q * (kWarpgroup / 8);
    pt.aRow[q] = logical >= tile.end
                     ? -1
                     : int32_t(p.gather != nullptr ? int64_t(__ldg(p.gather + logical)) : logical);
  }
}

// dh: the tile's gatePre / upPre lines (128 rows x 256 columns x 2 tensors = 1024 lines of 128
// bytes) to L2 shortly before the consumers' epilogue reads them; thread t: row t, 4 lines each.
template <Stage kS>
__device__ __forceinline__ void prefetchEpilogue(const Params& p, const Geometry<kS>& g,
                                                 const ProducerTile& pt) {
  if constexpr (kS == Stage::kDh) {
    const int64_t r = pt.begin + int(threadIdx.x);
    if (r >= pt.end || p.dHidden != nullptr) return;
#pragma unroll
    for (int l = 0; l < kBN / 64; ++l) {
      const int64_t col = pt.n0 + l * 64;
      if (col >= g.nExtent) break;
      asm volatile("prefetch.global.L2 [%0];\n" ::"l"(p.gatePre + r * p.f + col));
      asm volatile("prefetch.global.L2 [%0];\n" ::"l"(p.upPre + r * p.f + col));
    }
  }
}

// One K step's copies into the stage at shared address `a` (A at a, B at a + kATileBytes): the
// layouts and zero fill of loadA / loadB with the per-copy address math strength-reduced
// (constant strides from per-step base pointers).
template <Stage kS>
__device__ __forceinline__ void copyStep(const Params& p, const Geometry<kS>& g,
                                         const ProducerTile& pt, uint32_t a, int kt,
                                         uint32_t fullBar) {
  const int t = int(threadIdx.x), c = t % 8;
  const bool first = kt < g.kTiles1;
  const int64_t kLocal = int64_t(first ? kt : kt - g.kTiles1) * kBK;
  const int64_t kExtent = g.aLd;
  // K-major rows i = t / 8 + 16 q: i % 8 is the same for every q, so the swizzled chunk too.
  const uint32_t rowOff = uint32_t((t / 8) * 128 + ((c ^ ((t / 8) & 7)) << 4));
  {
    const bf16_t* base = (first ? p.a1 : p.a2) + kLocal + c * 8;
    const bool kOk = kLocal + c * 8 < kExtent;
#pragma unroll
    for (int q = 0; q < 8; ++q) {
      const bool ok = kOk && pt.aRow[q] >= 0;
      cpAsync16Fenced(a + rowOff + uint32_t(q * 2048), ok ? base + int64_t(pt.aRow[q]) * kExtent : p.a1,
                 ok);
    }
  }
  const uint32_t b = a + uint32_t(kATileBytes);
#if MOEWB_WS_TMA_B
  // B by TMA from one thread: the full barrier's 129th arrival carries the 32 KB transaction.
  if (t == 0) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(fullBar),
                 "r"(kBTileBytes)
                 : "memory");
    const int e = pt.expert, k = int(kLocal), n = int(pt.n0);
    if constexpr (kS == Stage::kGateUp) {
      tmaLoad3d(b, &p.mapB1, k, n, e, fullBar);
      tmaLoad3d(b + uint32_t(kBTileBytes / 2), &p.mapB2, k, n, e, fullBar);
    } else if constexpr (kS == Stage::kDown) {
      tmaLoad3d(b, &p.mapB1, k, n, e, fullBar);
    } else {
      const CUtensorMap* map = first ? &p.mapB1 : &p.mapB2;
#pragma unroll
      for (int atom = 0; atom < kBN / 64; ++atom)
        tmaLoad3d(b + uint32_t(atom * kMnAtomBytes), map, n + 64 * atom, k, e, fullBar);
    }
  }
  (void)c;
#else
  (void)fullBar;
  const int64_t w0 = int64_t(pt.expert) * p.f * p.d;
  if constexpr (!Geometry<kS>::kMnB) {
    const bool kOk = kLocal + c * 8 < kExtent;
    const int nLim = int(g.nExtent - pt.n0) - t / 8;  // row q valid when 16 (q % 8 or q) < nLim
    const int64_t stride = 16 * kExtent;
    const int64_t rowBase = w0 + (pt.n0 + t / 8) * kExtent + kLocal + c * 8;
    const bf16_t* src1 = p.b1 + rowBase;
    const bf16_t* src2 = (kS == Stage::kGateUp ? p.b2 : p.b1) + rowBase;
#pragma unroll
    for (int q = 0; q < 16; ++q) {
      const int qn = kS == Stage::kGateUp ? q % 8 : q;
      const bool ok = kOk && 16 * qn < nLim;
      const bf16_t* src = (kS == Stage::kGateUp && q >= 8 ? src2 : src1) + qn * stride;
      cpAsync16Fenced(b + rowOff + uint32_t(q * 2048), ok ? src : p.b1, ok);
    }
  } else {
    // MN-major: K row r = t / 32 + 4 q, 8-column chunk j = t % 32 (atom j / 8).
    const int j = t % 32, r0 = t / 32;
    const int64_t col = pt.n0 + j * 8;
    const bool colOk = col < g.nExtent;
    const int64_t stride = 4 * g.nExtent;
    const bf16_t* src0 = (first ? p.b1 : p.b2) + w0 + (kLocal + r0) * g.nExtent + col;
    const int kLim = int(kExtent - kLocal) - r0;  // row q valid when 4 q < kLim
    const uint32_t atom = b + uint32_t((j / 8) * kMnAtomBytes + r0 * 128);
#pragma unroll
    for (int q = 0; q < 16; ++q) {
      const bool ok = colOk && 4 * q < kLim;
      const uint32_t chunk = uint32_t(((j & 7) ^ (r0 + 4 * (q & 1))) << 4);
      cpAsync16Fenced(atom + uint32_t(q * 512) + chunk, ok ? src0 + q * stride : p.b1, ok);
    }
  }
#endif
}

template <Stage kS>
__device__ __forceinline__ void produceFast(const Params& p, const Geometry<kS>& g, uint32_t smem,
                                            uint32_t fullBar, uint32_t emptyBar) {
  const int total = p.tileStart[p.numExperts] * g.colTiles;
  uint32_t it = 0;  // K steps issued by this CTA (ring slot and phase)
  int id = int(blockIdx.x);
  ProducerTile cur;
  if (id < total) lookupProducerTile<kS>(p, g, id, cur);
  for (; id < total; id += int(gridDim.x)) {
    ProducerTile next;
    const bool hasNext = id + int(gridDim.x) < total;
    for (int kt = 0; kt < g.kTiles; ++kt, ++it) {
      // The next tile's index loads go out before this step's empty-barrier wait: their latency
      // hides under the ring's lead instead of stalling the tile switch.
      if (kt == g.kTiles - 1 && hasNext) lookupProducerTile<kS>(p, g, id + int(gridDim.x), next);
      if (MOEWB_WS_EPI_PREFETCH > 0 && kt == (g.kTiles > MOEWB_WS_EPI_PREFETCH
                                                  ? g.kTiles - MOEWB_WS_EPI_PREFETCH
                                                  : 0))
        prefetchEpilogue<kS>(p, g, cur);
      const uint32_t s = it % kStages, phase = (it / kStages) & 1u;
      mbarWait(emptyBar + 8 * s, phase ^ 1u);  // a fresh barrier passes parity 1 at once
      copyStep<kS>(p, g, cur, smem + s * uint32_t(kStageBytes), kt, fullBar + 8 * s);
      cpAsyncArriveNoinc(fullBar + 8 * s);
    }
    if (hasNext) cur = next;
  }
  asm volatile("cp.async.wait_all;\n" ::: "memory");  // no copy outlives the producer
}
#endif

// ---------------------------------------------------------------------------------------------
// Epilogues from the accumulators of consumer cw (tile rows 64 cw..64 cw + 63). Fragment i of
// m64nN: row 16 (warp % 4) + lane / 4 + 8 ((i / 2) % 2), column 8 (i / 4) + 2 (lane % 4) + i % 2.
// Per element the arithmetic of v2's epilogues (grouped_gemm_v2_cuda.cuh).

template <Stage kS>
__device__ __forceinline__ void epilogue(const Params& p, const Geometry<kS>& g,
                                         const RowTile& tile, int64_t n0, int cw,
                                         const float (&acc)[128]) {
  const int warp = (int(threadIdx.x) / 32) % 4, lane = int(threadIdx.x) % 32;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int64_t r = tile.begin + cw * 64 + warp * 16 + lane / 4 + h * 8;
    if (r >= tile.end) continue;
    if constexpr (kS == Stage::kGateUp) {  // v2::gateUpEpilogue
#pragma unroll
      for (int j = 0; j < 16; ++j) {
        const int64_t col = n0 + j * 8 + (lane % 4) * 2;
        if (col >= g.nExtent) continue;
        const float g0 = acc[4 * j + 2 * h], g1 = acc[4 * j + 2 * h + 1];
        const float u0 = acc[64 + 4 * j + 2 * h], u1 = acc[64 + 4 * j + 2 * h + 1];
        const int64_t at = r * p.f + col;
        storeBf16x2(p.out1 + at, g0, g1);
        storeBf16x2(p.out2 + at, u0, u1);
        if (p.out3 != nullptr) {
          storeBf16x2(p.out3 + at, gluForwardDevice(p.glu, g0, u0),
                      gluForwardDevice(p.glu, g1, u1));
        }
      }
    } else if constexpr (kS == Stage::kDh) {  // v2::dhEpilogue
      if (p.dHidden != nullptr) {  // round 9: the fp32 tile, 8-byte stores
#pragma unroll
        for (int j = 0; j < 32; ++j) {
          const int64_t col = n0 + j * 8 + (lane % 4) * 2;
          if (col >= g.nExtent) continue;
          *reinterpret_cast<float2*>(p.dHidden + r * g.nExtent + col) =
              make_float2(acc[4 * j + 2 * h], acc[4 * j + 2 * h + 1]);
        }
        continue;
      }
      // gatePre / upPre loaded kDhChunk column groups at a time before the dependent math and
      // stores: loads after a store to a possibly aliasing out1 / out2 are not hoisted by the
      // compiler, so one element pair at a time costs one memory round trip each.
#pragma unroll
      for (int j0 = 0; j0 < 32; j0 += kDhChunk) {
        __nv_bfloat162 gp[kDhChunk], up[kDhChunk];
#pragma unroll
        for (int jj = 0; jj < kDhChunk; ++jj) {
          const int64_t col = n0 + (j0 + jj) * 8 + (lane % 4) * 2;
          if (col >= g.nExtent) continue;
          gp[jj] = __ldg(reinterpret_cast<const __nv_bfloat162*>(p.gatePre + r * g.nExtent + col));
          up[jj] = __ldg(reinterpret_cast<const __nv_bfloat162*>(p.upPre + r * g.nExtent + col));
        }
#pragma unroll
        for (int jj = 0; jj < kDhChunk; ++jj) {
          const int j = j0 + jj;
          const int64_t col = n0 + j * 8 + (lane % 4) * 2;
          if (col >= g.nExtent) continue;
          const int64_t at = r * g.nExtent + col;
          float dg0, du0, dg1, du1;
          gluBackwardDevice(p.glu, __low2float(gp[jj]), __low2float(up[jj]), acc[4 * j + 2 * h],
                            dg0, du0);
          gluBackwardDevice(p.glu, __high2float(gp[jj]), __high2float(up[jj]),
                            acc[4 * j + 2 * h + 1], dg1, du1);
          storeBf16x2(p.out1 + at, dg0, dg1);
          storeBf16x2(p.out2 + at, du0, du1);
        }
      }
    } else {
      const float w = (kS == Stage::kDown && p.rowWeight != nullptr) ? p.rowWeight[r] : 1.0f;
#pragma unroll
      for (int j = 0; j < 32; ++j) {
        const int64_t col = n0 + j * 8 + (lane % 4) * 2;
        if (col >= g.nExtent) continue;
        float v0 = acc[4 * j + 2 * h], v1 = acc[4 * j + 2 * h + 1];
        const int64_t at = r * g.nExtent + col;
        // v2::downEpilogue (row weight when set), v2::dxEpilogue
        if (kS == Stage::kDown && p.rowWeight != nullptr) {
          v0 *= w;
          v1 *= w;
        }
        storeBf16x2(p.out1 + at, v0, v1);
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Consumers (warpgroups 1, 2): per K step wait full, 4 x m64n256k16 on this warpgroup's 64 A
// rows and the whole B tile, keep the batch in flight, release the previous step's slot.

#if MOEWB_GROUPED_HAS_WGMMA
template <Stage kS>
__device__ __forceinline__ void consume(const Params& p, const Geometry<kS>& g, uint32_t smem,
                                        uint32_t fullBar, uint32_t emptyBar) {
  const int cw = int(threadIdx.x) / kWarpgroup - 1;
  const bool releaser = int(threadIdx.x) % 32 == 0;  // one arrival per consumer warp
  const int total = p.tileStart[p.numExperts] * g.colTiles;
  uint32_t it = 0;
  float acc[128];
  RowTile tile;
  if (int(blockIdx.x) < total)
    findRowTile(p.offsets, p.tileStart, p.numExperts, int(blockIdx.x) / g.colTiles, tile);
  for (int id = int(blockIdx.x); id < total; id += int(gridDim.x)) {
#if !MOEWB_WS_PRODUCER
    findRowTile(p.offsets, p.tileStart, p.numExperts, id / g.colTiles, tile);
#endif
    const int64_t n0 = g.colBase(id % g.colTiles);
#pragma unroll
    for (int i = 0; i < 128; ++i) acc[i] = 0.0f;
#if MOEWB_WS_RELEASE
    uint32_t prev = 0;  // the previous step's slot, released after this step's batch is issued
#endif
    for (int kt = 0; kt < g.kTiles; ++kt, ++it) {
      const uint32_t s = it % kStages, phase = (it / kStages) & 1u;
      mbarWait(fullBar + 8 * s, phase);
      wg::fenceProxyAsync();  // the cp.async (generic proxy) bytes, for wgmma's operand reads
      const uint32_t a = smem + s * kStageBytes + uint32_t(cw * 64 * 128);
      const uint32_t b = smem + s * kStageBytes + uint32_t(kATileBytes);
      fenceAccum(acc);
      wg::wgmmaFence();
#pragma unroll
      for (int k16 = 0; k16 < kBK / 16; ++k16) {
        const uint64_t da = wg::descSw128(a + uint32_t(k16 * 32));
        const uint64_t db = Geometry<kS>::kMnB ? wg::descMn128(b + uint32_t(k16 * 16 * 128))
                                               : wg::descSw128(b + uint32_t(k16 * 32));
        wgmma256<Geometry<kS>::kMnB ? 1 : 0>(acc, da, db);
      }
      wg::wgmmaCommit();
#if MOEWB_WS_RELEASE
      wgmmaWait<1>();  // step kt - 1's batch has retired: its slot is free
      fenceAccum(acc);
      if (kt > 0 && releaser) mbarArrive(emptyBar + 8 * prev);
      prev = s;
#else
      wgmmaWait<0>();  // this step's batch has retired: its slot is free at once
      fenceAccum(acc);
      if (releaser) mbarArrive(emptyBar + 8 * s);
#endif
    }
    const RowTile cur = tile;
#if MOEWB_WS_PRODUCER
    // The next tile's lookup (dependent index loads) overlaps the last batch.
    if (id + int(gridDim.x) < total)
      findRowTile(p.offsets, p.tileStart, p.numExperts, (id + int(gridDim.x)) / g.colTiles, tile);
#endif
    wgmmaWait<0>();
    fenceAccum(acc);
#if MOEWB_WS_RELEASE
    if (releaser) mbarArrive(emptyBar + 8 * prev);
#endif
    epilogue<kS>(p, g, cur, n0, cw, acc);
  }
}
#endif

// One persistent kernel per stage (Params documents the operands). Grid: at most the
// multiprocessor count (any positive count is correct); kThreads threads; kSmemBytes dynamic
// shared memory. Rows >= offsets[numExperts] are not written.
template <Stage kS>
__global__ void __launch_bounds__(kThreads, 1) grouped_ws_kernel(const __grid_constant__ Params p) {
  extern __shared__ __align__(128) unsigned char smemRaw[];
  __shared__ __align__(8) uint64_t bars[2 * kStages];  // full[kStages], empty[kStages]
#if MOEWB_GROUPED_HAS_WGMMA
  unsigned char* smem = wg::alignedSmem(smemRaw);
  const uint32_t fullBar = smemAddr(&bars[0]), emptyBar = smemAddr(&bars[kStages]);
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      // one noinc arrival per producer thread (+ the TMA thread's expect_tx arrival)
      mbarInit(fullBar + 8 * s, kWarpgroup + MOEWB_WS_TMA_B);
      mbarInit(emptyBar + 8 * s, 8);          // one arrival per consumer warp
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();
  const Geometry<kS> g(p);
  const int role = __shfl_sync(0xffffffffu, int(threadIdx.x) / kWarpgroup, 0);
  if (role == 0) {
    setMaxRegsDec<kProducerRegs>();
#if MOEWB_WS_PRODUCER
    produceFast<kS>(p, g, smemAddr(smem), fullBar, emptyBar);
#else
    produce<kS>(p, g, smem, fullBar, emptyBar);
#endif
  } else {
    setMaxRegsInc<kConsumerRegs>();
    consume<kS>(p, g, smemAddr(smem), fullBar, emptyBar);
  }
#else
  (void)bars;
  __trap();
#endif
}

}  // namespace moewb::engine::cuda::grouped::ws
