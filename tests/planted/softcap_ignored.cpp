// cpu.planted_softcap_ignored: the simple algorithm (simple.cpp) that leaves the soft cap out
// (scores never pass through softcap * tanh(s / softcap), and dS lacks the 1 - tanh^2 factor),
// the bug of a kernel that accepts the field and ignores it. Invisible without softcap; with it,
// wherever scores approach the cap, O, LSE and the gradients are those of uncapped attention.
// Memory, passes and limits: as simple.cpp.
#include "planted.hpp"

namespace attnbench::planted {
namespace {

class SoftcapIgnored final : public Simple {
 public:
  SoftcapIgnored() : Simple("cpu.planted_softcap_ignored", Bug::softcap_ignored, "soft cap ignored") {}
};

}  // namespace
}  // namespace attnbench::planted

ATTNBENCH_REGISTER(attnbench::planted::SoftcapIgnored)
