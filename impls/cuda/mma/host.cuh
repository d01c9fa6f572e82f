// Host-side helpers of the mma.sync attention kernels: checked CUDA calls, launches, kernel
// attributes, and the static switch from run-time dtype to a compile-time element type.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <stdexcept>
#include <string>

#include "attnbench/dtype.hpp"
#include "mma/dispatch.cuh"
#include "mma/ptx.cuh"

namespace attn_mma {

inline void check_cuda(cudaError_t e, const char* what, const char* file, int line) {
  if (e != cudaSuccess) {
    throw std::runtime_error(std::string(file) + ":" + std::to_string(line) + ": " + what + ": " +
                             cudaGetErrorString(e));
  }
}
#define ATTN_MMA_CHECK(call) ::attn_mma::check_cuda((call), #call, __FILE__, __LINE__)

// Lets `kernel` use `bytes` of dynamic shared memory (needed above 48 KiB).
template <class... KArgs>
void set_dynamic_smem(void (*kernel)(KArgs...), int bytes) {
  ATTN_MMA_CHECK(cudaFuncSetAttribute(reinterpret_cast<const void*>(kernel),
                                      cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
}

// Opt-in shared memory per block of the current device, or -1 (and `why`) if it cannot be read.
inline int max_smem_per_block(std::string& why) {
  int dev = 0, bytes = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e == cudaSuccess)
    e = cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
  if (e != cudaSuccess) {
    why = std::string("cannot query the CUDA device: ") + cudaGetErrorString(e);
    (void)cudaGetLastError();  // clear the error so that it does not surface in a later check
    return -1;
  }
  return bytes;
}

// Launches on `stream` (a cudaStream_t) and checks the launch.
template <class... KArgs, class... Args>
void launch(void (*kernel)(KArgs...), dim3 grid, dim3 block, std::size_t smem, void* stream,
            const Args&... args) {
  kernel<<<grid, block, smem, static_cast<cudaStream_t>(stream)>>>(args...);
  ATTN_MMA_CHECK(cudaGetLastError());
}

}  // namespace attn_mma
