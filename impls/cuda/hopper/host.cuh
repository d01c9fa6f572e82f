// Host-side helpers of the Hopper kernels: TMA tensor maps over the harness's BSHD tensors, and
// the check that the binary holds sm_90a code for a kernel. Launches, kernel attributes and the
// (dtype, head_dim) switch are those of the mma kernels (mma/host.cuh).
//
// cuTensorMapEncodeTiled is a driver-API function; it is resolved once through the runtime's
// cudaGetDriverEntryPointByVersion, so nothing links libcuda directly.
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "attnbench/problem.hpp"
#include "mma/host.cuh"

namespace attn_hopper {

using TensorMap = CUtensorMap;
using attn_mma::launch;

inline PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult status{};
    const cudaError_t e = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000,
                                                           cudaEnableDefault, &status);
    if (e != cudaSuccess || status != cudaDriverEntryPointSuccess || p == nullptr) {
      throw std::runtime_error("cuTensorMapEncodeTiled is not available from the CUDA driver");
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
  }();
  return fn;
}

// A 4-d map of a BSHD tensor [batch, seq, heads, head_dim] of 16-bit elements, with boxes of
// 64 columns x 1 head x `box_rows` rows x 1 batch, 128-byte swizzled in shared memory. Columns past
// head_dim and rows past seq read as zeros and are not written by stores.
inline TensorMap make_bshd_map(const void* base, bool bf16, int batch, int seq, int heads,
                               int head_dim, int box_rows) {
  TensorMap m;
  const cuuint64_t dims[4] = {static_cast<cuuint64_t>(head_dim), static_cast<cuuint64_t>(heads),
                              static_cast<cuuint64_t>(seq), static_cast<cuuint64_t>(batch)};
  const cuuint64_t row = static_cast<cuuint64_t>(head_dim) * 2;
  const cuuint64_t strides[3] = {row, row * heads, row * heads * seq};
  const cuuint32_t box[4] = {64, 1, static_cast<cuuint32_t>(box_rows), 1};
  const cuuint32_t elem_strides[4] = {1, 1, 1, 1};
  const CUresult r = tensor_map_encoder()(
      &m, bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 4,
      const_cast<void*>(base), dims, strides, box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
      CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    throw std::runtime_error("cuTensorMapEncodeTiled failed (CUresult " + std::to_string(r) +
                             ") for a [" + std::to_string(batch) + ", " + std::to_string(seq) +
                             ", " + std::to_string(heads) + ", " + std::to_string(head_dim) +
                             "] tensor");
  }
  return m;
}

// Multiprocessors of the current device (the size of a persistent grid): mma/host.cuh's.
using attn_mma::multiprocessors;

// Zeroes `bytes` of device memory on `stream` (a cudaStream_t).
inline void launch_memset_zero(void* dst, std::size_t bytes, void* stream) {
  ATTN_CHECK(cudaMemsetAsync(dst, 0, bytes, static_cast<cudaStream_t>(stream)));
}

// Empty when `kernel` has sm_90a machine code for the current device, else why not.
template <class... KArgs>
std::string sm90a_missing(void (*kernel)(KArgs...)) {
  int dev = 0, major = 0, minor = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess) {
    (void)cudaGetLastError();
    return "cannot query the CUDA device";
  }
  if (major != 9 || minor != 0) {
    return "needs a Hopper GPU (sm_90a: wgmma, TMA); this device is sm_" + std::to_string(major) +
           std::to_string(minor);
  }
  cudaFuncAttributes attr{};
  if (cudaFuncGetAttributes(&attr, reinterpret_cast<const void*>(kernel)) != cudaSuccess) {
    (void)cudaGetLastError();
    return "the binary has no code for this kernel on this device";
  }
  // ptxVersion < 90: the kernel came from older PTX compiled at load time (its body is a trap).
  if (attr.binaryVersion != 90 || attr.ptxVersion < 90) {
    return "built without sm_90a code (ATTNBENCH_CUDA_GENCODE needs "
           "-gencode=arch=compute_90a,code=sm_90a)";
  }
  return {};
}

}  // namespace attn_hopper
