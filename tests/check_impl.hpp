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

}  // namespace attnbench::test
