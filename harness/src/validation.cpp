// The validation call (validation.hpp).
#include "attnbench/validation.hpp"

#include "attnbench/execute.hpp"
#include "attnbench/memory_probe.hpp"
#include "attnbench/nvtx.hpp"

namespace attnbench {

Validated validation_call(const Implementation& impl, const Problem& p, Pass pass,
                          const Options& opts, const CaseInputs& in, const Reference& ref,
                          const std::string& range, bool measure_peak) {
  PeakProbe probe(impl.device());
  if (measure_peak) probe.begin();
  CaseBuffers buf(impl, p, pass, opts);
  buf.upload_inputs(in);
  if (pass == Pass::bwd) {
    if (!ref.lse_in.empty())
      buf.upload_fwd_outputs(ref.o_in, ref.lse_in);
    else
      buf.produce_fwd_outputs();
  }
  buf.poison_outputs();
  {
    nvtx::Range r(range);
    buf.call(pass);
    buf.synchronize();
  }
  Validated v;
  v.memory.io_bytes = buf.io_bytes();
  v.memory.workspace_bytes = buf.workspace_bytes();
  // Before the download: its host copies would count in a CPU row's peak.
  if (measure_peak) {
    v.memory.peak_bytes = probe.end();
    v.memory.peak_method = probe.method();
  }
  v.outputs = buf.download();
  return v;
}

}  // namespace attnbench
