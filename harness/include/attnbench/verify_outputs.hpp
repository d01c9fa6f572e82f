// Verification of outputs that something outside attnbench computed (a peer: PyTorch SDPA, FA4,
// ...) with the project's rule and the harness's own code, so the rule keeps one owner:
//
//   inputs     make_inputs(problem, seed, distribution): the peer runs on exactly the harness's
//              inputs (it gets them through libattnbench_capi's ab_case_inputs)
//   reference  compute_reference(...): float64, full or sampled as `attnbench run` would resolve
//              the mode for this problem, with the same seed (so the same sampled rows)
//   baseline   the same device's naive 3-pass, run here once per pass on the same inputs
//   rule       verify(): max|X - X_ref| <= k * max|X_naive - X_ref| + atol, NaN/Inf always fail,
//              and in sampled mode every element against the naive baseline (verify.hpp)
//
// One PeerCase per case; every peer row of the case (each backend, option set and pass) is
// checked against the one reference and the one baseline, as the runner does for its rows.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "attnbench/config.hpp"
#include "attnbench/tensors.hpp"
#include "attnbench/verify.hpp"

namespace attnbench {

struct PeerCaseSpec {
  Problem problem;
  std::uint64_t seed = 1234;
  Distribution distribution = Distribution::normal;
  VerifySettings verify;         // mode as configured (auto resolves per problem, as in run)
  Device device = Device::cuda;  // the device the peer ran on: whose naive 3-pass is the baseline
  bool need_fwd = true;          // the passes that will be checked: which references to compute
  bool need_bwd = true;
};

// A problem from JSON: the fields of a results row's "problem" (scale 0 or absent = the default).
// Throws std::invalid_argument naming the field and the value.
Problem problem_from_json(const nlohmann::json& j);

// The spec from JSON: {"problem": {...}, "inputs": {"seed", "distribution"}, "verify": {"mode",
// "sample_heads", "sample_rows"}, "device": "cuda" | "cpu", "passes": [...]}. An `attnbench
// expand` line is a valid spec (device defaults to cuda, passes to the line's). Throws
// std::invalid_argument naming the field and the value.
PeerCaseSpec peer_case_spec_from_json(const nlohmann::json& j);

struct PeerVerdict {
  Verdict verdict;           // as verify() gives it, minus the outputs the peer does not produce
  VerifyMode mode = VerifyMode::off;  // full or sampled, as resolved
  std::string baseline;      // "cuda.naive_3pass", or "" when it could not run
  std::string note;          // outputs not checked and why; why the baseline is missing
};

class PeerCase {
 public:
  explicit PeerCase(const PeerCaseSpec& spec);
  ~PeerCase();
  PeerCase(const PeerCase&) = delete;
  PeerCase& operator=(const PeerCase&) = delete;

  const PeerCaseSpec& spec() const { return spec_; }
  const CaseInputs& inputs() const { return inputs_; }

  // The verdict of a peer's outputs of one pass (host tensors in the problem's dtype, LSE in
  // float32, BSHD / [b, hq, sq] as docs/architecture.md). Outputs named in `absent` (e.g. "LSE" for an
  // API that does not return it) are left out of the verdict and named in its note; any other
  // missing output fails, as in a run.
  PeerVerdict check(Pass pass, const Outputs& outputs, const std::vector<std::string>& absent = {});

 private:
  PeerCaseSpec spec_;
  CaseInputs inputs_;
  std::unique_ptr<Reference> ref_;
  std::map<Pass, std::shared_ptr<Outputs>> naive_;
  std::map<Pass, std::string> naive_note_;
  const Reference& reference();
  const Outputs* naive(Pass pass);
};

// The "verify" block of a results row (docs/results_schema.md) plus "ok" and "reason".
nlohmann::ordered_json peer_verdict_json(const PeerVerdict& v);

}  // namespace attnbench
