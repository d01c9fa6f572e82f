// Verification against the float64 reference, with ARCHITECTURE.md's rule:
//   max|X_impl - X_ref| <= k * max|X_naive - X_ref| + atol(dtype)
// k = 2 (forward) or 3 (gradients); atol = twice the rounding error of X_ref itself in the dtype
// (float32 for LSE); X_naive is the same-device naive 3-pass in the same dtype. NaN, Inf where
// the reference is finite, or an element left unwritten (still NaN poison) always fails, and is
// checked over every element of the output, also in sampled mode.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "attnbench/implementation.hpp"
#include "attnbench/tensors.hpp"

namespace attnbench {

enum class VerifyMode { automatic, full, sampled, off };
const char* to_string(VerifyMode m);

// Reference values of one output: all elements (idx empty) or the sampled elements idx.
struct RefOutput {
  std::vector<std::int64_t> idx;
  std::vector<double> val;
  bool empty() const { return val.empty(); }
};

struct Reference {
  VerifyMode mode = VerifyMode::off;  // full or sampled once computed
  RefOutput o, lse, dq, dk, dv;
  // Full-mode forward outputs rounded to the dtype: the O and LSE a standalone backward reads.
  HostTensor o_in;
  std::vector<float> lse_in;
  // max |LSE| over the rows computed (all rows in full mode, the sampled ones otherwise): the
  // gradient tolerance accounts for the backward reading LSE in float32 (see verify.cpp).
  double lse_abs_max = 0;
};

// Sizes above which `automatic` picks sampled verification (float64 work, in multiply-adds).
inline constexpr double kFullReferenceMaxWork = 4e9;

struct SampleSpec {
  int heads = 2;  // (batch, head) pairs checked (kv heads for the backward)
  int rows = 64;  // query rows checked per pair in the forward
};

// need_fwd: O and LSE; need_bwd: dQ, dK, dV. seed picks the sampled pairs and rows.
Reference compute_reference(const CaseInputs& in, VerifyMode mode, bool need_fwd, bool need_bwd,
                            std::uint64_t seed, SampleSpec spec = {});
VerifyMode resolve_mode(const Problem& p, VerifyMode requested);

struct OutputReport {
  std::string name;  // O, LSE, dQ, dK, dV
  std::int64_t checked = 0;     // elements compared with the reference
  std::int64_t nonfinite = 0;   // NaN/Inf (or poison) where the reference is finite, any element
  double max_abs = 0;           // max |X_impl - X_ref|
  double rel_l2 = 0;            // ||X_impl - X_ref|| / ||X_ref||
  double naive_max_abs = -1;    // max |X_naive - X_ref|, -1 when no baseline
  double atol = 0;
  double bound = 0;             // k * naive_max_abs + atol
  double ratio = 0;             // max_abs / naive_max_abs (0 if the naive error is 0)
  bool ok = true;
  std::string why;              // set when !ok
};

struct Verdict {
  bool ok = true;
  std::vector<OutputReport> outputs;
  std::string failure() const;  // "dQ: max_abs 3e-2 > bound 1e-2; ..." or empty
};

// Compare impl outputs of a pass with the reference. naive may be null (no baseline: then the
// bound is atol plus a dtype-based relative floor, see verify.cpp).
Verdict verify(const Problem& p, Pass pass, const Outputs& impl, const Outputs* naive,
               const Reference& ref);

}  // namespace attnbench
