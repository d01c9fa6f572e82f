// NVTX ranges in the "attnbench" domain, for Nsight Systems and `ncu --nvtx`.
//
// The runner opens one range per case (named by Problem::label()) and, inside it, one range per
// call of an implementation, validation and timed calls alike, named by call_range_name():
//     <impl>[+<option>=<value>...]:<case>:<pass>     e.g. cuda.flash_fwd:b1_hq8_..._bf16:fwd
// The parts are joined with ':' and not '/', because ncu's --nvtx-include syntax reads '/' as the
// separator between nested push/pop ranges ("A/B/" = range B inside range A), so a '/' inside a
// name could never be matched. docs/cli.md shows the filters.
//
// Without ATTNBENCH_WITH_NVTX (a build without the CUDA toolkit's nvtx3 headers) every range is
// a no-op that costs one branch-free inline call.
#pragma once

#include <string>

#include "attnbench/implementation.hpp"

namespace attnbench::nvtx {

inline constexpr const char* kDomain = "attnbench";

// True when the ranges reach a profiler (built with NVTX).
bool enabled();

void push(const std::string& name);
void pop();

// Scoped push/pop.
class Range {
 public:
  explicit Range(const std::string& name) { push(name); }
  ~Range() { pop(); }
  Range(const Range&) = delete;
  Range& operator=(const Range&) = delete;
};

// "<impl>[+k=v...]:<case>:<pass>": the range of one call, also the row's "nvtx" field.
std::string call_range_name(const std::string& impl, const Options& options,
                            const std::string& case_label, Pass pass);

}  // namespace attnbench::nvtx
