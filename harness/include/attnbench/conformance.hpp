// The conformance suite: the one list of cases every implementation is held to, and the check of
// one case. `attnbench check` (check.hpp) runs it on any registered implementation, in-tree or
// out-of-tree; tests/test_cpu_impls.cpp and tests/test_cuda_impls.cpp iterate the same list.
//
// The shapes break index math: sequence tails (1, 17, 129), head_dims that are not a tile multiple
// (16 to 256), GQA 8:2 and MQA, causal with seq_q < seq_kv and seq_q > seq_kv (rows that see no
// key), custom scales, large scales (logits near 1e9), FlashAttention-3's outlier inputs, and
// seeded random shapes; in every dtype and every pass the implementation declares. Each case is
// verified with the rule (verify.hpp) against the float64 reference and the same-device naive
// 3-pass, and every output is also held to a dtype-based relative L2 bound (which checks the
// baseline itself). Then, on one case of each group, dtype and pass, faults are planted in the
// implementation's own outputs (a tile left unwritten, one NaN, one wrong row) and the verdict
// must turn to FAIL on each: proof that the bounds are tight enough there to see a broken kernel
// (a wrong row: where the case is well-conditioned, see Case).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "attnbench/implementation.hpp"
#include "attnbench/tensors.hpp"
#include "attnbench/verify.hpp"

namespace attnbench {

// One poisoned validation call of impl on a case (validation.hpp, as the run loop makes it) and
// the rule's verdict: seeded inputs of distribution dist, the float64 reference and the
// same-device naive baseline. The tests' check_impl (tests/check_impl.hpp).
Verdict check_impl(const Implementation& impl, const Problem& p, Pass pass, std::uint64_t seed,
                   VerifyMode mode = VerifyMode::full, const Options& opts = {},
                   Distribution dist = Distribution::normal);

namespace conformance {

inline constexpr std::uint64_t kSeed = 20240611;

enum class Group {
  odd_shapes,
  grouped,
  causal_rect,
  custom_scale,
  large_scale,
  outlier,
  window_softcap,
  varlen,
  paged,
  random
};
std::string_view to_string(Group g);

// One problem of the list, with its input distribution.
struct Shape {
  Problem p;
  Group group = Group::odd_shapes;
  Distribution dist = Distribution::normal;
};

// The whole list, every dtype (f32, f16, bf16 in turn within each group).
const std::vector<Shape>& shapes();

// The passes an implementation declares: fwd if it has a forward, bwd if it has a backward,
// fwd_bwd if it has both (or a backward and a fwd_partner).
std::vector<Pass> declared_passes(const Implementation& impl);

// Relative L2 error every output must meet whatever the baseline says: loose enough for S and P
// rounded to the dtype (the naive baseline), tight enough that a wrong index (error ~1) fails.
double rel_l2_bound(DType t);

// The verdict of an implementation that stores S in the dtype (the naive baseline among them) where
// that dtype cannot resolve the logits (the large scales in f16/bf16: S rounded to the dtype ties
// or reorders the top scores): it may fail, but only by its absolute bound (verify.hpp), never by
// NaN/Inf or an unwritten element. True when v passed or failed for that reason alone.
bool ok_or_only_its_absolute_bound(const Verdict& v);

struct Case {
  const Implementation* impl = nullptr;
  Shape shape;
  Pass pass = Pass::fwd;
  // Whether the outputs are held to rel_l2_bound. Off for the backward at large scales: dS =
  // P (dP - D) cancels to ~0 with P one-hot and is then multiplied by the scale, so the gradients
  // are ill-conditioned in any float format and held to the rule and to finite outputs only. Off
  // for the naive baseline itself in f16 and bf16 at large scales: it rounds S to the dtype, which
  // turns near-equal large logits into ties (relative L2 of O on cpu.naive_3pass: 0.12 in bf16,
  // 0.065 in f16); the other implementations stay held to the bound there, and it is what catches
  // a kernel whose large-logit path is wrong, since the rule's bound follows the baseline's error.
  bool rel_l2 = true;
  // Whether a planted wrong row must be caught: not where rel_l2 is off for conditioning, nor in
  // f16 and bf16 at large scales, where the rule's bound (the baseline's error) is as large as the
  // outputs. An unwritten tile and a NaN must be caught everywhere.
  bool wrong_row = true;
  // Whether faults are planted in this case's outputs: on the first case of each (implementation,
  // group, dtype, pass), so every implementation proves each group's bounds in each dtype and pass
  // (verifying every case three more times would double the suite's time).
  bool plant = false;
  // Whether the shape's reference is computed with the gradients at once: some case of the shape
  // needs them (cases() sets it, so that a forward case before them does not compute it twice).
  bool reference_gradients = false;
  // Whether the case is beyond the dtype of an implementation that stores S and P in it
  // (Capabilities::scores_in_dtype; f16 and bf16 at large scales): failing there by the absolute
  // bound alone, as the naive baseline does, is an expected failure (Result::Status::xfail).
  bool beyond_its_dtype = false;
  // The implementation's known-failure entry that names this case (Capabilities::known_failures):
  // its why, or empty. The case must fail (an expected failure); a pass is a failure that says
  // the entry is stale.
  std::string known_failure;
  std::string name() const;  // "cpu.flash_fwd fwd b2_hq2_hkv2_sq17_skv17_d40_bf16 outlier"
};

// shapes() x the implementations x the passes each declares, in the dtypes each declares; shape
// by shape, so that check_case makes each shape's inputs, reference and naive baselines once (it
// keeps the last shape's).
std::vector<Case> cases(const std::vector<const Implementation*>& impls);
std::vector<Case> cases(const Implementation& impl);

struct Result {
  // xfail: an expected failure, declared by the implementation (Case::beyond_its_dtype,
  // Case::known_failure); it does not fail the suite, and its reason says what failed and why.
  enum class Status { pass, fail, skip, xfail } status = Status::pass;
  std::string reason;      // skip: why (supports(), no device); fail, xfail: what failed (why)
  Verdict verdict;         // of the implementation's outputs (empty when skipped or thrown)
  int planted = 0;         // faults planted in its outputs
  int planted_caught = 0;  // ... that the verdict caught
};

// Runs one case: supports()? (else SKIP), the device present? (else SKIP), the validation call
// and the verdict (as check_impl), the relative L2 bound, and the planted faults. An exception is
// a FAIL with its text. Not thread-safe (the shape cache).
Result check_case(const Case& c, std::uint64_t seed = kSeed);

}  // namespace conformance
}  // namespace attnbench
