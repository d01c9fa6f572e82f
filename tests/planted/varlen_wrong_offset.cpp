// cpu.planted_varlen_wrong_offset: the simple algorithm (simple.cpp) with a wrong sequence offset
// in a varlen batch: sequence b > 0 reads its keys and values from sequence b - 1's first token
// (kv_start(b - 1)) instead of its own, as a kernel that indexes cu_seqlens_k one entry off does.
// Forward and backward both carry the bug (dK and dV are still written at the right keys, from the
// wrong scores). Invisible on dense problems and on a batch of one sequence. Memory, passes and
// limits: as simple.cpp.
#include "planted.hpp"

namespace attnbench::planted {
namespace {

class VarlenWrongOffset final : public Simple {
 public:
  VarlenWrongOffset()
      : Simple("cpu.planted_varlen_wrong_offset", Bug::varlen_wrong_offset,
               "varlen: sequence b reads its keys at sequence b - 1's offset") {}
};

}  // namespace
}  // namespace attnbench::planted

ATTNBENCH_REGISTER(attnbench::planted::VarlenWrongOffset)
