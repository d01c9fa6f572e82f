// The tests' one-stop check of an implementation on one case: the conformance suite's check_impl
// (harness/include/attnbench/conformance.hpp), so that the tests and `attnbench check` run the
// same code: seeded inputs, the float64 reference, the same-device naive baseline and one
// poisoned validation call (validation.hpp, as the run loop makes it), then the rule's verdict.
#pragma once

#include "attnbench/conformance.hpp"

namespace attnbench::test {

using attnbench::check_impl;

using attnbench::conformance::ok_or_only_its_absolute_bound;

}  // namespace attnbench::test
