// Shared-memory tiles and warp-level GEMM building blocks of the mma.sync attention kernels.
//
// SmemTile<R, C>: an R x C tile of 16-bit elements, row-major, whose 16-byte chunks are XOR-
// swizzled by (row % 8). The eight rows that one ldmatrix 8x8 matrix reads then fall in eight
// distinct bank groups, and so do the 16-byte cp.async writes of eight consecutive chunks of a row:
// no bank conflicts and no padding. Needs at least 8 chunks (64 elements) per row.
//
// Warp GEMMs, all on m16n8k16 fragments (see ptx.cuh for the layouts): C[m][n] += sum_k A B.
// Names: gemm_<A from><B from>_<A stored><B stored>; from s: shared memory, r: registers (A as
// fragments); stored n: as the product uses it (A[m][k], B[k][n]), t: transposed (A[k][m],
// B[n][k]).
//   gemm_ss_nt: A[m][k], B[n][k]   (S = Q K^T, dP = dO V^T: Q, K, dO, V stored [row][head_dim])
//   gemm_ss_tn: A[k][m], B[k][n]   (dV += P^T dO, dK += dS^T Q: P, dS stored [query][key])
//   gemm_ss_nn: A[m][k], B[k][n]   (dQ = dS K: dS stored [query][key], K [key][head_dim])
//   gemm_rs_nn: A registers, B[k][n] (O += P V with P from the S accumulators)
#pragma once

#include <cstdint>

#include "mma/ptx.cuh"

namespace attn_mma {

template <int kRows_, int kCols_>
struct SmemTile {
  static constexpr int kRows = kRows_;
  static constexpr int kCols = kCols_;
  static constexpr int kChunksPerRow = kCols / 8;
  static constexpr int kRowBytes = kCols * 2;
  static constexpr int kBytes = kRows * kRowBytes;
  static_assert(kCols % 64 == 0, "the (row % 8) swizzle needs >= 8 16-byte chunks per row");
  static_assert(kRows % 16 == 0, "tiles are whole m16/k16 fragments");

  uint32_t base;  // shared-window address of element (0, 0)

  // Address of element (row, col); col % 8 is the position inside a 16-byte chunk.
  __device__ __forceinline__ uint32_t addr(int row, int col) const {
    const int chunk = (col >> 3) ^ (row & 7);
    return base + static_cast<uint32_t>(row * (kCols * 2) + (chunk << 4) + ((col & 7) << 1));
  }
};

// ---- global -> shared ---------------------------------------------------------------------------

// Starts the asynchronous copy of rows [0, kRows) of a row-major global tile (row stride `stride`
// elements, 16-byte aligned rows) into `tile`; rows >= valid_rows are zero-filled, and with
// kMaskCols so are columns >= valid_cols (a multiple of 8: a head_dim below the tile width).
// Called by all kThreads threads of the block (tid = threadIdx.x).
template <int kThreads, bool kMaskCols = false, class Tile, class T>
__device__ __forceinline__ void load_tile_async(Tile tile, const T* g, int64_t stride,
                                                int valid_rows, int tid, int valid_cols = 0) {
  // Thread tid copies chunk tid % kChunksPerRow of rows tid / kChunksPerRow + i * kRowsPerPass:
  // the addresses are affine in i (the swizzle key row % 8 does not change), so a thread keeps
  // one shared and one global address instead of one per chunk.
  static_assert(kThreads % Tile::kChunksPerRow == 0, "whole rows per pass");
  constexpr int kRowsPerPass = kThreads / Tile::kChunksPerRow;
  static_assert(kRowsPerPass % 8 == 0 && Tile::kRows % kRowsPerPass == 0, "affine swizzle");
  const int row0 = tid / Tile::kChunksPerRow;
  const int col = (tid % Tile::kChunksPerRow) * 8;
  const uint32_t dst = tile.addr(row0, col);
  const T* src = g + row0 * stride + col;
#pragma unroll
  for (int i = 0; i < Tile::kRows / kRowsPerPass; ++i) {
    const bool ok = row0 + i * kRowsPerPass < valid_rows && (!kMaskCols || col < valid_cols);
    cp_async_16(dst + i * kRowsPerPass * Tile::kRowBytes, ok ? src + i * kRowsPerPass * stride : g,
                ok);
  }
}

// Starts the asynchronous copy of n floats g[0, n) to shared memory at dst (row i at dst + 4 i);
// elements >= valid are zeroed. 4-byte copies: rows of LSE-like vectors are not 16-byte aligned.
template <int kThreads, int kN>
__device__ __forceinline__ void load_vec_async(uint32_t dst, const float* g, int valid, int tid) {
#pragma unroll
  for (int i = tid; i < kN; i += kThreads) {
    const bool ok = i < valid;
    cp_async_4(dst + 4 * i, ok ? g + i : g, ok);
  }
}

// ---- ldmatrix addressing ------------------------------------------------------------------------

// Per-lane ldmatrix addresses into a tile, for one lane pattern (row_lane(lane), chunk_lane(lane)
// in {0, 1}): the four swizzled chunk offsets a lane can need, so that every address of an
// unrolled GEMM is one of four registers plus an immediate (a naive address per (row, col) pair
// would be hoisted out of the loops and pin dozens of registers).
// Address of the 8x8 matrix row at (row0 + row_lane + r, col0 + 8 chunk_lane + c) is (*this)(r, c).
// Preconditions: row0 % 8 == 0 and r % 8 == 0 (the swizzle key row % 8 is row_lane % 8);
// col0 % 16 == 0, c % 16 == 0, and col0 / 8 shares no set bit with any c / 8 (col0 a multiple of
// a power of two above every c used), so that chunk = chunk_lane ^ col0/8 ^ c/8.
struct LdsmPtr {
  uint32_t a[4];

  template <class Tile>
  __device__ __forceinline__ LdsmPtr(Tile t, int row0, int col0, int row_lane, int chunk_lane) {
    const int u = col0 >> 3;
    const uint32_t b =
        t.base + static_cast<uint32_t>((row0 + row_lane) * Tile::kRowBytes + ((u & ~7) << 4));
    const int x = chunk_lane ^ (u & 7) ^ (row_lane & 7);
#pragma unroll
    for (int i = 0; i < 4; ++i) a[i] = b + static_cast<uint32_t>((x ^ (2 * i)) << 4);
  }
  __device__ __forceinline__ LdsmPtr(const LdsmPtr& p, uint32_t offset) {
#pragma unroll
    for (int i = 0; i < 4; ++i) a[i] = p.a[i] + offset;
  }
  template <class Tile>
  __device__ __forceinline__ uint32_t at(int r, int c) const {
    return a[(c >> 4) & 3] + static_cast<uint32_t>(r * Tile::kRowBytes + ((c >> 6) << 7));
  }
};

// The two lane patterns (lane l):
//   P1: row l % 16, chunk l / 16             -> A [m][k] plain; B [k][n] .trans (2 n-tiles)
//   P2: row l % 8 + 8 (l / 16), chunk l / 8 % 2 -> B [n][k] plain (2 n-tiles); A [k][m] .trans
template <class Tile>
__device__ __forceinline__ LdsmPtr ldsm_p1(Tile t, int row0, int col0, int lane) {
  return LdsmPtr(t, row0, col0, lane & 15, lane >> 4);
}
template <class Tile>
__device__ __forceinline__ LdsmPtr ldsm_p2(Tile t, int row0, int col0, int lane) {
  return LdsmPtr(t, row0, col0, (lane & 7) + ((lane >> 4) << 3), (lane >> 3) & 1);
}

// ---- warp GEMMs ---------------------------------------------------------------------------------
// Operands are LdsmPtr cursors of the pattern named in each comment; TA/TB are the tile types
// (for the row pitch).

// acc (kMT x kNT fragments of 16x8) += A * B, both from shared memory, k over kK16 * 16.
// kATrans = false: A stored [m][k] (k contiguous), pa a P1 cursor, plain loads;
//         = true:  A stored [k][m] (m contiguous), pa a P2 cursor, .trans loads.
// kBTrans = false: B stored [n][k] (k contiguous), pb a P2 cursor, plain loads;
//         = true:  B stored [k][n] (n contiguous), pb a P1 cursor, .trans loads.
// Each A fragment is loaded once per k-step and reused across the kNT n-tiles; each B load covers
// two n-tiles and is reused across the kMT m-tiles.
template <bool kATrans, bool kBTrans, class T, class TA, class TB, int kK16, int kMT, int kNT>
__device__ __forceinline__ void gemm_ss(float (&acc)[kMT][kNT][4], const LdsmPtr& pa,
                                        const LdsmPtr& pb) {
  static_assert(kNT % 2 == 0, "B fragments are loaded two n-tiles at a time");
#pragma unroll
  for (int kk = 0; kk < kK16; ++kk) {
    uint32_t a[kMT][4];
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
      if constexpr (kATrans) {
        ldsm_x4_trans(a[mt], pa.at<TA>(kk * 16, mt * 16));
      } else {
        ldsm_x4(a[mt], pa.at<TA>(mt * 16, kk * 16));
      }
    }
#pragma unroll
    for (int np = 0; np < kNT / 2; ++np) {
      uint32_t b[4];
      if constexpr (kBTrans) {
        ldsm_x4_trans(b, pb.at<TB>(kk * 16, np * 16));
      } else {
        ldsm_x4(b, pb.at<TB>(np * 16, kk * 16));
      }
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
        mma_16816<T>(acc[mt][2 * np], a[mt], b[0], b[1]);
        mma_16816<T>(acc[mt][2 * np + 1], a[mt], b[2], b[3]);
      }
    }
  }
}

// C[m][n] += sum_k A[m][k] B[n][k]: S = Q K^T, dP = dO V^T (Q, K stored [row][head_dim]).
template <class T, class TA, class TB, int kK16, int kMT, int kNT>
__device__ __forceinline__ void gemm_ss_nt(float (&acc)[kMT][kNT][4], const LdsmPtr& pa,
                                           const LdsmPtr& pb) {
  gemm_ss<false, false, T, TA, TB, kK16>(acc, pa, pb);
}

// C[m][n] += sum_k A[k][m] B[k][n]: dV += P^T dO with P stored [query][key] (A = P^T).
template <class T, class TA, class TB, int kK16, int kMT, int kNT>
__device__ __forceinline__ void gemm_ss_tn(float (&acc)[kMT][kNT][4], const LdsmPtr& pa,
                                           const LdsmPtr& pb) {
  gemm_ss<true, true, T, TA, TB, kK16>(acc, pa, pb);
}

// C[m][n] += sum_k A[m][k] B[k][n]: dQ = dS K with dS stored [query][key], K [key][head_dim].
template <class T, class TA, class TB, int kK16, int kMT, int kNT>
__device__ __forceinline__ void gemm_ss_nn(float (&acc)[kMT][kNT][4], const LdsmPtr& pa,
                                           const LdsmPtr& pb) {
  gemm_ss<false, true, T, TA, TB, kK16>(acc, pa, pb);
}

// acc (kMT x kNT fragments) += A (registers: kMT x kK16 A fragments) * B[k][n], B stored with n
// contiguous (e.g. V stored [key][head_dim] for O += P V). pb: P1 cursor on B (.trans loads).
template <class T, class TB, int kMT, int kNT, int kK16>
__device__ __forceinline__ void gemm_rs_nn(float (&acc)[kMT][kNT][4],
                                           const uint32_t (&a)[kMT][kK16][4], const LdsmPtr& pb) {
  static_assert(kNT % 2 == 0, "B fragments are loaded two n-tiles at a time");
#pragma unroll
  for (int kk = 0; kk < kK16; ++kk) {
#pragma unroll
    for (int np = 0; np < kNT / 2; ++np) {
      uint32_t b[4];
      ldsm_x4_trans(b, pb.at<TB>(kk * 16, np * 16));
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
        mma_16816<T>(acc[mt][2 * np], a[mt][kk], b[0], b[1]);
        mma_16816<T>(acc[mt][2 * np + 1], a[mt][kk], b[2], b[3]);
      }
    }
  }
}

// ---- fragments ----------------------------------------------------------------------------------

template <int kMT, int kNT>
__device__ __forceinline__ void zero(float (&acc)[kMT][kNT][4]) {
#pragma unroll
  for (int i = 0; i < kMT; ++i)
#pragma unroll
    for (int j = 0; j < kNT; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.f;
}

// The C fragments of a 16 x kNT*8 product, rounded to T, reused as the A fragments of the next
// product (16 x kNT*8 as m x k): n-tiles 2kk and 2kk+1 form k-step kk.
template <class T, int kMT, int kNT>
__device__ __forceinline__ void c_to_a(const float (&c)[kMT][kNT][4],
                                       uint32_t (&a)[kMT][kNT / 2][4]) {
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int kk = 0; kk < kNT / 2; ++kk) {
      a[mt][kk][0] = Elem<T>::pack2(c[mt][2 * kk][0], c[mt][2 * kk][1]);
      a[mt][kk][1] = Elem<T>::pack2(c[mt][2 * kk][2], c[mt][2 * kk][3]);
      a[mt][kk][2] = Elem<T>::pack2(c[mt][2 * kk + 1][0], c[mt][2 * kk + 1][1]);
      a[mt][kk][3] = Elem<T>::pack2(c[mt][2 * kk + 1][2], c[mt][2 * kk + 1][3]);
    }
}

// Writes C fragments (16 rows from row0, kNT*8 columns from col0), rounded to T, into a tile.
template <class T, int kNT, class Tile>
__device__ __forceinline__ void store_c(Tile tile, int row0, int col0, const float (&c)[kNT][4],
                                        int lane) {
  const int r = row0 + (lane >> 2), col = col0 + 2 * (lane & 3);
#pragma unroll
  for (int nt = 0; nt < kNT; ++nt) {
    st_shared_b32(tile.addr(r, col + nt * 8), Elem<T>::pack2(c[nt][0], c[nt][1]));
    st_shared_b32(tile.addr(r + 8, col + nt * 8), Elem<T>::pack2(c[nt][2], c[nt][3]));
  }
}

// One warp copies rows [row0, row0 + kRows) of a tile to global rows g + i * stride (i < valid
// rows; with kMaskCols, columns < valid_cols), 16 bytes per lane and instruction.
template <int kRows, bool kMaskCols = false, class Tile, class T>
__device__ __forceinline__ void store_rows_warp(Tile tile, int row0, T* g, int64_t stride,
                                                int valid_rows, int lane, int valid_cols = 0) {
  constexpr int kChunks = kRows * Tile::kChunksPerRow;
  static_assert(kChunks % 32 == 0, "whole warp-wide stores");
#pragma unroll
  for (int i = 0; i < kChunks / 32; ++i) {
    const int c = lane + 32 * i;
    const int row = c / Tile::kChunksPerRow;
    const int col = (c % Tile::kChunksPerRow) * 8;
    if (row < valid_rows && (!kMaskCols || col < valid_cols)) {
      *reinterpret_cast<uint4*>(g + row * stride + col) =
          ld_shared_b128(tile.addr(row0 + row, col));
    }
  }
}

}  // namespace attn_mma
