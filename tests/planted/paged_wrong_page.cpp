// cpu.planted_paged_wrong_page: the simple algorithm (simple.cpp) reading a paged KV cache
// without its block table: logical page lp of sequence b is read at physical page
// (b * pages_per_seq + lp) % num_pages, the page it would hold if the pool were laid out
// contiguously in table-row order, as a kernel that forgets the page-table lookup (or indexes the
// pool by the logical page) does. Invisible on contiguous problems and on a sequential table
// whose rows are all full; the conformance suite's paged cases are built so that it shows in
// every one. Memory, passes and limits: as simple.cpp (paged problems: forward only).
#include "planted.hpp"

namespace attnbench::planted {
namespace {

class PagedWrongPage final : public Simple {
 public:
  PagedWrongPage()
      : Simple("cpu.planted_paged_wrong_page", Bug::paged_wrong_page,
               "paged: reads the cache as if contiguous, ignoring the block table") {}
};

}  // namespace
}  // namespace attnbench::planted

ATTNBENCH_REGISTER(attnbench::planted::PagedWrongPage)
