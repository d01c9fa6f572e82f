// The validation call (validation.hpp).
#include "attnbench/validation.hpp"

#include "attnbench/execute.hpp"
#include "attnbench/memory_probe.hpp"
#include "attnbench/nvtx.hpp"
#include "attnbench/profiler.hpp"

namespace attnbench {

Validated validation_call(const Implementation& impl, const Problem& p, Pass pass,
                          const Options& opts, const CaseInputs& in, const Reference& ref,
                          const std::string& range, bool measure_peak, bool capture) {
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
    ProfilerCapture profiled(capture);
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

std::shared_ptr<Outputs> naive_outputs(Device device, const Problem& p, Pass pass,
                                       const CaseInputs& in, const Reference& ref,
                                       std::string& note) {
  const Implementation* base = naive_baseline(device);
  if (!base) {
    note = "no " + std::string(to_string(device)) + ".naive_3pass registered";
  } else if (Support s = base->supports(p, pass); !s) {
    note = base->name() + " cannot run this case: " + s.reason;
  } else if (!device_present(device)) {
    note = base->name() + ": no " + std::string(to_string(device)) + " device";
  } else {
    try {
      static const Options none;
      const std::string range =
          nvtx::call_range_name(base->name(), none, p.label(), pass) + ":baseline";
      return std::make_shared<Outputs>(
          validation_call(*base, p, pass, none, in, ref, range).outputs);
    } catch (const std::exception& e) {
      note = base->name() + " failed: " + e.what();
    }
  }
  return nullptr;
}

}  // namespace attnbench
