// Verification against the float64 reference, with the project's rule (README.md, "The rule"):
//   max|X_impl - X_ref| <= k * max|X_naive - X_ref| + atol(dtype)
// k = 2 (forward) or 3 (gradients); atol = twice the rounding error of X_ref itself in the dtype
// (float32 for LSE); X_naive is the same-device naive 3-pass in the same dtype. NaN, Inf where
// the reference is finite, or an element left unwritten (still NaN poison) always fails, and is
// checked over every element of the output, also in sampled mode.
//
// A broken baseline cannot loosen the rule: the naive baseline must itself meet the absolute
// bound  max|X_naive - X_ref| <= abs_bound(X) = c * max|X_ref| + atol + floor(X)  (c below,
// absolute_bound_factor; floor only for dQ and dK). When it does not (its error is larger, or it
// wrote NaN/Inf), its own row fails (its error is above abs_bound) and every implementation is
// held to abs_bound for that output instead of to k times the broken error.
//
// c, derived (first order, per element of one output row, u = unit roundoff of the dtype):
//   the naive rounds S, P and O (and in the backward dP and dS) to the dtype. Rounding S moves
//   each score by at most u|S_ij|; through the softmax that moves O_i by at most
//   2 u max_j|S_ij - m_i| sum_j P_ij |v_j|; rounding P and O adds u each; the backward's dP and
//   dS add u each. With scores inside the range the dtype can resolve, |S - m| <= 8 (the default
//   scale keeps N(0,1) and outlier inputs' scores there), that is (2*8 + 4) u = 20 u of the
//   output's magnitude; c takes 32 u (margin 1.6 over the worst case, 6 over the largest error
//   measured: 5.3 u, f16/bf16, every shape of the test suites, normal and outlier inputs).
//   The float32 accumulations add their own rounding, (n + 2d) u_f32 (n = seq_kv terms in the
//   softmax sum and in P V, plus group * seq_q in the backward's dK and dV; d terms in each score
//   and each dP, twice): negligible for f16/bf16, the main term for f32.
//   Scores beyond that range (a scale of 1e4 in bf16) are where S stored in the dtype cannot
//   resolve the logits (ties, a softmax on the wrong key): the naive fails the bound there, and
//   the implementations that keep S in float32 are held to it.
// floor(dQ), floor(dK): dS = P o (dP - D) is the difference of two terms of size up to
//   P |dO_i| max|v_j| (Cauchy-Schwarz; |O_i| <= max|v_j|). With one-hot P (large logits, or
//   seq_kv = 1) it cancels exactly and the reference's dQ and dK vanish, but no implementation
//   can cancel it: the naive rounds dP to the dtype, every backward reads O in the dtype for D,
//   and both dot products round in float32: (u + 2 d u_f32) |dO_i| max|v_j|, times
//   scale * max|K| (dQ = scale dS K, sum_j P_ij = 1) or scale * max|Q| * max(1, group * seq_q /
//   seq_kv) (dK = scale dS^T Q; the mean column mass of P, not its maximum: a first-order
//   estimate there, with the worst-case 2d of the float32 term as its margin).
#pragma once

#include <cstdint>
#include <functional>
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
  // floor(dQ), floor(dK) of the absolute bound (above), from the inputs; 0 without a backward.
  double floor_dq = 0, floor_dk = 0;
};

// Sizes above which `automatic` picks sampled verification (float64 work, in multiply-adds).
inline constexpr double kFullReferenceMaxWork = 4e9;

struct SampleSpec {
  int heads = 2;  // (batch, head) pairs checked (kv heads for the backward)
  int rows = 64;  // query rows checked per pair in the forward
};

// Told what the reference is computing when that takes long (more than min_work
// multiply-adds in all; 2e10 is tens of seconds on a few cores): one line per step, then its time.
struct ReferenceProgress {
  std::function<void(const std::string&)> line;  // null: nothing told
  double min_work = 2e10;
};

// need_fwd: O and LSE; need_bwd: dQ, dK, dV. seed picks the sampled pairs and rows.
Reference compute_reference(const CaseInputs& in, VerifyMode mode, bool need_fwd, bool need_bwd,
                            std::uint64_t seed, SampleSpec spec = {},
                            const ReferenceProgress& progress = {});
VerifyMode resolve_mode(const Problem& p, VerifyMode requested);
namespace detail {
// Tests only: fill compute_reference's float64 copies of the inputs with NaN before it copies
// what it reads into them, so that a read of an element it did not copy shows in the results.
extern bool poison_float64_copies;
}  // namespace detail
// Host memory of a case's inputs (make_inputs) and of compute_reference with these arguments:
// the float64 copies of the inputs, and in full mode the float64 outputs and gradients. An
// estimate from above, asked before either is made, so that a case that cannot fit is a SKIP at
// once instead of a bad_alloc or the kernel's OOM killer after minutes of work.
std::int64_t reference_host_bytes(const Problem& p, VerifyMode requested, bool need_fwd,
                                  bool need_bwd, SampleSpec spec = {});

struct OutputReport {
  std::string name;  // O, LSE, dQ, dK, dV
  std::int64_t checked = 0;     // elements compared with the reference
  std::int64_t nonfinite = 0;   // NaN/Inf (or poison) where the reference is finite, any element
  double max_abs = 0;           // max |X_impl - X_ref|
  double rel_l2 = 0;            // ||X_impl - X_ref|| / ||X_ref||
  double naive_max_abs = -1;    // max |X_naive - X_ref|, -1 when no baseline
  double atol = 0;
  double bound = 0;      // k * naive_max_abs + atol, or abs_bound when the naive fails it
  double ratio = 0;      // max_abs / naive_max_abs (0 if the naive error is 0 or not finite)
  double abs_bound = 0;  // c * max|X_ref| + atol + floor: what the naive itself must meet
  std::int64_t naive_nonfinite = 0;  // naive elements NaN/Inf where the reference is finite
  bool naive_ok = true;              // the naive met abs_bound (true when there is no naive)
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

// c of the absolute bound (above): 32 u(dtype) + (n + 2 head_dim) u_f32, n = seq_kv for the
// forward's outputs, seq_kv + group * seq_q for the gradients.
double absolute_bound_factor(const Problem& p, bool gradient);

}  // namespace attnbench
