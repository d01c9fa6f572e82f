// Shared helpers of the CPU implementations (impls/cpu/*.cpp only): dtype <-> float conversion of
// tensor rows, float GEMMs on row-major tiles through Eigen, workspace carving and the thread
// count of a parallel loop.
//
// Vectorisation: bf16 conversions are integer loops that g++ -O3 vectorises; f16 conversions use
// the F16C instructions when the target has them (-march=native on x86-64), else the scalar
// converters of dtype.hpp. Both round to nearest even, bit-identical to store_from_float.
// GEMMs are Eigen's blocked kernels (AVX-512/AVX2 with -march=native).
#pragma once

// Eigen must not start its own OpenMP team inside ours: a GEMM called from a one-thread region
// would otherwise fork and allocate its blocking buffers on the heap.
#ifndef EIGEN_DONT_PARALLELIZE
#define EIGEN_DONT_PARALLELIZE
#endif

#include <omp.h>

// GCC 12 reports a false (maybe-)uninitialized inside its own AVX-512 intrinsics when Eigen
// inlines them (the `__Y = __Y` idiom of _mm512_undefined_*, GCC bug 105593).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <Eigen/Core>
#if defined(__F16C__)
#include <immintrin.h>
#endif
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>

#include "attnbench/dtype.hpp"
#include "attnbench/implementation.hpp"

namespace attnbench::cpu {

using Index = std::ptrdiff_t;
inline constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// ---- dtype rows <-> float --------------------------------------------------------------------

// dst[0..n) = src[0..n) as float; src points at the first element (in dtype t).
inline void to_float(const void* src, Index n, DType t, float* dst) {
  switch (t) {
    case DType::f32:
      std::memcpy(dst, src, static_cast<std::size_t>(n) * 4);
      return;
    case DType::bf16: {
      const auto* s = static_cast<const std::uint16_t*>(src);
      for (Index i = 0; i < n; ++i) dst[i] = std::bit_cast<float>(static_cast<std::uint32_t>(s[i]) << 16);
      return;
    }
    case DType::f16: {
      const auto* s = static_cast<const std::uint16_t*>(src);
      Index i = 0;
#if defined(__F16C__)
      for (; i + 8 <= n; i += 8) {
        const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i));
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
      }
#endif
      for (; i < n; ++i) dst[i] = f16_to_float(s[i]);
      return;
    }
  }
}

// dst[0..n) = src[0..n) rounded to dtype t (nearest even); dst points at the first element.
inline void from_float(const float* src, Index n, DType t, void* dst) {
  switch (t) {
    case DType::f32:
      std::memcpy(dst, src, static_cast<std::size_t>(n) * 4);
      return;
    case DType::bf16: {
      auto* d = static_cast<std::uint16_t*>(dst);
      for (Index i = 0; i < n; ++i) {  // float_to_bf16, written branch-free so it vectorises
        const std::uint32_t u = std::bit_cast<std::uint32_t>(src[i]);
        const std::uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
        const std::uint32_t nan = (u >> 16) | 0x40u;
        d[i] = static_cast<std::uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
      }
      return;
    }
    case DType::f16: {
      auto* d = static_cast<std::uint16_t*>(dst);
      Index i = 0;
#if defined(__F16C__)
      for (; i + 8 <= n; i += 8) {
        const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i), h);
      }
#endif
      for (; i < n; ++i) d[i] = float_to_f16(src[i]);
      return;
    }
  }
}

inline const void* elem_ptr(const void* base, std::int64_t i, DType t) {
  return static_cast<const char*>(base) + i * static_cast<std::int64_t>(dtype_size(t));
}
inline void* elem_ptr(void* base, std::int64_t i, DType t) {
  return static_cast<char*>(base) + i * static_cast<std::int64_t>(dtype_size(t));
}

// A rows x cols block of float, row-major with leading dimension ld.
struct FloatTile {
  const float* p = nullptr;
  Index ld = 0;
};

// Rows of one head of a BSHD tensor as float. `first` is the element index of the first row's
// first element, `stride` the distance between rows (heads * head_dim). f32 tensors are used in
// place (no copy); f16/bf16 rows are converted once into scratch (ld = cols).
inline FloatTile rows_as_float(const void* t, DType dt, std::int64_t first, std::int64_t stride,
                               int rows, int cols, float* scratch) {
  if (dt == DType::f32) return {static_cast<const float*>(t) + first, static_cast<Index>(stride)};
  for (int r = 0; r < rows; ++r) {
    to_float(elem_ptr(t, first + r * stride, dt), cols, dt, scratch + static_cast<Index>(r) * cols);
  }
  return {scratch, cols};
}

// Keys [j0, j0 + n) of sequence (or batch) b, kv head hk, of K or V as float: rows_as_float on
// the contiguous rows (kv_start(b) + j, dense BSHD or packed THD), or, for a paged problem, each
// row gathered through the block table (Problem::kv_row) into scratch ([n, d], also for f32).
// p is the whole problem (not Problem::sequence(b), which drops the block table).
inline FloatTile kv_rows_as_float(const Problem& p, const void* t, int b, int hk, int j0, int n,
                                  float* scratch) {
  const int d = p.head_dim;
  const std::int64_t stride = std::int64_t{p.heads_kv} * d;
  if (!p.paged()) {
    return rows_as_float(t, p.dtype, ((p.kv_start(b) + j0) * p.heads_kv + hk) * d, stride, n, d,
                         scratch);
  }
  for (int r = 0; r < n; ++r) {
    to_float(elem_ptr(t, p.kv_row(b, j0 + r) * stride + std::int64_t{hk} * d, p.dtype), d, p.dtype,
             scratch + static_cast<Index>(r) * d);
  }
  return {scratch, d};
}

// Store a float block (ld_src) into rows of a BSHD tensor, rounding to its dtype.
inline void store_rows(const float* src, Index ld_src, int rows, int cols, void* t, DType dt,
                       std::int64_t first, std::int64_t stride) {
  for (int r = 0; r < rows; ++r) {
    from_float(src + r * ld_src, cols, dt, elem_ptr(t, first + r * stride, dt));
  }
}

// ---- GEMM on float tiles ---------------------------------------------------------------------

using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Stride = Eigen::OuterStride<>;
using MatMap = Eigen::Map<RowMat, Eigen::Unaligned, Stride>;
using ConstMatMap = Eigen::Map<const RowMat, Eigen::Unaligned, Stride>;

inline ConstMatMap cmat(const float* p, Index rows, Index cols, Index ld) {
  return ConstMatMap(p, rows, cols, Stride(ld));
}
inline ConstMatMap cmat(FloatTile t, Index rows, Index cols) { return cmat(t.p, rows, cols, t.ld); }
inline MatMap mat(float* p, Index rows, Index cols, Index ld) { return MatMap(p, rows, cols, Stride(ld)); }

// c (+)= a * b for Eigen expressions a: [m, k], b: [k, n] (maps, their blocks or transposes).
// No scalar factor: Eigen folds one into its GEMM, but copies a scaled operand into a heap
// temporary on its matrix-vector path (m or n = 1), and implementations may not allocate.
// Callers scale inside the element-wise pass that follows, or once at the end.
// The product is cut into pieces whose packed operands stay within Eigen's stack-allocation
// limit (128 KiB), so Eigen's GEMM never reaches malloc either.
template <class A, class B>
void gemm(MatMap c, const A& a, const B& b, bool accumulate) {
  constexpr Index kPackElems = 32768;  // 128 KiB of float per packed operand
  const Index m = c.rows(), n = c.cols(), k = a.cols();
  if (m == 0 || n == 0) return;
  if (k == 0) {
    if (!accumulate) c.setZero();
    return;
  }
  const Index kc = std::min<Index>(k, 256);
  const Index mnc = kPackElems / kc;
  for (Index i0 = 0; i0 < m; i0 += mnc) {
    const Index mi = std::min(mnc, m - i0);
    for (Index j0 = 0; j0 < n; j0 += mnc) {
      const Index nj = std::min(mnc, n - j0);
      for (Index p0 = 0; p0 < k; p0 += kc) {
        const Index kp = std::min(kc, k - p0);
        auto cb = c.block(i0, j0, mi, nj);
        if (p0 == 0 && !accumulate) {
          cb.noalias() = a.block(i0, p0, mi, kp) * b.block(p0, j0, kp, nj);
        } else {
          cb.noalias() += a.block(i0, p0, mi, kp) * b.block(p0, j0, kp, nj);
        }
      }
    }
  }
}

// ---- Rows and visibility ----------------------------------------------------------------------

// The problem of batch b's rows and keys (lengths, masks): the problem itself when dense (no copy,
// so a dense call does exactly what it did), sequence b of a varlen batch otherwise, built in
// `seq`. Offsets into the tensors come from the whole problem (q_start, kv_start, lse_start).
inline const Problem& problem_of(const Problem& p, int b, Problem& seq) {
  if (!p.varlen()) return p;
  seq = p.sequence(b);
  return seq;
}

// Keys of the tile [j0, j0 + bc) that query row i sees: [lo, hi) of the tile (Problem::visible_in).
using TileRange = Problem::KeySpan;

// Row r of a float block as an Eigen array of n elements.
inline Eigen::Map<Eigen::ArrayXf> row_array(float* p, Index ld, Index r, Index n) {
  return Eigen::Map<Eigen::ArrayXf>(p + r * ld, n);
}

// ---- Workspace ------------------------------------------------------------------------------

// Carves 64-byte-aligned arrays out of a workspace. With a null base it only counts, so one
// layout function gives both the size (workspace_bytes) and the pointers (forward/backward).
// Addresses, not offsets, are aligned (rows then start on a cache line and Eigen's vector loops
// need no scalar peel), so the count allows 64 bytes for a misaligned base.
class Carver {
 public:
  explicit Carver(void* base = nullptr) : base_(static_cast<char*>(base)) {}
  template <class T>
  T* take(std::int64_t count) {
    const std::uintptr_t at = reinterpret_cast<std::uintptr_t>(base_) + off_;
    off_ += ((at + 63) & ~std::uintptr_t{63}) - at;
    T* p = base_ ? reinterpret_cast<T*>(base_ + off_) : nullptr;
    off_ += static_cast<std::size_t>(count) * sizeof(T);
    return p;
  }
  std::size_t bytes() const { return ((off_ + 63) & ~std::size_t{63}) + 64; }

 private:
  char* base_;
  std::size_t off_ = 0;
};

// Threads for a parallel loop whose threads each need `per_thread` bytes of workspace after
// `shared` bytes: OpenMP's maximum (the harness sizes the workspace for it), fewer only if the
// workspace is smaller than asked for; throws if it cannot hold even one thread's scratch.
// `who` is a literal: nothing here may allocate unless it throws.
inline int threads_for(std::size_t ws_bytes, std::size_t shared, std::size_t per_thread, const char* who) {
  const std::size_t avail = ws_bytes >= shared ? ws_bytes - shared : 0;
  const std::size_t fit = per_thread == 0 ? std::numeric_limits<std::size_t>::max() : avail / per_thread;
  const int t = static_cast<int>(std::min<std::size_t>(fit, static_cast<std::size_t>(omp_get_max_threads())));
  if (t < 1) throw std::runtime_error(std::string(who) + ": workspace of " + std::to_string(ws_bytes) + " bytes is too small");
  return t;
}

inline std::size_t workspace_for(std::size_t shared, std::size_t per_thread) {
  return shared + per_thread * static_cast<std::size_t>(omp_get_max_threads());
}

// Scratch of thread `tid`: the workspace after `shared` bytes, one block of `per_thread` each.
inline void* thread_scratch(void* ws, std::size_t shared, std::size_t per_thread, int tid) {
  return static_cast<char*>(ws) + shared + per_thread * static_cast<std::size_t>(tid);
}

// A tile-size option: `fallback` when absent, else in [1, 1024].
inline int tile_option(const Options& opts, const char* key, int fallback, const char* who) {
  const auto it = opts.find(key);
  if (it == opts.end()) return fallback;
  if (it->second < 1 || it->second > 1024) {
    throw std::invalid_argument(std::string(who) + ": option " + key + " = " + std::to_string(it->second) +
                                " must be in 1..1024");
  }
  return static_cast<int>(it->second);
}

// Query-tile (Br) and key-tile (Bc) sizes from the options block_r / block_c.
struct Tiles {
  int br, bc;
};
inline Tiles tiles_from(const Options& opts, int default_r, int default_c, const char* who) {
  return {tile_option(opts, "block_r", default_r, who), tile_option(opts, "block_c", default_c, who)};
}

// Task t of a loop over tasks, heaviest first: for causal problems the last query tiles see the
// most keys, so hand them out first under dynamic scheduling.
inline int heaviest_first(int t, int n, bool causal) { return causal ? n - 1 - t : t; }

}  // namespace attnbench::cpu
