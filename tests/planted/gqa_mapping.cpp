// cpu.planted_gqa_mapping: the simple algorithm (simple.cpp) with a wrong GQA head mapping:
// query head h reads kv head h % heads_kv instead of h / (heads_q / heads_kv), an easy slip
// between the "interleaved" and the "grouped" head orders. Forward and backward both carry it.
// Invisible for MHA (the maps agree) and MQA (one kv head); with heads_q = 4, heads_kv = 2 query
// head 1 reads kv head 1 instead of 0. Memory, passes and limits: as simple.cpp.
#include "planted.hpp"

namespace attnbench::planted {
namespace {

class GqaMapping final : public Simple {
 public:
  GqaMapping() : Simple("cpu.planted_gqa_mapping", Bug::gqa_mapping, "GQA head mapping h % heads_kv instead of h / group") {}
};

}  // namespace
}  // namespace attnbench::planted

ATTNBENCH_REGISTER(attnbench::planted::GqaMapping)
