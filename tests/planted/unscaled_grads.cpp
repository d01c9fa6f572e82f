// cpu.planted_unscaled_grads: the simple algorithm (simple.cpp) whose backward forgets the
// softmax scale on dQ = scale dS K and dK = scale dS^T Q (dV = P^T dO has no scale and stays
// right). With the default scale 1/sqrt(head_dim) the gradients are sqrt(head_dim) too large.
// The forward is correct. Memory, passes and limits: as simple.cpp.
#include "planted.hpp"

namespace attnbench::planted {
namespace {

class UnscaledGrads final : public Simple {
 public:
  UnscaledGrads() : Simple("cpu.planted_unscaled_grads", Bug::unscaled_grads, "dQ and dK without the softmax scale") {}
};

}  // namespace
}  // namespace attnbench::planted

ATTNBENCH_REGISTER(attnbench::planted::UnscaledGrads)
