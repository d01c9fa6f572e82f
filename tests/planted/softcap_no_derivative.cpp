// cpu.planted_softcap_no_derivative: the simple algorithm (simple.cpp) whose backward forgets the
// soft cap's derivative (dS without the factor 1 - tanh^2), the bug of a kernel that caps the
// forward's scores and then differentiates them as uncapped ones. The forward is right; the
// gradients are wrong wherever scores approach the cap (where the factor is far from 1).
// Memory, passes and limits: as simple.cpp.
#include "planted.hpp"

namespace attnbench::planted {
namespace {

class SoftcapNoDerivative final : public Simple {
 public:
  SoftcapNoDerivative()
      : Simple("cpu.planted_softcap_no_derivative", Bug::softcap_no_derivative,
               "soft cap's derivative (1 - tanh^2) missing in the backward") {}
};

}  // namespace
}  // namespace attnbench::planted

ATTNBENCH_REGISTER(attnbench::planted::SoftcapNoDerivative)
