// The CUDA-core kernels' shared pieces (flash_fwd, online_2pass, flash_bwd: the
// FlashAttention-1 class, float32 tiles in shared memory, FMA on CUDA cores): their head_dim
// tiles (CcHeadDims) and tile traits (one struct per tile), their params struct (CcParams,
// make_cc_params), the row-group reductions and the tile helpers.
#pragma once

#include <cstdint>

#include "common/device.cuh"
#include "common/shape.hpp"

namespace attnbench::cuda {

// ---- head_dim buckets and CUDA-core tile traits -----------------------------------------------
//
// The CUDA-core kernels are compiled for four head_dim tiles (32, 64, 128, 256); a head_dim
// runs in the smallest tile that holds it, the columns past head_dim being zero in shared
// memory (loads stop at head_dim, so the score work is exact; P·V does the padded columns too).
// Four tiles rather than one per multiple of 8 keep the build within CI's budget.
using CcHeadDims = HeadDims<32, 64, 128, 256>;

template <class F>
decltype(auto) dispatch_head_dim(int d, F&& f) {
  return CcHeadDims::dispatch(d, static_cast<F&&>(f));
}

// The thread layout of every CUDA-core kernel: a row of a tile belongs to a group of 16 lanes
// (half a warp); lane t of the group owns score columns t, t+16, ... and the output columns
// kVecO*(t + 16q) + e, so shared-memory reads along a row are 16-byte chunks at consecutive
// addresses (no bank conflicts) and a row's reductions are 4 shuffles.
inline constexpr int kGroup = 16;

// Forward tiles (flash_fwd, online_2pass): kBlockR query rows per block of kThreads threads, each
// thread kRowsPerThread rows; the key tile Bc is a template parameter (see kDefaultBc).
// O accumulators per thread: kRowsPerThread * DB / 16 = 16..32 floats.
template <int DB>
struct CcFwdTile;
template <>
struct CcFwdTile<32> {
  static constexpr int kRowsPerThread = 4, kThreads = 256, kDefaultBc = 64;
};
template <>
struct CcFwdTile<64> {
  static constexpr int kRowsPerThread = 4, kThreads = 256, kDefaultBc = 64;
};
template <>
struct CcFwdTile<128> {
  static constexpr int kRowsPerThread = 4, kThreads = 256, kDefaultBc = 64;
};
// 2 rows per thread keeps the O accumulators at 32 floats; Bc 128 would need 297 KB of smem.
template <>
struct CcFwdTile<256> {
  static constexpr int kRowsPerThread = 2, kThreads = 256, kDefaultBc = 32;
};

// Backward tiles (flash_bwd): a block owns kBlockC keys (dK, dV in registers: 2 * kBlockC * DB /
// 256 = 16..64 floats per thread) and walks query tiles of kBlockR rows.
template <int DB>
struct CcBwdTile;
template <>
struct CcBwdTile<32> {
  static constexpr int kBlockC = 64, kBlockR = 64, kThreads = 256;
};
template <>
struct CcBwdTile<64> {
  static constexpr int kBlockC = 64, kBlockR = 64, kThreads = 256;
};
template <>
struct CcBwdTile<128> {
  static constexpr int kBlockC = 64, kBlockR = 32, kThreads = 256;
};
template <>
struct CcBwdTile<256> {
  static constexpr int kBlockC = 32, kBlockR = 32, kThreads = 256;
};

// Output-column vector width and chunk count of a thread: columns kVecO*(t + 16q) + e.
template <int DB>
inline constexpr int kVecO = DB / kGroup < 4 ? DB / kGroup : 4;
template <int DB>
inline constexpr int kChunksO = DB / (kGroup * kVecO<DB>);
// Row stride (floats) of Q/K-like tiles in shared memory: +4 keeps 16-byte alignment and makes
// rows j..j+7 start in different bank quads, so float4 reads of 8 different rows never conflict.
template <int DB>
inline constexpr int kStrideQK = DB + 4;

// The parameters of the CUDA-core kernels (flash_fwd, online_2pass, flash_bwd): one struct for
// the family, the shape (common/shape.hpp) at the head, built from the Problem by
// make_cc_params(); each call fills in its tensors. At most 128 bytes (past that ptxas generates
// other code for the same kernels).
struct CcParams : AttnShape {
  bool causal;
  bool partial;  // backward, group > 1: dk/dv are float partials per query head
  float scale;
  const void* q;  // [B, Sq, Hq, D]
  const void* k;  // [B, Skv, Hkv, D]
  const void* v;  // [B, Skv, Hkv, D]
  void* o;        // [B, Sq, Hq, D]
  float* lse;     // [B, Hq, Sq], natural log (read by the backward)
  float2* ml;     // online_2pass: [B, Hq, Sq] (running max in the log2 domain, sum)
  // Backward.
  const void* dout;
  const float* delta;  // [B, Hq, Sq]: rowsum(dO * O)
  float* dq_accum;     // [B, Sq, Hq, D], unscaled
  void* dk;  // group 1: [B, Skv, Hkv, D] in the dtype; else float partials [B, Skv, Hq, D]
  void* dv;
};
static_assert(sizeof(CcParams) <= 128, "see CcParams");

inline CcParams make_cc_params(const Problem& p) {
  CcParams c = with_shape<CcParams>(p);
  c.causal = p.causal;
  c.scale = static_cast<float>(p.effective_scale());
  return c;
}

// Reductions over the 16 lanes of a row group (xor offsets < 16 stay inside the half warp).
__device__ __forceinline__ float group_max(float v) {
#pragma unroll
  for (int o = kGroup / 2; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ __forceinline__ float group_sum(float v) {
#pragma unroll
  for (int o = kGroup / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
// Copies rows [row0, row0 + ROWS) of a BSHD tensor slice into a float tile in shared memory:
// dst[r * STRIDE + c] = mul * src[(row0 + r) * row_elems + c] for r < nrows, c < d, and 0 in
// the padding (rows past the sequence, columns d..DB), so padded lanes add exact zeros.
// src points at element (row 0, column 0) of the head; all NT threads of the block take part.
template <int ROWS, int DB, int STRIDE, int NT, class T>
__device__ __forceinline__ void load_tile(float* dst, const T* __restrict__ src, int row0,
                                          int nrows, std::int64_t row_elems, int d, float mul) {
  const int tid = static_cast<int>(threadIdx.x);
#pragma unroll 4
  for (int idx = tid; idx < ROWS * DB; idx += NT) {
    const int r = idx / DB, c = idx % DB;
    float x = 0.f;
    if (r < nrows && c < d)
      x = mul * to_float(src[static_cast<std::int64_t>(row0 + r) * row_elems + c]);
    dst[r * STRIDE + c] = x;
  }
}

// s[i][c] += sum_k a[(row_base + i) * SA + k] * b[(t + 16c) * SB + k] for k < kmax (a multiple
// of 4, <= DB): the score micro-tile of a thread (RT rows x NC columns), float4 reads.
template <int RT, int NC, int DB, int SA, int SB>
__device__ __forceinline__ void tile_dot(float (&s)[RT][NC], const float* a, const float* b,
                                         int row_base, int t, int kmax) {
#pragma unroll 2
  for (int k = 0; k < kmax; k += 4) {
    float4 av[RT], bv[NC];
#pragma unroll
    for (int i = 0; i < RT; ++i)
      av[i] = *reinterpret_cast<const float4*>(a + (row_base + i) * SA + k);
#pragma unroll
    for (int c = 0; c < NC; ++c)
      bv[c] = *reinterpret_cast<const float4*>(b + (t + kGroup * c) * SB + k);
#pragma unroll
    for (int i = 0; i < RT; ++i) {
#pragma unroll
      for (int c = 0; c < NC; ++c) {
        s[i][c] = fmaf(av[i].x, bv[c].x, s[i][c]);
        s[i][c] = fmaf(av[i].y, bv[c].y, s[i][c]);
        s[i][c] = fmaf(av[i].z, bv[c].z, s[i][c]);
        s[i][c] = fmaf(av[i].w, bv[c].w, s[i][c]);
      }
    }
  }
}

// Loads this thread's output columns of row `row` of a tile (row stride SB) into v.
template <int DB, int SB>
__device__ __forceinline__ void load_out_cols(float (&v)[DB / kGroup], const float* b, int row,
                                              int t) {
  constexpr int VO = kVecO<DB>, NQ = kChunksO<DB>;
#pragma unroll
  for (int q = 0; q < NQ; ++q) {
    const float* src = b + row * SB + VO * (t + kGroup * q);
    if constexpr (VO == 4) {
      const float4 x = *reinterpret_cast<const float4*>(src);
      v[4 * q] = x.x, v[4 * q + 1] = x.y, v[4 * q + 2] = x.z, v[4 * q + 3] = x.w;
    } else {
      const float2 x = *reinterpret_cast<const float2*>(src);
      v[2 * q] = x.x, v[2 * q + 1] = x.y;
    }
  }
}

// Output column of element e (0 <= e < DB/16) of lane t.
template <int DB>
__device__ __forceinline__ int out_col(int t, int e) {
  return kVecO<DB> * (t + kGroup * (e / kVecO<DB>)) + e % kVecO<DB>;
}

// acc[i][e] += sum_j p[(row_base + i) * SP + j] * b[j * SB + out_col(t, e)] for j < NJ: the
// P·V (or dS·K) micro-step of a thread, RT rows x DB/16 columns.
template <int RT, int DB, int NJ, int SP, int SB>
__device__ __forceinline__ void tile_pv(float (&acc)[RT][DB / kGroup], const float* p,
                                        const float* b, int row_base, int t) {
  static_assert(NJ % 4 == 0, "the key tile is read 4 columns at a time");
#pragma unroll 1
  for (int j = 0; j < NJ; j += 4) {
    float4 pv[RT];
#pragma unroll
    for (int i = 0; i < RT; ++i)
      pv[i] = *reinterpret_cast<const float4*>(p + (row_base + i) * SP + j);
#pragma unroll
    for (int jj = 0; jj < 4; ++jj) {
      float bv[DB / kGroup];
      load_out_cols<DB, SB>(bv, b, j + jj, t);
#pragma unroll
      for (int i = 0; i < RT; ++i) {
        const float pij = jj == 0 ? pv[i].x : jj == 1 ? pv[i].y : jj == 2 ? pv[i].z : pv[i].w;
#pragma unroll
        for (int e = 0; e < DB / kGroup; ++e) acc[i][e] = fmaf(pij, bv[e], acc[i][e]);
      }
    }
  }
}

// Grid y/z limits: the CUDA-core kernels put heads in y and batch in z.
inline Support check_grid_yz(const Problem& p) {
  if (p.heads_q > 65535 || p.batch > 65535)
    return Support::no("heads_q and batch must be <= 65535 (grid y/z)");
  return Support::yes();
}

}  // namespace attnbench::cuda
