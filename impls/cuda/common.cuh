// Shared helpers of the CUDA implementations (impls/cuda/*.cu):
//   - checked calls: ATTN_CUDA_CHECK / ATTN_CUDA_CHECK_LAUNCH / ATTN_CUBLAS_CHECK throw
//     std::runtime_error("file:line: call: error string"), which the harness records as a FAIL;
//   - dtype traits: attnbench::DType -> float / __half / __nv_bfloat16, load-as-float and
//     store-from-float on the device, and a static dispatch switch over the dtype;
//   - the head_dim bucket switch and the CUDA-core tile traits (one struct per head_dim bucket),
//     plus the tile helpers the CUDA-core kernels share (flash_fwd, flash_bwd, online_2pass);
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

namespace attnbench::cuda {

// ---- checked calls ---------------------------------------------------------------------------

[[noreturn]] inline void throw_cuda_error(const char* file, int line, const char* what,
                                          const char* msg) {
  throw std::runtime_error(std::string(file) + ":" + std::to_string(line) + ": " + what + ": " +
                           msg);
}

}  // namespace attnbench::cuda

#define ATTN_CUDA_CHECK(call)                                             \
  do {                                                                    \
    const cudaError_t attn_err_ = (call);                                 \
    if (attn_err_ != cudaSuccess)                                         \
      ::attnbench::cuda::throw_cuda_error(__FILE__, __LINE__, #call,      \
                                          cudaGetErrorString(attn_err_)); \
  } while (0)

// After a <<<...>>> launch: catches bad configurations (too much shared memory, too many
// threads) at once; faults inside the kernel surface at the harness's synchronisation.
#define ATTN_CUDA_CHECK_LAUNCH() ATTN_CUDA_CHECK(cudaGetLastError())

#define ATTN_CUBLAS_CHECK(call)                                             \
  do {                                                                      \
    const cublasStatus_t attn_st_ = (call);                                 \
    if (attn_st_ != CUBLAS_STATUS_SUCCESS)                                  \
      ::attnbench::cuda::throw_cuda_error(__FILE__, __LINE__, #call,        \
                                          cublasGetStatusString(attn_st_)); \
  } while (0)

namespace attnbench::cuda {

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

template <int N>
struct IntTag {
  static constexpr int value = N;
};

// The one switch from the run-time dtype to compile time: f(DTypeTraits<t>{}), whose ::type is
// the element type.
template <class F>
decltype(auto) dispatch_dtype(DType t, F&& f) {
  switch (t) {
    case DType::f32:
      return f(DTypeTraits<DType::f32>{});
    case DType::f16:
      return f(DTypeTraits<DType::f16>{});
    case DType::bf16:
      return f(DTypeTraits<DType::bf16>{});
  }
  throw std::invalid_argument("unknown dtype");
}

inline cudaDataType_t cuda_data_type(DType t) {
  return dispatch_dtype(t, [](auto traits) { return decltype(traits)::cuda_type; });
}

// ---- head_dim buckets and CUDA-core tile traits -----------------------------------------------
//
// The CUDA-core kernels are compiled for four head_dim buckets (32, 64, 128, 256); a head_dim
// runs in the smallest bucket that holds it, the columns past head_dim being zero in shared
// memory (loads stop at head_dim, so the score work is exact; P·V does the padded columns too).
// Four buckets rather than one per multiple of 8 keep the build within CI's budget.

inline int head_dim_bucket(int d) {
  return d <= 32 ? 32 : d <= 64 ? 64 : d <= 128 ? 128 : 256;
}

template <class F>
decltype(auto) dispatch_head_dim(int d, F&& f) {
  switch (head_dim_bucket(d)) {
    case 32:
      return f(IntTag<32>{});
    case 64:
      return f(IntTag<64>{});
    case 128:
      return f(IntTag<128>{});
    default:
      return f(IntTag<256>{});
  }
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
  ATTN_CUDA_CHECK_LAUNCH();
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
  ATTN_CUDA_CHECK_LAUNCH();
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
