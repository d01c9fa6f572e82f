// The peak-memory probe (memory_probe.hpp).
#include "attnbench/memory_probe.hpp"

#include <malloc.h>

#include <algorithm>
#include <fstream>

#ifdef ATTNBENCH_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace attnbench {

namespace {

// Fields of /proc/self/status in bytes (VmRSS, VmHWM), -1 when absent.
std::int64_t proc_status_bytes(const char* key) {
  std::ifstream f("/proc/self/status");
  std::string line;
  const std::string k = std::string(key) + ":";
  while (std::getline(f, line)) {
    if (line.rfind(k, 0) == 0) return std::stoll(line.substr(k.size())) * 1024;
  }
  return -1;
}

}  // namespace

void PeakProbe::configure_process() {
  mallopt(M_MMAP_THRESHOLD, 1 << 20);
}

void PeakProbe::begin() {
  if (device_ == Device::cuda) {
#ifdef ATTNBENCH_WITH_CUDA
    std::size_t free = 0, total = 0;
    if (cudaMemGetInfo(&free, &total) == cudaSuccess) {
      before_ = static_cast<std::int64_t>(total - free);
      method_ = "cudaMemGetInfo";
    } else {
      cudaGetLastError();
    }
#endif
    return;
  }
  std::ofstream clear("/proc/self/clear_refs");
  clear << "5";
  clear.flush();
  if (clear.good()) {
    before_ = proc_status_bytes("VmRSS");
    method_ = "VmHWM-reset";
  } else {
    // Without the reset only growth beyond the process's earlier peak is visible.
    before_ = proc_status_bytes("VmHWM");
    method_ = "VmHWM-growth";
  }
}

std::optional<std::int64_t> PeakProbe::end() const {
  if (method_.empty() || before_ < 0) return std::nullopt;
  std::int64_t after = -1;
  if (device_ == Device::cuda) {
#ifdef ATTNBENCH_WITH_CUDA
    std::size_t free = 0, total = 0;
    if (cudaMemGetInfo(&free, &total) != cudaSuccess) {
      cudaGetLastError();
      return std::nullopt;
    }
    after = static_cast<std::int64_t>(total - free);
#endif
  } else {
    after = proc_status_bytes("VmHWM");
  }
  if (after < 0) return std::nullopt;
  return std::max<std::int64_t>(0, after - before_);
}

}  // namespace attnbench
