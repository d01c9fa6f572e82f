// Device-side primitives of the Hopper (sm_90a) attention kernels: mbarriers, TMA tensor copies,
// wgmma matrix descriptors and group control, register reconfiguration, named barriers.
// Everything else (element types, ex2, quad reductions, 32-bit shared stores) comes from
// mma/ptx.cuh. Like that header, this one has a CPU emulation (hopper/emulation/hopper/ptx.cuh)
// with the same names, so the kernels' index math runs in CTest without a GPU.
//
// Shared-memory tiles are 128-byte-swizzled "panels": 64 columns of 16-bit elements (128 bytes) by
// R rows, row r at byte r * 128, its 16-byte chunk c stored at chunk c ^ (r % 8). That is both
// what TMA writes with CU_TENSOR_MAP_SWIZZLE_128B and wgmma's 128B-swizzle canonical layout, as
// long as every panel starts on a 1024-byte boundary (then the descriptors' base offset is 0).
// Descriptors (PTX ISA, "Matrix Descriptor Format"), in 16-byte units:
//   K-major operand (rows x 64 k per panel): SBO = 1024 B (8-row groups), LBO unused (1); the
//     k-step j (16 elements, 32 bytes) inside a panel starts at panel + 32 j.
//   MN-major operand (k rows x 64 n per panel, e.g. V with keys as k): SBO = 1024 B (8-k-row
//     groups), LBO = the byte distance between n-panels; the k-step j starts at panel + 2048 j.
#pragma once

#include <cstdint>

#include "mma/ptx.cuh"

// wgmma and setmaxnreg exist only in the sm_90a target; other targets compile the kernels to a
// trap (the host side refuses to launch them, see supports_extra of the implementations).
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define ATTN_HOPPER_DEVICE 1
#else
#define ATTN_HOPPER_DEVICE 0
#endif

namespace attn_hopper {

// ---- matrix descriptors -------------------------------------------------------------------------

__device__ __forceinline__ uint64_t desc_field(uint32_t bytes) {
  return (bytes & 0x3FFFF) >> 4;
}

// 128B-swizzle descriptor of the operand starting at shared address `addr`.
__device__ __forceinline__ uint64_t make_desc(uint32_t addr, uint32_t lbo_bytes,
                                              uint32_t sbo_bytes) {
  return desc_field(addr) | (desc_field(lbo_bytes) << 16) | (desc_field(sbo_bytes) << 32) |
         (uint64_t{1} << 62);
}
__device__ __forceinline__ uint64_t desc_k_major(uint32_t addr) {
  return make_desc(addr, 16, 1024);
}
__device__ __forceinline__ uint64_t desc_mn_major(uint32_t addr, uint32_t panel_bytes) {
  return make_desc(addr, panel_bytes, 1024);
}
// The descriptor of the operand `bytes` (a multiple of 16) past d's: bytes / 16 added to the start
// address field (bits 0-13) in the low word alone. Exact for any shared address (< 2^18 bytes, so
// the field cannot carry into the LBO's bits). A GEMM's k-steps take their descriptors this way
// from one built per stage: with make_desc per k-step the compiler masked, shifted and merged
// every address again, about 10 instructions per wgmma, over a quarter of the backward's
// instructions per query tile (ncu of 2b4b482, docs/tuning_flash_wgmma.md).
__device__ __forceinline__ uint64_t desc_add(uint64_t d, uint32_t bytes) {
  const uint32_t lo = static_cast<uint32_t>(d) + (bytes >> 4);
  return (d & 0xFFFFFFFF00000000ull) | lo;
}
// A warp-uniform copy of v (lane 0's), so that the compiler keeps what derives from it (the
// consumer warpgroup's shared-memory offsets, its descriptors) in uniform registers instead of
// computing them per thread and moving them over with R2UR before every wgmma.
__device__ __forceinline__ int warp_uniform(int v) {
  return __shfl_sync(0xffffffffu, v, 0);
}

// ---- mbarriers ----------------------------------------------------------------------------------

__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
// Makes the initialised barriers visible to the async proxy (TMA) before first use.
__device__ __forceinline__ void fence_barrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// Arrives and raises the phase's expected transaction bytes (the TMA copies that complete it).
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
               : "memory");
}
// Waits until the phase of parity `parity` has completed (a fresh barrier is in phase 0, so
// waiting for parity 1 returns at once: the producer's first pass over its empty barriers).
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
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

// ---- TMA ----------------------------------------------------------------------------------------

// Loads the tensor map's box at (c0, c1, c2, c3) (innermost first) into shared memory at `dst`;
// completes `bar`'s transaction bytes. Elements outside the tensor are written as zeros.
__device__ __forceinline__ void tma_load_4d(uint32_t dst, const void* tmap, uint32_t bar, int c0,
                                            int c1, int c2, int c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3, %4, %5}], [%6];\n" ::"r"(dst),
      "l"(tmap), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar)
      : "memory");
}
// Stores the box at `src` to the tensor at (c0..c3); elements outside the tensor are dropped.
__device__ __forceinline__ void tma_store_4d(const void* tmap, uint32_t src, int c0, int c1, int c2,
                                             int c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.global.shared::cta.tile.bulk_group [%0, {%2, %3, %4, %5}], "
      "[%1];\n" ::"l"(tmap),
      "r"(src), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
      : "memory");
}
// Adds `bytes` of float32 from shared memory at `src` into global memory at `dst` (both 16-byte
// aligned, bytes a multiple of 16), element by element, in L2; completes with the bulk group.
__device__ __forceinline__ void bulk_reduce_add_f32(float* dst, uint32_t src, uint32_t bytes) {
  asm volatile(
      "cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n" ::"l"(dst),
      "r"(src), "r"(bytes)
      : "memory");
}
// Bulk groups (TMA stores, bulk reductions): commit, then wait until their shared-memory reads end.
__device__ __forceinline__ void tma_store_commit() {
  asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}
// Waits until the committed bulk groups but the newest kPending have read their shared memory
// (then reusable).
template <int kPending = 0>
__device__ __forceinline__ void tma_store_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(kPending) : "memory");
}
// Orders this thread's ordinary shared-memory writes before later async-proxy (TMA, wgmma) reads.
__device__ __forceinline__ void fence_proxy_async() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
__device__ __forceinline__ void prefetch_tmap(const void* tmap) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(tmap) : "memory");
}

// ---- wgmma group control ------------------------------------------------------------------------

#if ATTN_HOPPER_DEVICE
__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}
template <int kRegs>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}
template <int kRegs>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}
// Four 8 x 8 blocks of 16-bit elements to shared memory (stmatrix .x4, warp-collective): lane l
// holds in r[i] the pair at row l / 4, columns 2 (l % 4) and + 1 of block i (an mma or wgmma
// accumulator's fragment, packed), and gives in `addr` the 16-byte row l % 8 of block l / 8.
__device__ __forceinline__ void stsm_x4(uint32_t addr, const uint32_t (&r)[4]) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr),
               "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3])
               : "memory");
}
// The same, each 8 x 8 block transposed on the way (stmatrix .trans): the 16-byte row that lane
// 8 i + j names receives column j of block i (lane 4 g + t holds that column's rows g as the low
// half of r[i] where j = 2 t, the high half where j = 2 t + 1).
__device__ __forceinline__ void stsm_x4_trans(uint32_t addr, const uint32_t (&r)[4]) {
  asm volatile(
      "stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr),
      "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3])
      : "memory");
}
#endif

// Pins a register's value at this point of the program: after a wgmma_wait, the compiler must not
// read the accumulators before it (it does not know that the asynchronous wgmma wrote them).
// Before a wgmma_fence, pinning the operands also keeps the compiler from moving them between
// registers after the fence (ptxas would then have to inject a wait: warning C7519).
template <int N>
__device__ __forceinline__ void fence_regs(float (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}
template <int N>
__device__ __forceinline__ void fence_regs(uint32_t (&r)[N][4]) {
#pragma unroll
  for (int i = 0; i < N; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) asm volatile("" : "+r"(r[i][j])::"memory");
}

// ---- a global counter (the persistent scheduler) --------------------------------------------

__device__ __forceinline__ int atomic_add_i32(int* p, int v) {
  return atomicAdd(p, v);
}

// A turn counter in global memory: wait until it reads `mine` (acquire), and pass it on (release,
// after this thread's earlier writes, its bulk reductions included, are visible to the GPU).
__device__ __forceinline__ void wait_turn(const int* turn, int mine) {
  int v;
  do {
    asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(v) : "l"(turn) : "memory");
  } while (v != mine);
}
__device__ __forceinline__ void pass_turn_on(int* turn) {
  asm volatile("fence.proxy.async.global;\n" ::: "memory");
  asm volatile("red.release.gpu.global.add.s32 [%0], 1;\n" ::"l"(turn) : "memory");
}
// Waits until the committed bulk operations are complete (their global writes done too).
__device__ __forceinline__ void bulk_wait_complete() {
  asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
}

// ---- named barriers (id 0 is __syncthreads) -----------------------------------------------------

__device__ __forceinline__ void named_bar_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_bar_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

}  // namespace attn_hopper
