// cudaProfilerStart / cudaProfilerStop (profiler.hpp).
#include "attnbench/profiler.hpp"

#ifdef ATTNBENCH_WITH_CUDA
#include <cuda_profiler_api.h>
#include <cuda_runtime.h>
#endif

namespace attnbench {

ProfilerCapture::ProfilerCapture([[maybe_unused]] bool on) {
#ifdef ATTNBENCH_WITH_CUDA
  // Without a profiler attached these are no-ops; an error (no device) is cleared, not sticky.
  on_ = on && cudaProfilerStart() == cudaSuccess;
  if (on && !on_) cudaGetLastError();
#endif
}

ProfilerCapture::~ProfilerCapture() {
#ifdef ATTNBENCH_WITH_CUDA
  if (on_ && cudaProfilerStop() != cudaSuccess) cudaGetLastError();
#endif
}

}  // namespace attnbench
