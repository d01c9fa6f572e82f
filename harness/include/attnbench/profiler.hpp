// cudaProfilerStart / cudaProfilerStop around the measured region, for profilers started with
// their capture off:
//   nsys profile --capture-range=cudaProfilerApi ...     ncu --profile-from-start off ...
// The measured region is, with `run --profile`, each CUDA row's own call (not its buffers and
// uploads, not the naive baseline's call, the reference or the ceilings), so ncu profiles exactly
// the implementations' kernels; when timing, the whole timing phase (every timed call and its L2
// flush). Nothing happens in a build without CUDA, or where there is no CUDA device.
#pragma once

namespace attnbench {

class ProfilerCapture {
 public:
  explicit ProfilerCapture(bool on);
  ~ProfilerCapture();
  ProfilerCapture(const ProfilerCapture&) = delete;
  ProfilerCapture& operator=(const ProfilerCapture&) = delete;

 private:
  bool on_ = false;
};

}  // namespace attnbench
