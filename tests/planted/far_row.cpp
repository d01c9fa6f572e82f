// cpu.planted_far_row: the simple algorithm (simple.cpp) with one row of O off by +0.5: the
// last batch, the last query head, row seq_q / 2 (far_row_of). The LSE is right. A test picks a
// case and seed whose sampled verification does not look at that row, and proves that the
// sampled mode's full comparison with the naive baseline still catches it. Memory, passes and
// limits: as simple.cpp.
#include "planted.hpp"

namespace attnbench::planted {
namespace {

class FarRowWrong final : public Simple {
 public:
  FarRowWrong() : Simple("cpu.planted_far_row", Bug::far_row, "one row of O, far from the sampled ones, off by 0.5") {}
};

}  // namespace
}  // namespace attnbench::planted

ATTNBENCH_REGISTER(attnbench::planted::FarRowWrong)
