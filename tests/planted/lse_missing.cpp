// Two planted LSE bugs on the simple algorithm (simple.cpp); O is correct in both:
//   cpu.planted_lse_unwritten: the LSE is never written (a kernel that forgot the store), so the
//     harness's NaN poison is still there;
//   cpu.planted_lse_garbage: LSE = the row maximum, the log of the sum forgotten (right only on
//     rows that see exactly one key).
// Memory, passes and limits: as simple.cpp.
#include "planted.hpp"

namespace attnbench::planted {
namespace {

class LseUnwritten final : public Simple {
 public:
  LseUnwritten() : Simple("cpu.planted_lse_unwritten", Bug::lse_unwritten, "LSE never written") {}
};

class LseGarbage final : public Simple {
 public:
  LseGarbage() : Simple("cpu.planted_lse_garbage", Bug::lse_garbage, "LSE = row max (log of the sum forgotten)") {}
};

}  // namespace
}  // namespace attnbench::planted

ATTNBENCH_REGISTER(attnbench::planted::LseUnwritten)
ATTNBENCH_REGISTER(attnbench::planted::LseGarbage)
