// Host-side helpers of the mma.sync attention kernels: launches, kernel attributes and the
// device's shared-memory limit (emulation/mma/host.cuh is the CPU emulator's version).
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstddef>
#include <string>

#include "common/check.hpp"
#include "mma/dispatch.cuh"
#include "mma/ptx.cuh"

namespace attn_mma {

// Lets `kernel` use `bytes` of dynamic shared memory (needed above 48 KiB).
template <class... KArgs>
void set_dynamic_smem(void (*kernel)(KArgs...), int bytes) {
  ATTN_CHECK(cudaFuncSetAttribute(reinterpret_cast<const void*>(kernel),
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
}

// Asks for the largest shared-memory carveout for `kernel`, for a kernel meant to run several
// blocks per SM whose shared memory together exceeds what the driver's own choice might leave.
template <class... KArgs>
void prefer_max_shared(void (*kernel)(KArgs...)) {
  ATTN_CHECK(cudaFuncSetAttribute(reinterpret_cast<const void*>(kernel),
                                       cudaFuncAttributePreferredSharedMemoryCarveout,
                                       cudaSharedmemCarveoutMaxShared));
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

// A positive attribute of the current device, read from the driver once per device: the callers
// run inside timed calls. Each Attr has its own cache.
template <cudaDeviceAttr Attr>
int device_attribute() {
  constexpr int kDevices = 64;
  static std::atomic<int> cache[kDevices] = {};
  int dev = 0;
  ATTN_CHECK(cudaGetDevice(&dev));
  if (dev >= 0 && dev < kDevices) {
    if (const int n = cache[dev].load(std::memory_order_relaxed); n > 0) return n;
  }
  int value = 0;
  ATTN_CHECK(cudaDeviceGetAttribute(&value, Attr, dev));
  if (dev >= 0 && dev < kDevices) cache[dev].store(value, std::memory_order_relaxed);
  return value;
}

// Multiprocessors of the current device (flash_decode.cu's split-KV plan, the Hopper kernels'
// persistent grids).
inline int multiprocessors() {
  return device_attribute<cudaDevAttrMultiProcessorCount>();
}

// The current device's peak DRAM bandwidth in GB/s: 2 x memory clock x bus width, the figure the
// CUDA samples print (an H100 SXM 3352, an H200 4916); 0 where the driver reports no memory clock
// (flash_decode.cu's split-KV plan then assumes a fast memory).
inline double memory_peak_gbps() {
  const double khz = device_attribute<cudaDevAttrMemoryClockRate>();
  const double bits = device_attribute<cudaDevAttrGlobalMemoryBusWidth>();
  return 2.0 * khz * 1e3 * (bits / 8) / 1e9;
}

// Launches on `stream` (a cudaStream_t) and checks the launch.
template <class... KArgs, class... Args>
void launch(void (*kernel)(KArgs...), dim3 grid, dim3 block, std::size_t smem, void* stream,
            const Args&... args) {
  kernel<<<grid, block, smem, static_cast<cudaStream_t>(stream)>>>(args...);
  ATTN_CHECK(cudaGetLastError());
}

// As launch(), for a kernel that depends on the grid launched before it on the same stream: on
// sm_90 and later with programmatic stream serialisation, so that its launch overlaps the end of
// that grid (the kernel must call grid_dependency_wait() before reading what that grid wrote;
// ptx.cuh). Elsewhere a plain launch.
template <class... KArgs, class... Args>
void launch_dependent(void (*kernel)(KArgs...), dim3 grid, dim3 block, std::size_t smem,
                      void* stream, const Args&... args) {
  if (device_attribute<cudaDevAttrComputeCapabilityMajor>() < 9) {
    launch(kernel, grid, block, smem, stream, args...);
    return;
  }
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = static_cast<cudaStream_t>(stream);
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  ATTN_CHECK(cudaLaunchKernelEx(&cfg, kernel, args...));
}

}  // namespace attn_mma
