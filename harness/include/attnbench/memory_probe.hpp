// The peak memory of one call (docs/results_schema.md, Memory), measured around the validation
// call of a row: begin() before its buffers are allocated, end() once the call has finished.
//   CUDA: device memory in use (cudaMemGetInfo) after the call minus before the buffers: harness
//         buffers, workspace and whatever the implementation or its libraries allocated.
//   CPU:  the resident-set high-water mark (VmHWM), reset through /proc/self/clear_refs before
//         the buffers, minus the resident set then ("VmHWM-reset"); where the reset is not
//         allowed, only growth beyond the process's earlier peak is seen ("VmHWM-growth").
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "attnbench/implementation.hpp"

namespace attnbench {

class PeakProbe {
 public:
  explicit PeakProbe(Device d) : device_(d) {}

  // Once per process, before the first probe: a fixed mmap threshold, so that large buffers are
  // mapped and unmapped, never recycled from the heap, and the CPU peak of each row sees its own
  // allocations.
  static void configure_process();

  void begin();
  // Bytes above the level at begin(); absent when it could not be measured.
  std::optional<std::int64_t> end() const;
  // How: "cudaMemGetInfo", "VmHWM-reset", "VmHWM-growth", or "" when not measured.
  const std::string& method() const { return method_; }

 private:
  Device device_;
  std::int64_t before_ = -1;
  std::string method_;
};

}  // namespace attnbench
