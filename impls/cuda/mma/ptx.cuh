// Device-side primitives of the mma.sync attention kernels: element types, cp.async, ldmatrix,
// mma.m16n8k16, shared-memory loads/stores by 32-bit address, warp reductions, ex2.
//
// Everything a kernel does beyond integer/float arithmetic and global loads/stores goes through
// this header, so a kernel's data flow can be read (and checked) in terms of these few calls.
// Fragment layouts (PTX ISA, "Matrix Fragments for mma.m16n8k16"), g = lane / 4, t = lane % 4:
//   A 16x16 row-major, 4 regs of 2 elements: a0 (g, 2t..2t+1)  a1 (g+8, 2t..)
//                                            a2 (g, 2t+8..)    a3 (g+8, 2t+8..)
//   B 16x8 "col" (k x n), 2 regs:            b0 (k 2t..2t+1, n g)  b1 (k 2t+8.., n g)
//   C 16x8 float, 4 regs:                    c0,c1 (g, 2t..2t+1)   c2,c3 (g+8, 2t..2t+1)
// In every pair the element with the lower column (or k) index is in the low 16 bits.
// ldmatrix .x4: lanes 8i..8i+7 give the row addresses of 8x8 matrix i; lane l receives, in
// register i, row l/4, columns 2(l%4), 2(l%4)+1 of matrix i (.trans: column l/4, rows 2(l%4), +1).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "common/element_types.cuh"

namespace attn_mma {

// The element types every family shares (common/element_types.cuh).
using attnbench::cuda::bfloat_t;
using attnbench::cuda::half_t;

// Conversions between float and the 16-bit element types, as packed pairs.
template <class T>
struct Elem;

template <>
struct Elem<half_t> {
  // lo goes to the low 16 bits (the lower column index of an mma fragment pair).
  static __device__ __forceinline__ uint32_t pack2(float lo, float hi) {
    const __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&h);
  }
  static __device__ __forceinline__ float2 unpack2(uint32_t v) {
    return __half22float2(*reinterpret_cast<const __half2*>(&v));
  }
};

template <>
struct Elem<bfloat_t> {
  static __device__ __forceinline__ uint32_t pack2(float lo, float hi) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&h);
  }
  static __device__ __forceinline__ float2 unpack2(uint32_t v) {
    return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&v));
  }
};

// ---- shared memory ------------------------------------------------------------------------------

// The block's dynamic shared memory (the kernels use no static shared memory).
__device__ __forceinline__ unsigned char* dynamic_smem() {
  extern __shared__ __align__(128) unsigned char attn_mma_dynamic_smem[];
  return attn_mma_dynamic_smem;
}

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void st_shared_b32(uint32_t addr, uint32_t v) {
  asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(v) : "memory");
}

__device__ __forceinline__ void st_shared_f32(uint32_t addr, float v) {
  asm volatile("st.shared.f32 [%0], %1;\n" ::"r"(addr), "f"(v) : "memory");
}

// Two floats at an 8-byte aligned address: one 64-bit store.
__device__ __forceinline__ void st_shared_f32x2(uint32_t addr, float lo, float hi) {
  asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(addr), "f"(lo), "f"(hi) : "memory");
}

__device__ __forceinline__ float ld_shared_f32(uint32_t addr) {
  float v;
  asm volatile("ld.shared.f32 %0, [%1];\n" : "=f"(v) : "r"(addr) : "memory");
  return v;
}

__device__ __forceinline__ uint4 ld_shared_b128(uint32_t addr) {
  uint4 v;
  asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "r"(addr)
               : "memory");
  return v;
}

__device__ __forceinline__ float2 ld_shared_f32x2(uint32_t addr) {
  float2 v;
  asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];\n" : "=f"(v.x), "=f"(v.y) : "r"(addr) : "memory");
  return v;
}

// threadIdx.x read through volatile asm: the compiler cannot hoist it (or anything computed from
// it) out of a loop, so per-thread copy addresses are recomputed where used instead of being kept
// live (or spilled) across the whole loop.
__device__ __forceinline__ int tid_x_unhoisted() {
  int r;
  asm volatile("mov.u32 %0, %%tid.x;\n" : "=r"(r));
  return r;
}

// ---- cp.async -----------------------------------------------------------------------------------

// 16 bytes global -> shared, bypassing L1. When !valid nothing is read and the 16 bytes are zeroed
// (src-size 0), so tails of a tile need no separate clearing; src must still be a mapped address.
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src, bool valid) {
  const int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "r"(src_bytes)
               : "memory");
}

// 4 bytes global -> shared (for float vectors whose rows are not 16-byte aligned).
__device__ __forceinline__ void cp_async_4(uint32_t dst, const void* src, bool valid) {
  const int src_bytes = valid ? 4 : 0;
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes)
               : "memory");
}

__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}

// Programmatic dependent launch (sm_90; no-ops before it): a kernel started by
// launch_dependent() (host.cuh) may begin before the grid ahead of it on the stream has
// finished, and calls grid_dependency_wait() before it reads anything that grid writes (the wait
// returns once that grid has completed and its writes are visible). grid_launch_dependents() in
// the grid ahead lets the dependent grid's blocks start once every block has called it or
// exited, instead of at the grid's end.
__device__ __forceinline__ void grid_dependency_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void grid_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

// Waits until at most kPending of this thread's committed groups are still in flight.
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

// ---- ldmatrix / mma -----------------------------------------------------------------------------

__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

__device__ __forceinline__ void ldsm_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// d += A(16x16) * B(16x8), float accumulators.
template <class T>
__device__ __forceinline__ void mma_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                          uint32_t b1);

template <>
__device__ __forceinline__ void mma_16816<half_t>(float (&d)[4], const uint32_t (&a)[4],
                                                  uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

template <>
__device__ __forceinline__ void mma_16816<bfloat_t>(float (&d)[4], const uint32_t (&a)[4],
                                                    uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// ---- math and warp reductions -------------------------------------------------------------------

// 2^x with the SFU (ex2.approx, flush-to-zero): 2^-inf = +0, as the masking relies on.
__device__ __forceinline__ float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// log2(x) with the SFU (lg2.approx, flush-to-zero): log2(+0) = -inf.
__device__ __forceinline__ float log2_approx(float x) {
  float y;
  asm("lg2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// tanh(x) from one ex2 and one fast division, 1 - 2 / (2^(2 x log2(e)) + 1): absolute error about
// 1e-7 (tanh.approx.f32's is about 1e-3 relative, too coarse for a soft cap of 30 or 50), and
// exactly -1 / +1 once 2^(2 x log2(e)) flushes to 0 / passes 2^126 (the division gives 0).
__device__ __forceinline__ float tanh_fast(float x) {
  return 1.f - __fdividef(2.f, exp2_approx(x * 2.885390081777927f) + 1.f);
}

// tanh(x) with the SFU (tanh.approx.f32): one instruction, relative error about 2^-11.
__device__ __forceinline__ float tanh_approx(float x) {
  float y;
  asm("tanh.approx.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// a * b rounded, never contracted with a following add into an FMA: the softmax exponents are
// differences of such products, so that the row max's exponent is exactly 0 (see
// flash_fwd_mma.cu).
__device__ __forceinline__ float mul_rn(float a, float b) {
  return __fmul_rn(a, b);
}

// True in every lane when p is true in any lane of the (fully active) warp.
__device__ __forceinline__ bool warp_any(bool p) {
  return __any_sync(0xffffffffu, p);
}

// Lane src's x (an int or a float), in every lane of the (fully active) warp.
template <class V>
__device__ __forceinline__ V shfl_idx(V x, int src) {
  return __shfl_sync(0xffffffffu, x, src);
}

// Reductions over the 4 lanes of a quad (the lanes that share a row of an mma C fragment).
__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// Sum over aligned groups of kLanes lanes (a power of two <= 32).
template <int kLanes>
__device__ __forceinline__ float group_sum(float x) {
#pragma unroll
  for (int off = kLanes / 2; off > 0; off /= 2) x += __shfl_xor_sync(0xffffffffu, x, off);
  return x;
}

// Max over aligned groups of kLanes lanes (a power of two <= 32).
template <int kLanes>
__device__ __forceinline__ float group_max(float x) {
#pragma unroll
  for (int off = kLanes / 2; off > 0; off /= 2) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, off));
  return x;
}

// p[0] += a, p[1] += b atomically (one vector reduction on sm_90, two scalar ones before).
__device__ __forceinline__ void atomic_add_f32x2(float* p, float a, float b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  atomicAdd(reinterpret_cast<float2*>(p), make_float2(a, b));
#else
  atomicAdd(p, a);
  atomicAdd(p + 1, b);
#endif
}

// Arrival counting between the blocks of one grid (flash_decode.cu's fused combine): every thread
// that wrote results fences, the block synchronises, one thread counts the block in; the block that
// arrives last fences again and reads the others' results from L2 (ld.global.cg: never a stale L1
// line).
__device__ __forceinline__ void thread_fence() { __threadfence(); }
__device__ __forceinline__ int atomic_add_i32(int* p, int v) { return atomicAdd(p, v); }
__device__ __forceinline__ void atomic_store_i32(int* p, int v) { atomicExch(p, v); }
__device__ __forceinline__ float ld_cg_f32(const float* p) { return __ldcg(p); }
__device__ __forceinline__ float2 ld_cg_f32x2(const float* p) {
  return __ldcg(reinterpret_cast<const float2*>(p));
}

}  // namespace attn_mma
