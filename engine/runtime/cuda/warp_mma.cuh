// The PTX wrappers the warp-level tensor-core kernels share (sm_80 instructions, also on Hopper):
// asynchronous global -> shared copies (cp.async), shared -> register matrix loads (ldmatrix) and
// the bf16 m16n8k16 MMA with fp32 accumulators (mma.sync). Device code only; each is one PTX
// instruction, so a kernel that calls these compiles to the same SASS as with its own copies.
// Fragment layouts are the PTX ISA's ("Matrix fragments for mma.m16n8k16").
// Hopper's warpgroup instructions (wgmma, TMA, mbarriers) live with their kernels
// (ops/experts/grouped_gemm_wgmma_cuda.cuh, grouped_gemm_ws_cuda.cuh).
#pragma once

#include <cstdint>

namespace moewb::engine::cuda {

// The 32-bit shared-window address of a generic pointer into shared memory.
__device__ __forceinline__ uint32_t smemAddr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared (L2 only: .cg); zero-filled and nothing read when !valid (src must
// still be a mapped address). dst: 16-byte-aligned shared address, src: 16-byte aligned.
__device__ __forceinline__ void cpAsync16(uint32_t dst, const void* src, bool valid) {
  const int bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "r"(bytes));
}
__device__ __forceinline__ void cpAsync16(void* dst, const void* src, bool valid) {
  cpAsync16(smemAddr(dst), src, valid);
}
// As cpAsync16(dst, src, valid), and the compiler keeps this thread's other memory accesses on
// their side of it (a "memory" clobber): for producers whose shared stores must not move past it.
__device__ __forceinline__ void cpAsync16Fenced(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "r"(valid ? 16 : 0)
               : "memory");
}
// 16 bytes (.cg) or 4 bytes (.ca, through L1) global -> shared, always read.
__device__ __forceinline__ void cpAsync16(void* dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smemAddr(dst)), "l"(src));
}
__device__ __forceinline__ void cpAsync4(void* dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(smemAddr(dst)), "l"(src));
}
// Closes the group of this thread's cp.async issued since the last commit.
__device__ __forceinline__ void cpAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::); }
// Waits until at most kPending of this thread's committed groups are still in flight.
template <int kPending>
__device__ __forceinline__ void cpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

// ldmatrix: four (x4) or two (x2) 8 x 8 b16 matrices from shared memory into one register each
// per thread; lanes 8i..8i+7 give the row addresses of matrix i; .trans transposes each matrix.
__device__ __forceinline__ void ldsm4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldsm4t(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldsm2(uint32_t (&r)[2], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(addr));
}
__device__ __forceinline__ void ldsm2t(uint32_t (&r)[2], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(addr));
}
__device__ __forceinline__ void ldsm4(uint32_t (&r)[4], const void* p) { ldsm4(r, smemAddr(p)); }
__device__ __forceinline__ void ldsm4t(uint32_t (&r)[4], const void* p) { ldsm4t(r, smemAddr(p)); }
__device__ __forceinline__ void ldsm2(uint32_t (&r)[2], const void* p) { ldsm2(r, smemAddr(p)); }
__device__ __forceinline__ void ldsm2t(uint32_t (&r)[2], const void* p) { ldsm2t(r, smemAddr(p)); }

// c[16 x 8] += a[16 x 16] b[16 x 8] (row.col), bf16 operands packed two per register, fp32
// accumulators.
__device__ __forceinline__ void mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ void mma16816(float (&c)[4], const uint32_t (&a)[4],
                                         const uint32_t (&b)[2]) {
  mma16816(c, a, b[0], b[1]);
}

}  // namespace moewb::engine::cuda
