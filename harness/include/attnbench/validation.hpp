// The validation call (docs/architecture.md, "One case, end to end"): the one place that runs an
// implementation once on a case and hands back what it wrote, for the verdict. It builds the
// implementation's buffers, uploads the inputs, gives a standalone backward the O and LSE it
// reads (the reference's, rounded to the dtype, in full mode; else the implementation's own
// forward), poisons every output with NaN (an element left unwritten then fails verification),
// makes one call inside its NVTX range, waits for it, and downloads the outputs.
// Used by the run loop (each row, and the naive baseline of a case), by the verification of a
// peer's outputs (verify_outputs.hpp: its baseline) and by the tests' check_impl.
#pragma once

#include <memory>
#include <string>

#include "attnbench/implementation.hpp"
#include "attnbench/results.hpp"
#include "attnbench/tensors.hpp"
#include "attnbench/verify.hpp"

namespace attnbench {

struct Validated {
  Outputs outputs;
  // io_bytes and workspace_bytes; peak_bytes and peak_method when measure_peak.
  MemoryStats memory;
};

// range: the NVTX range of the call (nvtx::call_range_name). measure_peak: the device's memory
// from before the buffers to after the call (memory_probe.hpp), as a row's peak_bytes. capture:
// the call (alone) inside cudaProfilerStart/Stop (profiler.hpp), for `run --profile`.
// Throws what the implementation or the buffers throw (OutOfMemory when they cannot be allocated).
Validated validation_call(const Implementation& impl, const Problem& p, Pass pass,
                          const Options& opts, const CaseInputs& in, const Reference& ref,
                          const std::string& range, bool measure_peak = false,
                          bool capture = false);

// The verification rule's baseline: the validation call of the same device's naive 3-pass on
// the case (NVTX range "<its call range>:baseline"). Null, with why in note, when there is none,
// it cannot run the case, the device is absent, or it threw.
std::shared_ptr<Outputs> naive_outputs(Device device, const Problem& p, Pass pass,
                                       const CaseInputs& in, const Reference& ref,
                                       std::string& note);

}  // namespace attnbench
