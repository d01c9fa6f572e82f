// libFuzzer target: config parsing and validation, the first thing attnbench does with input it
// did not write. Each input is a config text; parse_config must return a Config or a
// ConfigError, never crash, hang or leak (AddressSanitizer, UBSan and libFuzzer's own -timeout
// and -rss_limit_mb watch that). On success, the invariants the run loop relies on are checked:
// every case is a valid problem within the memory bound, every implementation exists, and the
// counts and the hash can be computed. scripts/fuzz.sh builds and runs it; docs/reliability.md
// says what it found. The same function replays tests/fuzz/regressions/ in test_fuzz_regressions
// (a normal CTest test, no libFuzzer needed).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "attnbench/config.hpp"

namespace {

[[noreturn]] void broken(const char* what) {
  std::fprintf(stderr, "fuzz_config: invariant broken: %s\n", what);
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace attnbench;
  ParseOptions po;
  // The CLI passes the host's memory; a fixed 64 GiB keeps a run reproducible on any machine.
  po.max_bytes = std::int64_t{64} << 30;
  const ConfigResult r = parse_config(std::string_view(reinterpret_cast<const char*>(data), size), po);
  // Triage: ATTNBENCH_FUZZ_VERBOSE=1 fuzz_config FILE prints the verdict on the input.
  static const bool verbose = std::getenv("ATTNBENCH_FUZZ_VERBOSE") != nullptr;
  if (const auto* e = std::get_if<ConfigError>(&r)) {
    if (e->text().empty()) broken("an error without a message");
    if (verbose) std::fprintf(stderr, "fuzz_config: refused: %s\n", e->text().c_str());
    return 0;
  }
  const Config& c = std::get<Config>(r);
  if (verbose) std::fprintf(stderr, "fuzz_config: parsed: %zu cases, %zu rows\n", c.case_count(), c.row_count());
  std::size_t cases = 0;
  for (const ConfigGroup& g : c.groups) {
    for (const Problem& p : g.cases) {
      if (!validate(p, po.max_bytes).empty()) broken("a case that does not validate");
      if (p.heads_q % p.heads_kv != 0) broken("heads_q not a multiple of heads_kv");
      if (p.label().empty() || !(p.flops_fwd() >= 0)) broken("a case without label or flops");
      ++cases;
    }
    for (const ImplRun& ir : g.impls) {
      if (!ir.impl || ir.option_sets.empty()) broken("an implementation entry without implementation or options");
    }
    if (g.passes.empty()) broken("a group without passes");
  }
  if (cases != c.case_count()) broken("case_count() disagrees with the cases");
  if (c.row_count() == 0) broken("a config with nothing to run was accepted");
  if (c.hash().size() != 16) broken("a hash that is not 16 hex digits");
  return 0;
}
