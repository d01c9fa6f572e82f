// Known failures (Capabilities::known_failures), as a vendor implementation lists its library's
// bugs: two planted implementations over the simple algorithm (simple.cpp), each listing the
// causal GQA cases of test_planted's check (b1_hq8_hkv2_sq65_skv65_d64_causal_*) as known to fail.
//   cpu.planted_known_failure        carries the causal off-by-one bug, so those cases do fail:
//                                    `check` reports them as expected failures (XFAIL), exit 0;
//   cpu.planted_stale_known_failure  carries no bug, so they pass: `check` fails them, saying the
//                                    entry is stale (an upstream fix must be noticed).
// Memory, passes and limits: as simple.cpp.
#include "planted.hpp"

namespace attnbench::planted {
namespace {

Capabilities listing_the_causal_gqa_cases(Capabilities c) {
  c.known_failures.push_back({"* b1_hq8_hkv2_sq65_skv65_d64_causal_*",
                              "planted: the causal mask is off by one on these cases"});
  return c;
}

class KnownFailure final : public Simple {
 public:
  KnownFailure()
      : Simple("cpu.planted_known_failure", Bug::causal_off_by_one,
               "causal mask off by one, listed as a known failure") {}
  Capabilities capabilities() const override {
    return listing_the_causal_gqa_cases(Simple::capabilities());
  }
};

class StaleKnownFailure final : public Simple {
 public:
  StaleKnownFailure()
      : Simple("cpu.planted_stale_known_failure", Bug::none,
               "correct, but lists cases as known failures") {}
  Capabilities capabilities() const override {
    return listing_the_causal_gqa_cases(Simple::capabilities());
  }
};

}  // namespace
}  // namespace attnbench::planted

ATTNBENCH_REGISTER(attnbench::planted::KnownFailure)
ATTNBENCH_REGISTER(attnbench::planted::StaleKnownFailure)
