// The device-side vocabulary of the CUDA implementations that use CUDA's own element types
// (cuda_core/, library/standard_cublas.cu):
//   - checked calls: ATTN_CHECK (common/check.hpp) on cuBLAS statuses too;
//   - dtype traits: attnbench::DType -> float / __half / __nv_bfloat16, load-as-float and
//     store-from-float on the device, and dispatch_dtype over the three dtypes (dispatch.hpp);
//   - the causal mask's visible range (causal_limit) and warp reductions;
//   - small kernels several implementations need: D = rowsum(dO * O), float -> dtype conversion;
//   - workspace carving (common/workspace.hpp) and device limits.
// The mma and Hopper families have their own element types (half_t, bfloat_t in mma/ptx.cuh),
// so that their CPU emulation can stand in for them.
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
#include "common/check.hpp"
#include "common/dispatch.hpp"
#include "common/workspace.hpp"

namespace attnbench::cuda {

// For ATTN_CHECK on cuBLAS calls.
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

inline constexpr float kLog2e = 1.4426950408889634f;
inline constexpr float kLn2 = 0.6931471805599453f;

// ---- causal mask and warp reductions -----------------------------------------------------------

// Keys [0, causal_limit) are visible to query row i (bottom-right aligned causal mask).
__host__ __device__ __forceinline__ int causal_limit(int i, int sq, int skv, bool causal) {
  if (!causal) return skv;
  const long long end = static_cast<long long>(i) + skv - sq + 1;
  return end < 0 ? 0 : end > skv ? skv : static_cast<int>(end);
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
  ATTN_CHECK(cudaGetLastError());
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
  ATTN_CHECK(cudaGetLastError());
}

// ---- device limits -----------------------------------------------------------------------------

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

}  // namespace attnbench::cuda
