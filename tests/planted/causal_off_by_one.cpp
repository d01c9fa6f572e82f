// cpu.planted_causal_off_by_one: the simple algorithm (simple.cpp) with the causal mask off by
// one: query row i also sees key first_invisible_key(i), i.e. j <= i + seq_kv - seq_q + 1.
// Forward and backward both carry the bug. Invisible on non-causal cases; on causal cases every
// row that does not already see all keys gets one key too many, so O, LSE and the gradients
// differ far beyond rounding. Memory, passes and limits: as simple.cpp.
#include "planted.hpp"

namespace attnbench::planted {
namespace {

class CausalOffByOne final : public Simple {
 public:
  CausalOffByOne()
      : Simple("cpu.planted_causal_off_by_one", Bug::causal_off_by_one, "causal mask off by one (one key too many)") {}
};

}  // namespace
}  // namespace attnbench::planted

ATTNBENCH_REGISTER(attnbench::planted::CausalOffByOne)
