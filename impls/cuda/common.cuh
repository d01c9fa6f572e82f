// Shared helpers of the CUDA implementations (impls/cuda/*.cu):
//   - checked calls: ATTN_CUDA_CHECK (check.hpp) with cuBLAS statuses too;
//   - dtype traits: attnbench::DType -> float / __half / __nv_bfloat16, load-as-float and
//     store-from-float on the device, and dispatch_dtype over the three dtypes (dispatch.hpp);
//   - the CUDA-core kernels' head_dim tiles (CcHeadDims) and tile traits (one struct per tile),
//     their params struct (CcParams, make_cc_params), plus the tile helpers they share
//     (flash_fwd, flash_bwd, online_2pass);
//   - small kernels several implementations need: D = rowsum(dO * O), float -> dtype conversion;
//   - workspace carving.
#pragma once

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "attnbench/implementation.hpp"
#include "check.hpp"
#include "dispatch.hpp"

namespace attnbench::cuda {

// For ATTN_CUDA_CHECK on cuBLAS calls.
inline std::string call_error(cublasStatus_t s) {
  return s == CUBLAS_STATUS_SUCCESS ? std::string() : std::string(cublasGetStatusString(s));
}

inline cudaStream_t stream_of(void* s) {
  return static_cast<cudaStream_t>(s);
}

// ---- dtypes ----------------------------------------------------------------------------------

// DType -> device element type and cuBLAS data type.
template <DType>
struct DTypeTraits;
template <>
struct DTypeTraits<DType::f32> {
  using type = float;
  static constexpr cudaDataType_t cuda_type = CUDA_R_32F;
};
template <>
struct DTypeTraits<DType::f16> {
  using type = __half;
  static constexpr cudaDataType_t cuda_type = CUDA_R_16F;
};
template <>
struct DTypeTraits<DType::bf16> {
  using type = __nv_bfloat16;
  static constexpr cudaDataType_t cuda_type = CUDA_R_16BF;
};

__device__ __forceinline__ float to_float(float x) {
  return x;
}
__device__ __forceinline__ float to_float(__half x) {
  return __half2float(x);
}
__device__ __forceinline__ float to_float(__nv_bfloat16 x) {
  return __bfloat162float(x);
}

// Round to nearest even, like the host converters of dtype.hpp.
template <class T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ float from_float<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ __half from_float<__half>(float x) {
  return __float2half_rn(x);
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

// f(DTypeTraits<t>{}) for any of the three dtypes (dispatch.hpp's switch); ::type is the
// element type.
template <class F>
decltype(auto) dispatch_dtype(DType t, F&& f) {
  return dispatch_dtype<DTypeTraits, DType::f32, DType::f16, DType::bf16>(t, static_cast<F&&>(f));
}

inline cudaDataType_t cuda_data_type(DType t) {
  return dispatch_dtype(t, [](auto traits) { return decltype(traits)::cuda_type; });
}

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

inline constexpr float kLog2e = 1.4426950408889634f;
inline constexpr float kLn2 = 0.6931471805599453f;

// The parameters of the CUDA-core kernels (flash_fwd, online_2pass, flash_bwd): one struct for
// the family, sizes from the Problem by make_cc_params(); each call fills in its tensors. The
// forward's fields come first, in the order its kernel had them (its SASS is unchanged); at most
// 128 bytes (past that ptxas generates other code for the same kernel).
struct CcParams {
  const void* q;  // [B, Sq, Hq, D]
  const void* k;  // [B, Skv, Hkv, D]
  const void* v;  // [B, Skv, Hkv, D]
  void* o;        // [B, Sq, Hq, D]
  float* lse;     // [B, Hq, Sq], natural log (read by the backward)
  int sq, skv, hq, hkv, group, d;
  bool causal;
  float scale_log2;  // scale * log2(e): scores are kept in the log2 domain
  float2* ml;        // online_2pass: [B, Hq, Sq] (running max in the log2 domain, sum)
  // Backward.
  const void* dout;
  const float* dd;  // [B, Hq, Sq]: rowsum(dO * O)
  float* dq_acc;    // [B, Sq, Hq, D], unscaled
  void* dk;         // group 1: [B, Skv, Hkv, D] in the dtype; else float partials [B, Skv, Hq, D]
  void* dv;
  bool partial;
  float scale;
};
static_assert(sizeof(CcParams) <= 128, "see CcParams");

inline CcParams make_cc_params(const Problem& p) {
  CcParams c{};
  c.sq = p.seq_q;
  c.skv = p.seq_kv;
  c.hq = p.heads_q;
  c.hkv = p.heads_kv;
  c.group = p.group();
  c.d = p.head_dim;
  c.causal = p.causal;
  c.scale = static_cast<float>(p.effective_scale());
  c.scale_log2 = c.scale * kLog2e;
  return c;
}

// Keys [0, causal_limit) are visible to query row i (bottom-right aligned causal mask).
__host__ __device__ __forceinline__ int causal_limit(int i, int sq, int skv, bool causal) {
  if (!causal) return skv;
  const long long end = static_cast<long long>(i) + skv - sq + 1;
  return end < 0 ? 0 : end > skv ? skv : static_cast<int>(end);
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
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
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

// ---- small shared kernels ----------------------------------------------------------------------

// dd[b, h, i] = sum_d dout[b, i, h, d] * o[b, i, h, d] (float32), one warp per row.
// o, dout: [B, Sq, Hq, D]; dd: [B, Hq, Sq].
template <class T>
__global__ void row_dot_kernel(const T* __restrict__ o, const T* __restrict__ dout,
                               float* __restrict__ dd, std::int64_t rows, int sq, int hq, int d) {
  const std::int64_t row =
      static_cast<std::int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  if (row >= rows) return;
  const int lane = static_cast<int>(threadIdx.x % 32);
  const T* a = o + row * d;
  const T* b = dout + row * d;
  float s = 0.f;
  for (int c = lane; c < d; c += 32) s = fmaf(to_float(a[c]), to_float(b[c]), s);
  s = warp_sum(s);
  if (lane == 0) {
    const std::int64_t h = row % hq, bi = row / hq / sq, i = (row / hq) % sq;
    dd[(bi * hq + h) * sq + i] = s;
  }
}

template <class T>
inline void launch_row_dot(const T* o, const T* dout, float* dd, const Problem& p,
                           cudaStream_t st) {
  const std::int64_t rows = static_cast<std::int64_t>(p.batch) * p.seq_q * p.heads_q;
  constexpr int kWarps = 8;
  const auto blocks = static_cast<unsigned>((rows + kWarps - 1) / kWarps);
  row_dot_kernel<T>
      <<<blocks, kWarps * 32, 0, st>>>(o, dout, dd, rows, p.seq_q, p.heads_q, p.head_dim);
  ATTN_CUDA_CHECK(cudaGetLastError());
}

// dst[i] = mul * src[i] rounded to T.
template <class T>
__global__ void scale_convert_kernel(const float* __restrict__ src, T* __restrict__ dst,
                                     std::int64_t n, float mul) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride)
    dst[i] = from_float<T>(mul * src[i]);
}

// Enough blocks to fill a large GPU; the grid-stride loop covers the rest.
inline unsigned elementwise_blocks(std::int64_t n, int threads) {
  const std::int64_t b = (n + threads - 1) / threads;
  return static_cast<unsigned>(b < 65536 ? (b > 0 ? b : 1) : 65536);
}

template <class T>
inline void launch_scale_convert(const float* src, T* dst, std::int64_t n, float mul,
                                 cudaStream_t st) {
  scale_convert_kernel<T><<<elementwise_blocks(n, 256), 256, 0, st>>>(src, dst, n, mul);
  ATTN_CUDA_CHECK(cudaGetLastError());
}

// ---- workspace carving
// ---------------------------------------------------------------------------

inline constexpr std::size_t kWorkspaceAlign = 256;
inline constexpr std::size_t align_up(std::size_t n, std::size_t a = kWorkspaceAlign) {
  return (n + a - 1) / a * a;
}

// Hands out consecutive 256-byte aligned pieces of the harness's workspace; throws if the
// workspace is smaller than the pieces requested (a harness/implementation mismatch).
class WorkspaceCarver {
 public:
  WorkspaceCarver(void* base, std::size_t bytes) : base_(static_cast<char*>(base)), bytes_(bytes) {}
  template <class T>
  T* take(std::size_t count) {
    const std::size_t need = align_up(count * sizeof(T));
    const auto addr = reinterpret_cast<std::uintptr_t>(base_ + used_);
    const std::size_t pad = align_up(addr) - addr;  // base may not be 256-aligned
    if (used_ + pad + need > bytes_)
      throw std::runtime_error("workspace too small: need more than " + std::to_string(bytes_) +
                               " bytes");
    T* p = reinterpret_cast<T*>(base_ + used_ + pad);
    used_ += pad + need;
    return p;
  }

 private:
  char* base_;
  std::size_t bytes_;
  std::size_t used_ = 0;
};

// Bytes a WorkspaceCarver needs for these pieces (each rounded up, plus slack for a base that is
// not 256-aligned).
inline std::size_t carve_bytes(std::initializer_list<std::size_t> pieces) {
  std::size_t n = kWorkspaceAlign;
  for (std::size_t p : pieces) n += align_up(p);
  return n;
}

// ---- device limits
// --------------------------------------------------------------------------------

// Opt-in dynamic shared memory per block of the current device (0 if no device).
inline std::size_t max_smem_optin() {
  int dev = 0, v = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess) {
    (void)cudaGetLastError();  // not a sticky error: clear it so no later launch check reports it
    return 0;
  }
  return static_cast<std::size_t>(v);
}

// Grid y/z limits: the CUDA-core kernels put heads in y and batch in z.
inline Support check_grid_yz(const Problem& p) {
  if (p.heads_q > 65535 || p.batch > 65535)
    return Support::no("heads_q and batch must be <= 65535 (grid y/z)");
  return Support::yes();
}

}  // namespace attnbench::cuda
