// cpu.planted_window_off_by_one: the simple algorithm (simple.cpp) with a sliding window one key
// too wide on the left: query row i also sees key first_visible_key(i) - 1. Forward and backward
// both carry the bug. Invisible without window_left (and on rows whose window starts at key 0);
// elsewhere O, LSE and the gradients take one key too many, far beyond rounding. Memory, passes
// and limits: as simple.cpp.
#include "planted.hpp"

namespace attnbench::planted {
namespace {

class WindowOffByOne final : public Simple {
 public:
  WindowOffByOne()
      : Simple("cpu.planted_window_off_by_one", Bug::window_off_by_one,
               "sliding window one key too wide on the left") {}
};

}  // namespace
}  // namespace attnbench::planted

ATTNBENCH_REGISTER(attnbench::planted::WindowOffByOne)
