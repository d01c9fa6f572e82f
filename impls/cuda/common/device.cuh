// The device-side vocabulary of the CUDA-core and library kernels (cuda_core/, library/, ring/):
//   - checked calls: ATTN_CHECK (common/check.hpp) on cuBLAS statuses too;
//   - element types: common/dispatch.hpp (half_t, bfloat_t, Element<dtype>, dispatch_dtype),
//     here load-as-float and store-from-float on the device and cuBLAS's data types;
//   - the causal mask's visible range (causal_limit) and warp reductions;
//   - small kernels several implementations need: D = rowsum(dO * O), float -> dtype conversion;
//   - workspace carving (common/workspace.hpp) and device limits.
// The mma and Hopper families share the element types; their packed-pair conversions are
// mma/ptx.cuh's Elem.
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
#include "common/shape.hpp"
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

// The element types and their dispatch are common/dispatch.hpp's (half_t, bfloat_t,
// Element<t>::type, dispatch_dtype); here, float conversions on the device and cuBLAS's names.
__device__ __forceinline__ float to_float(float x) {
  return x;
}
__device__ __forceinline__ float to_float(half_t x) {
  return __half2float(x);
}
__device__ __forceinline__ float to_float(bfloat_t x) {
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
__device__ __forceinline__ half_t from_float<half_t>(float x) {
  return __float2half_rn(x);
}
template <>
__device__ __forceinline__ bfloat_t from_float<bfloat_t>(float x) {
  return __float2bfloat16_rn(x);
}

// cuBLAS's data type of a dtype.
inline cudaDataType_t cuda_data_type(DType t) {
  switch (t) {
    case DType::f32:
      return CUDA_R_32F;
    case DType::f16:
      return CUDA_R_16F;
    case DType::bf16:
      return CUDA_R_16BF;
  }
  throw std::invalid_argument("dtype " + std::string(to_string(t)) + " has no cuBLAS type");
}


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

// delta[b, h, i] = sum_d dout[b, i, h, d] * o[b, i, h, d] (float32), one warp per row.
// o, dout: [B, Sq, Hq, D]; delta: [B, Hq, Sq].
template <class T>
__global__ void row_dot_kernel(const T* __restrict__ o, const T* __restrict__ dout,
                               float* __restrict__ delta, std::int64_t rows, int sq, int hq,
                               int d) {
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
    delta[(bi * hq + h) * sq + i] = s;
  }
}

template <class T>
inline void launch_row_dot(const T* o, const T* dout, float* delta, const Problem& p,
                           cudaStream_t st) {
  const std::int64_t rows = static_cast<std::int64_t>(p.batch) * p.seq_q * p.heads_q;
  constexpr int kWarps = 8;
  const auto blocks = static_cast<unsigned>((rows + kWarps - 1) / kWarps);
  row_dot_kernel<T>
      <<<blocks, kWarps * 32, 0, st>>>(o, dout, delta, rows, p.seq_q, p.heads_q, p.head_dim);
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
