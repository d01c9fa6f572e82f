// Planted CUDA faults for tests/test_faults.cpp (built only with CUDA, linked only into
// test_faults). Each must become one FAIL or SKIP row with its reason:
//   cuda.planted_bad_launch        launches a kernel with 2048 threads per block (the limit is
//                                  1024) and does not check: the harness's synchronisation must
//                                  find the launch error (FAIL). The error is not sticky, so the
//                                  run goes on, CUDA rows included;
//   cuda.planted_illegal_address   a kernel stores through an address no allocation covers:
//                                  cudaErrorIllegalAddress, a sticky error that poisons the
//                                  context (FAIL, later CUDA rows SKIP, results complete=false);
//   cuda.planted_device_oom        asks for a 1 PiB workspace: cudaMalloc fails (SKIP).
// None computes attention: they write nothing useful, use no workspace (but the 1 PiB request)
// and exist only to fault. Forward only.
#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>

#include "attnbench/implementation.hpp"

namespace attnbench::planted {
namespace {

// lse: [n] floats.
__global__ void fill_zero(float* lse, int n) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) lse[i] = 0.0f;
}

// bad: an address outside every allocation.
__global__ void store_to(float* bad) { bad[threadIdx.x] = 1.0f; }

class CudaFault : public Implementation {
 public:
  Device device() const override { return Device::cuda; }
  Capabilities capabilities() const override { return Capabilities{}; }
};

class BadLaunch final : public CudaFault {
 public:
  std::string name() const override { return "cuda.planted_bad_launch"; }
  std::string summary() const override { return "planted: launch with 2048 threads per block, unchecked"; }
  void forward(const FwdArgs& a) const override {
    fill_zero<<<1, 2048, 0, static_cast<cudaStream_t>(a.stream)>>>(a.lse, 1);
  }
};

class IllegalAddress final : public CudaFault {
 public:
  std::string name() const override { return "cuda.planted_illegal_address"; }
  std::string summary() const override { return "planted: a kernel stores to an unmapped address (sticky error)"; }
  void forward(const FwdArgs& a) const override {
    // A kernel argument, so the device code cannot fold it; nothing is mapped at page 1.
    float* bad = reinterpret_cast<float*>(std::uintptr_t{0x1000});
    store_to<<<1, 32, 0, static_cast<cudaStream_t>(a.stream)>>>(bad);
  }
};

class DeviceOom final : public CudaFault {
 public:
  std::string name() const override { return "cuda.planted_device_oom"; }
  std::string summary() const override { return "planted: asks for a 1 PiB workspace"; }
  std::size_t workspace_bytes(const Problem&, Pass, const Options&) const override { return std::size_t{1} << 50; }
  void forward(const FwdArgs&) const override {
    throw std::logic_error("cuda.planted_device_oom: called although its workspace cannot exist");
  }
};

}  // namespace
}  // namespace attnbench::planted

ATTNBENCH_REGISTER(attnbench::planted::BadLaunch)
ATTNBENCH_REGISTER(attnbench::planted::IllegalAddress)
ATTNBENCH_REGISTER(attnbench::planted::DeviceOom)
