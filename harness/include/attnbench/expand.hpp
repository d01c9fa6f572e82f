// `attnbench expand`: the cases of a config as JSON lines, for every tool that needs them.
//
// The Python peers (scripts/peers/), scripts/ncu_hbm.py and anything else that runs "the same
// cases as attnbench" read this instead of parsing configs themselves, so the config format,
// the case labels and indices, FLOPs, io_bytes, the config hash, the row (NVTX) names and the
// settings of the input generator have one owner: the harness. One line per case, in the order
// and with the case_index that `attnbench run` uses (docs/cli.md, "attnbench expand").
#pragma once

#include <iosfwd>
#include <string>

#include <nlohmann/json.hpp>

#include "attnbench/config.hpp"

namespace attnbench {

// Version 2: a row's "params" became "options", as in the results (docs/results_schema.md).
inline constexpr const char* kExpandSchema = "attnbench.expand/2";

// The line of one case of group `group` (its index in cfg.groups).
nlohmann::ordered_json case_to_json(const Config& cfg, std::size_t group, const Problem& p, int case_index);

// Every case of cfg, one compact JSON object per line, numbered as `attnbench run` numbers the
// cases of the same (possibly --case-filtered) config. Returns 0.
int print_expanded(const Config& cfg, std::ostream& out);

}  // namespace attnbench
