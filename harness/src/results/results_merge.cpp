// The parts of one `run --devices` run as one results file (results.hpp, merge_parts): the rows
// of every worker's part in case order, complete only when every part is.
#include <algorithm>
#include <map>

#include "attnbench/results.hpp"

namespace attnbench {

ResultsFile merge_parts(const std::vector<ResultsFile>& parts, nlohmann::ordered_json context) {
  ResultsFile merged;
  merged.context = std::move(context);
  std::map<std::string, std::string> seen;  // call name -> part it came from
  for (const ResultsFile& part : parts) {
    if (!part.complete) {
      merged.complete = false;
      merged.stop_reason += (merged.stop_reason.empty() ? "" : "; ") + part.path + ": " +
                            (part.stop_reason.empty() ? "incomplete" : part.stop_reason);
    }
    for (const ResultRow& r : part.rows) {
      // The call name (impl, options, case, pass) is unique within a run; twice means two
      // workers ran the same row, and one of them would silently win.
      const std::string id = r.nvtx.empty() ? r.key() : r.nvtx;
      if (auto [it, fresh] = seen.emplace(id, part.path); !fresh) {
        throw ResultsError(part.path + ": row \"" + id + "\" is also in " + it->second +
                           ": two parts of one run hold the same row");
      }
      merged.rows.push_back(r);
    }
  }
  // Stable: within one case, each part keeps the run's plan order.
  std::stable_sort(merged.rows.begin(), merged.rows.end(),
                   [](const ResultRow& a, const ResultRow& b) { return a.case_index < b.case_index; });
  return merged;
}

}  // namespace attnbench
