// check_impl (check_impl.hpp).
#include "check_impl.hpp"

#include <memory>

#include "attnbench/nvtx.hpp"
#include "attnbench/tensors.hpp"
#include "attnbench/validation.hpp"

namespace attnbench::test {

Verdict check_impl(const Implementation& impl, const Problem& p, Pass pass, std::uint64_t seed,
                   VerifyMode mode, const Options& opts, Distribution dist) {
  const CaseInputs in = make_inputs(p, seed, dist);
  const bool need_fwd = pass != Pass::bwd, need_bwd = pass != Pass::fwd;
  // The backward's O/LSE inputs need the full forward reference; compute it whenever affordable.
  const Reference ref = compute_reference(in, mode, need_fwd, need_bwd, seed);
  auto call = [&](const Implementation& i, const Options& o) {
    return validation_call(i, p, pass, o, in, ref,
                           nvtx::call_range_name(i.name(), o, p.label(), pass))
        .outputs;
  };
  const Outputs out = call(impl, opts);
  const Implementation* base = naive_baseline(impl.device());
  if (base == &impl && opts.empty()) return verify(p, pass, out, &out, ref);  // its own baseline
  std::unique_ptr<Outputs> naive;
  if (base && base->supports(p, pass)) naive = std::make_unique<Outputs>(call(*base, {}));
  return verify(p, pass, out, naive.get(), ref);
}

bool ok_or_only_its_absolute_bound(const Verdict& v) {
  for (const OutputReport& o : v.outputs) {
    if (o.ok) continue;
    if (o.naive_ok || o.nonfinite > 0 || o.why.find("absolute bound") == std::string::npos)
      return false;
  }
  return true;
}

}  // namespace attnbench::test
