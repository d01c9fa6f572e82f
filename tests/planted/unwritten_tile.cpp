// cpu.planted_unwritten_tile: the simple algorithm (simple.cpp) that never stores one 16 x 16
// tile of O: batch 0, query head 0, rows 16..31, columns 16..31 (a tile a tiled kernel's tail
// logic skipped). Everything else, and the LSE, is right; the unwritten elements keep the
// harness's NaN poison. Needs seq_q > 16 and head_dim > 16 to show. Memory, passes and limits:
// as simple.cpp.
#include "planted.hpp"

namespace attnbench::planted {
namespace {

class UnwrittenTile final : public Simple {
 public:
  UnwrittenTile() : Simple("cpu.planted_unwritten_tile", Bug::unwritten_tile, "one 16x16 tile of O never written") {}
};

}  // namespace
}  // namespace attnbench::planted

ATTNBENCH_REGISTER(attnbench::planted::UnwrittenTile)
