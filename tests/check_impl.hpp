// The tests' one-stop check of an implementation on one case: seeded inputs (of distribution
// dist), the float64 reference, the same-device naive baseline and one poisoned validation call
// of the implementation (validation.hpp, as the run loop makes it), then the verdict of the rule.
#pragma once

#include <cstdint>

#include "attnbench/implementation.hpp"
#include "attnbench/tensors.hpp"
#include "attnbench/verify.hpp"

namespace attnbench::test {

Verdict check_impl(const Implementation& impl, const Problem& p, Pass pass, std::uint64_t seed,
                   VerifyMode mode = VerifyMode::full, const Options& opts = {},
                   Distribution dist = Distribution::normal);

// The naive baseline's own verdict where its dtype cannot resolve the logits (scales of 1e2 and
// more in f16/bf16: S stored in the dtype ties or reorders the top scores): it may fail, but
// only by its absolute bound (verify.hpp), never by NaN/Inf or an unwritten element. True when v
// passed or failed for that reason alone.
bool ok_or_only_its_absolute_bound(const Verdict& v);

}  // namespace attnbench::test
