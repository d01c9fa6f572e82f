// attnbench: the command line. `list`, `run`, `expand`, `check`, `compare`, `table`; docs/cli.md is
// the manual.
//
// Arguments starting with --benchmark_ go to Google Benchmark (e.g. --benchmark_repetitions=10,
// --benchmark_out=gb.json, --benchmark_filter=REGEX) wherever they appear; the rest to CLI11.
// Exit codes: 0 fine, 1 a row failed or compare found a regression, 2 bad input, 128 + the signal
// when SIGINT, SIGTERM or SIGHUP stopped a run (130, 143, 129).
#include <fnmatch.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <variant>
#include <vector>

#include <CLI/CLI.hpp>
#include <benchmark/benchmark.h>

#include "attnbench/check.hpp"
#include "attnbench/cli_problem.hpp"
#include "attnbench/compare.hpp"
#include "attnbench/config.hpp"
#include "attnbench/context.hpp"
#include "attnbench/devices.hpp"
#include "attnbench/execute.hpp"
#include "attnbench/expand.hpp"
#include "attnbench/output_file.hpp"
#include "attnbench/render.hpp"
#include "attnbench/results.hpp"
#include "attnbench/runner.hpp"
#include "attnbench/table.hpp"

namespace {

using namespace attnbench;
using ojson = nlohmann::ordered_json;

constexpr int kBadInput = 2;

const char* kExamples = R"(
Examples:
  attnbench list                                    # implementations and what they support
  attnbench run                                     # configs/default.json, every device present
  attnbench run configs/smoke.json --out /tmp/smoke.json
  attnbench run --impl 'cpu.*' --seq 1024 --heads-q 8 --head-dim 64 --pass fwd,bwd
  attnbench run --impl cpu.flash_fwd --seq-q 17 --seq-kv 33 --heads-q 8 --heads-kv 2 --causal --dtype bf16
  attnbench run configs/fa2_grid.json --impl 'cuda.flash*' --benchmark_repetitions=10
  ncu --nvtx --nvtx-include 'regex:attnbench@cuda\.flash_fwd:.*/' attnbench run configs/smoke.json --profile
  attnbench compare results/h200/fa2_grid.json results/local/fa2_grid-20261129-104213.json
  attnbench table results/local/default-20261129-104213.json --format csv

Exit codes: 0 every row passed or was skipped; 1 a row failed (compare: a regression);
2 bad input (config, flag, file); 128 + the signal when SIGINT (130), SIGTERM
(143) or SIGHUP (129) stopped a run (results written with complete=false).
)";

std::string shell_word(const std::string& s) {
  if (!s.empty() && s.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-./=:,+@") == std::string::npos) {
    return s;
  }
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// ---- list -------------------------------------------------------------------------------------

void print_list(std::ostream& out) {
  const auto impls = Registry::instance().all();
  std::vector<std::vector<std::string>> rows;
  rows.push_back({"name", "device", "dtypes", "head_dim", "causal", "gqa", "fwd", "bwd", "options", "summary"});
  for (const Implementation* i : impls) {
    const Capabilities c = i->capabilities();
    std::string dtypes, options;
    // append() rather than "literal" + temporary: GCC 12 reports a false -Wrestrict on that.
    for (DType t : c.dtypes) dtypes.append(dtypes.empty() ? "" : ",").append(to_string(t));
    for (const auto& o : c.options) options.append(options.empty() ? "" : ",").append(o);
    std::string hd = std::to_string(c.min_head_dim);
    hd.append("..").append(std::to_string(c.max_head_dim));
    if (c.head_dim_multiple > 1) hd.append(" %").append(std::to_string(c.head_dim_multiple));
    std::string fwd = c.forward ? "yes" : c.fwd_partner.empty() ? "no" : "via " + c.fwd_partner;
    rows.push_back({i->name(), std::string(to_string(i->device())), dtypes, hd, c.causal ? "yes" : "no",
                    c.gqa ? "yes" : "no", fwd, c.backward ? "yes" : "no", options.empty() ? "-" : options,
                    i->summary()});
  }
  std::vector<std::size_t> w(rows.front().size(), 0);
  for (const auto& r : rows) {
    for (std::size_t c = 0; c < r.size(); ++c) w[c] = std::max(w[c], r[c].size());
  }
  for (std::size_t k = 0; k < rows.size(); ++k) {
    for (std::size_t c = 0; c < rows[k].size(); ++c) {
      out << rows[k][c];
      if (c + 1 < rows[k].size()) out << std::string(w[c] - rows[k][c].size() + 2, ' ');
    }
    out << "\n";
  }
  out << impls.size() << " implementations registered. CUDA device: "
      << (device_present(Device::cuda) ? "present" : "absent (CUDA rows will be SKIP)") << "\n";
  // Renamed implementations: their former names still work in configs, --impl and results files.
  std::string former;
  for (const auto& [old_name, now] : Registry::instance().former_names())
    former.append(former.empty() ? "" : ", ").append(old_name).append(" -> ").append(now);
  if (!former.empty()) out << "Former names (still accepted): " << former << "\n";
}

// ---- run --------------------------------------------------------------------------------------

struct ProblemFlag {
  const char* flag;  // "--heads-kv"
  const char* key;   // "heads_kv" in the config's "problem"
  enum Kind { integer, real, text, boolean } kind;
};
const std::vector<ProblemFlag>& problem_flags() {
  static const std::vector<ProblemFlag> f = {
      {"--batch", "batch", ProblemFlag::integer},       {"--heads-q", "heads_q", ProblemFlag::integer},
      {"--heads-kv", "heads_kv", ProblemFlag::integer}, {"--seq", "seq", ProblemFlag::integer},
      {"--seq-q", "seq_q", ProblemFlag::integer},       {"--seq-kv", "seq_kv", ProblemFlag::integer},
      {"--head-dim", "head_dim", ProblemFlag::integer}, {"--causal", "causal", ProblemFlag::boolean},
      {"--scale", "scale", ProblemFlag::real},          {"--dtype", "dtype", ProblemFlag::text},
      {"--window-left", "window_left", ProblemFlag::integer},
      {"--window-right", "window_right", ProblemFlag::integer},
      {"--softcap", "softcap", ProblemFlag::real},
      {"--page-size", "page_size", ProblemFlag::integer},
      {"--page-order", "page_order", ProblemFlag::text}};
  return f;
}

struct RunArgs {
  std::string config;
  std::string out;
  std::vector<std::string> impls, passes, cases;
  std::string verify;
  std::string seed;
  bool hot = false, profile = false, quiet = false;
  std::string flush;  // --flush: write or read (empty: the config's)
  std::string dump;
  std::string resume;
  std::string benchmark_out;                   // --benchmark_out=FILE: Google Benchmark's own file
  std::map<std::string, std::string> problem;  // flag -> value text (--causal: "true" when bare)
  std::map<std::string, CLI::Option*> problem_opts;
  CLI::Option *verify_opt = nullptr, *seed_opt = nullptr, *causal_opt = nullptr;
  bool expand = false;  // `attnbench expand`: the same config and overrides, printed as cases
  // run --devices (devices.hpp), and the hidden flags the parent gives its workers.
  std::string devices;
  CLI::Option* devices_opt = nullptr;
  int worker_device = -1;
  std::string worker_cases, worker_part;
};

// --worker-cases: "0,3,5" (written by the parent, so a bad value is a defect, still exit 2).
std::optional<std::set<int>> parse_case_indices(const std::string& text) {
  std::set<int> out;
  std::stringstream ss(text);
  for (std::string item; std::getline(ss, item, ',');) {
    if (item.empty() || item.size() > 9 || item.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
    out.insert(std::stoi(item));
  }
  if (out.empty()) return std::nullopt;
  return out;
}

std::optional<std::string> read_file(const std::string& path) {
  std::ifstream f(path);
  if (!f) return std::nullopt;
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// A relative config path is looked up in the working directory, then in the source tree, so
// `attnbench run configs/smoke.json` also works from the build folder.
// A relative config path that is not there from the working directory is looked up in the
// installed configs' folder (PREFIX/share/attnbench, beside the executable's PREFIX/bin), then in
// the source tree. The places looked in go to `looked` (for the message when none has it).
std::string find_config(const std::string& path, std::string& looked) {
  namespace fs = std::filesystem;
  std::vector<fs::path> seen;
  // Each place once: run from the source tree, the working directory's path and the source
  // tree's are one file.
  auto note = [&](const fs::path& p) {
    std::error_code ec;
    const fs::path c = fs::weakly_canonical(p, ec);
    for (const fs::path& x : seen)
      if (x == (ec ? p : c)) return;
    seen.push_back(ec ? p : c);
    looked += (looked.empty() ? "'" : ", '") + p.string() + "'";
  };
  looked.clear();
  note(fs::absolute(path));
  if (fs::exists(path) || fs::path(path).is_absolute()) return path;
  for (const std::string& root : {installed_data_dir(), source_dir()}) {
    if (root.empty()) continue;
    const fs::path alt = fs::path(root) / path;
    if (fs::exists(alt)) return alt.string();
    note(alt);
  }
  return path;
}

// The shipped config nearest to a name that was not found (edit distance on the file name), as
// "configs/<name>.json", or "" when none is near.
std::string nearest_config(const std::string& path) {
  namespace fs = std::filesystem;
  const std::string want = fs::path(path).stem().string();
  auto distance = [](const std::string& a, const std::string& b) {
    std::vector<std::size_t> d(b.size() + 1);
    for (std::size_t j = 0; j <= b.size(); ++j) d[j] = j;
    for (std::size_t i = 1; i <= a.size(); ++i) {
      std::size_t prev = d[0];
      d[0] = i;
      for (std::size_t j = 1; j <= b.size(); ++j) {
        const std::size_t cur = d[j];
        d[j] = std::min({d[j] + 1, d[j - 1] + 1, prev + (a[i - 1] == b[j - 1] ? 0 : 1)});
        prev = cur;
      }
    }
    return d[b.size()];
  };
  std::string best;
  std::size_t best_d = std::max<std::size_t>(3, want.size() / 3) + 1;
  for (const std::string& root : {std::string("."), installed_data_dir(), source_dir()}) {
    std::error_code ec;
    if (root.empty() || !fs::is_directory(fs::path(root) / "configs", ec)) continue;
    for (const auto& e : fs::directory_iterator(fs::path(root) / "configs", ec)) {
      if (e.path().extension() != ".json") continue;
      const std::size_t d = distance(want, e.path().stem().string());
      if (d < best_d) {
        best_d = d;
        best = "configs/" + e.path().filename().string();
      }
    }
  }
  return best;
}

// Sets key in the document, or in every group when the config has groups.
void set_everywhere(ojson& doc, const std::string& key, const ojson& value) {
  if (doc.contains("groups") && doc["groups"].is_array()) {
    for (auto& g : doc["groups"]) {
      if (g.is_object()) g[key] = value;
    }
  } else {
    doc[key] = value;
  }
}

// Sets obj_key.field at the top and in every group that has its own obj_key object.
void set_field_everywhere(ojson& doc, const std::string& obj_key, const std::string& field, const ojson& value) {
  if (!doc.contains(obj_key) || !doc[obj_key].is_object()) doc[obj_key] = ojson::object();
  doc[obj_key][field] = value;
  if (doc.contains("groups") && doc["groups"].is_array()) {
    for (auto& g : doc["groups"]) {
      if (g.is_object() && g.contains(obj_key) && g[obj_key].is_object()) g[obj_key][field] = value;
    }
  }
}

bool ends_with_index_of(const std::string& path, const std::string& key) {
  // ".../<key>" or ".../<key>/<n>"
  const auto p = path.rfind("/" + key);
  if (p == std::string::npos) return false;
  const std::string rest = path.substr(p + key.size() + 1);
  return rest.empty() || (rest[0] == '/' && rest.find_first_not_of("0123456789", 1) == std::string::npos);
}

// A problem flag (--seq, --batch, ...) was given: the run is one problem or a sweep, no config.
bool problem_flags_given(const RunArgs& a) {
  bool adhoc = false;
  for (const auto& [flag, opt] : a.problem_opts) adhoc = adhoc || opt->count() > 0;
  return adhoc || a.causal_opt->count() > 0;
}

// The document of a problem given by flags. flag_of_path: "/problem/heads_kv" -> "--heads-kv".
bool adhoc_document(const RunArgs& a, const std::string& who, ojson& doc,
                    std::map<std::string, std::string>& flag_of_path) {
  std::ostream& err = std::cerr;
  doc["name"] = "adhoc";
  doc["description"] = "one problem (or a sweep) from the command line";
  std::vector<ProblemFlagValue> given;
  for (const ProblemFlag& f : problem_flags()) {
    const CLI::Option* opt =
        f.kind == ProblemFlag::boolean ? a.causal_opt : a.problem_opts.at(f.flag);
    if (opt->count() == 0) continue;
    given.push_back(
        {f.flag, f.key, static_cast<ProblemFlagValue::Kind>(f.kind), a.problem.at(f.flag)});
  }
  const auto built = problem_from_flags(given, flag_of_path);  // cli_problem.hpp
  if (const auto* e = std::get_if<std::string>(&built)) {
    err << who << *e << "\n";
    return false;
  }
  const ojson& parts = std::get<ojson>(built);
  ojson problem = parts["problem"];
  if (parts.contains("sweep")) doc["sweep"] = parts["sweep"];
  doc["problem"] = problem;
  doc["implementations"] = ojson::array({"*"});
  return true;
}

// The document of the config file (default configs/default.json), found and read; config_path:
// where it was found.
bool config_document(const RunArgs& a, const std::string& who, ojson& doc,
                     std::string& config_path) {
  std::ostream& err = std::cerr;
  std::string looked;
  config_path = find_config(a.config.empty() ? "configs/default.json" : a.config, looked);
  if (std::error_code ec; std::filesystem::is_directory(config_path, ec)) {
    err << who << "the config '" << printable(config_path)
        << "' is a directory, not a config file\n";
    return false;
  }
  const auto text = read_file(config_path);
  if (!text) {
    const std::string near =
        std::filesystem::exists(config_path) ? std::string() : nearest_config(config_path);
    err << who << "cannot read the config '" << printable(config_path) << "'"
        << (std::filesystem::exists(config_path)
                ? std::string()
                : " (not found; looked for " + printable(looked) + ")" +
                      (near.empty() ? std::string() : "; did you mean " + near + "?"))
        << "\n";
    return false;
  }
  try {
    doc = ojson::parse(*text, nullptr, true, true);
  } catch (const nlohmann::json::exception&) {
    // parse_config reports it: the line and column of a syntax error, or e.g. a number beyond
    // double (out_of_range, not parse_error).
    const ConfigResult r = parse_config(*text);
    err << who << printable(config_path) << ": " << std::get<ConfigError>(r).text() << "\n";
    return false;
  }
  // Before anything edits the document: an insertion copies values, which recurses per level.
  if (const auto e = check_depth(doc)) {
    err << who << printable(config_path) << ": " << e->text() << "\n";
    return false;
  }
  if (doc.is_object() && !doc.contains("name")) {
    std::string stem = std::filesystem::path(config_path).stem().string();
    for (char& c : stem) {
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') c = '_';
    }
    doc["name"] = stem.empty() ? "config" : stem;
  }
  return true;
}

// Command-line overrides go into the document, so they are validated like the config and the
// results record the configuration that actually ran.
bool apply_overrides(const RunArgs& a, const std::string& who, ojson& doc) {
  std::ostream& err = std::cerr;
  if (!doc.is_object()) return true;
  if (!a.impls.empty()) set_everywhere(doc, "implementations", ojson(a.impls));
  if (!a.passes.empty()) set_everywhere(doc, "passes", ojson(a.passes));
  if (a.verify_opt->count() > 0) set_field_everywhere(doc, "verify", "mode", a.verify);
  if (a.hot) set_field_everywhere(doc, "timing", "hot", true);
  if (!a.flush.empty()) set_field_everywhere(doc, "timing", "flush", a.flush);
  if (a.seed_opt->count() > 0) {
    std::size_t used = 0;
    unsigned long long s = 0;
    try {
      s = std::stoull(a.seed, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != a.seed.size() || a.seed.empty() || a.seed[0] == '-') {
      err << who << "--seed = " << printable(a.seed) << ": not a non-negative integer\n";
      return false;
    }
    if (!doc.contains("inputs") || !doc["inputs"].is_object()) doc["inputs"] = ojson::object();
    doc["inputs"]["seed"] = s;
  }
  return true;
}

// A config error, naming the flag when the bad value came from one.
void report_config_error(const RunArgs& a, const std::string& who, const ConfigError& e,
                         const std::map<std::string, std::string>& flag_of_path,
                         const std::string& config_path) {
  std::ostream& err = std::cerr;
  std::string flag;
  if (auto it = flag_of_path.find(e.path); it != flag_of_path.end())
    flag = it->second;
  else if (!a.impls.empty() && ends_with_index_of(e.path, "implementations"))
    flag = "--impl";
  else if (!a.passes.empty() && ends_with_index_of(e.path, "passes"))
    flag = "--pass";
  else if (a.verify_opt->count() > 0 && e.path.size() >= 12 && e.path.ends_with("/verify/mode"))
    flag = "--verify";
  else if (!a.flush.empty() && e.path.ends_with("/timing/flush"))
    flag = "--flush";
  if (!flag.empty()) {
    err << who << flag << " = " << printable(e.value.empty() ? "?" : e.value) << ": "
        << printable(e.message) << "\n";
  } else {
    err << who << printable(config_path.empty() ? std::string("problem") : config_path) << ": "
        << printable(e.text()) << "\n";
  }
}

// --case: keep the cases whose label matches one of the globs (a config run in parts).
bool select_cases(const RunArgs& a, const std::string& who, Config& cfg) {
  std::ostream& err = std::cerr;
  if (a.cases.empty()) return true;
  const std::size_t all_cases = cfg.case_count();
  std::size_t kept = 0;
  std::string example;
  for (ConfigGroup& g : cfg.groups) {
    if (example.empty() && !g.cases.empty()) example = g.cases.front().label();
    std::erase_if(g.cases, [&](const Problem& p) {
      const std::string l = p.label();
      return std::none_of(a.cases.begin(), a.cases.end(),
                          [&](const std::string& glob) { return glob_match(glob, l); });
    });
    kept += g.cases.size();
  }
  if (kept == 0) {
    std::string globs;
    for (const auto& c : a.cases) globs += (globs.empty() ? "" : ", ") + c;
    err << who << "--case = " << printable(globs) << ": matches none of the " << all_cases
        << " cases of " << cfg.name << " (labels look like " << example << ")\n";
    return false;
  }
  return true;
}

// --devices: checked before anything runs (devices.hpp). The workers get the same arguments.
bool check_devices(const RunArgs& a, const std::string& who, const Config& cfg,
                   std::vector<int>& devices) {
  std::ostream& err = std::cerr;
  const char* fake = std::getenv(kFakeDeviceCountEnv);
  const int count = fake && *fake ? std::atoi(fake) : cuda_device_count();
  std::string why;
  const auto parsed_devices = parse_devices(a.devices, count, why);
  if (!parsed_devices) {
    err << who << why << "\n";
    return false;
  }
  devices = *parsed_devices;
  if (!(fake && *fake)) {
    // Workers would time CPU rows against each other on the same cores.
    std::string cpu_impls;
    for (const ConfigGroup& g : cfg.groups)
      for (const ImplRun& ir : g.impls)
        if (ir.impl->device() == Device::cpu &&
            cpu_impls.find(ir.impl->name()) == std::string::npos)
          cpu_impls += (cpu_impls.empty() ? "" : ", ") + ir.impl->name();
    if (!cpu_impls.empty()) {
      err << who << "--devices = " << a.devices << ": the config has CPU rows (" << cpu_impls
          << "), which the workers would time against each other on the same cores: leave them "
             "out (--impl 'cuda.*') or run them without --devices\n";
      return false;
    }
  }
  if (!a.dump.empty()) {
    err << who << "--devices = " << a.devices << ": --dump is not supported with --devices\n";
    return false;
  }
  return true;
}

// The run's options from the flags: --resume (read here: a bad file is bad input), the output,
// a worker's cases and device, --benchmark_out.
bool run_options(const RunArgs& a, const std::string& who, const Config& cfg,
                 const std::string& config_path, RunOptions& ro) {
  std::ostream& err = std::cerr;
  if (!a.resume.empty()) {
    // run_config refuses the file unless it was written with the same config (after the
    // overrides; --case may differ), mode and build (resume_refusal).
    try {
      ro.resume = load_results(a.resume);
    } catch (const std::exception& e) {
      err << "attnbench run: --resume = " << printable(a.resume) << ": " << printable(e.what())
          << "\n";
      return false;
    }
    ro.resume_path = a.resume;
  }
  ro.config_path = config_path;
  ro.out_path = !a.out.empty()      ? a.out
                : !a.resume.empty() ? a.resume
                                    : "results/local/" + cfg.name + "-" + file_date_utc() + ".json";
  if (!a.worker_part.empty()) {
    const auto cases = parse_case_indices(a.worker_cases);
    if (!cases || a.worker_device < 0) {
      err << who << "--worker-cases = " << a.worker_cases
          << ", --worker-device = " << a.worker_device
          << ": not a worker's case list and device (these flags are for run --devices)\n";
      return false;
    }
    ro.only_cases = *cases;
    ro.cuda_device = a.worker_device;
    ro.out_path = a.worker_part;
    ro.worker_note = "worker of a --devices run: cases " + a.worker_cases +
                     " only, CUDA rows on device " + std::to_string(a.worker_device) +
                     " (the only GPU it sees)";
  }
  ro.profile = a.profile;
  ro.quiet = a.quiet;
  ro.dump_dir = a.dump;
  if (!a.benchmark_out.empty()) {
    // Google Benchmark writes it itself: held to the rules of --out, and never the same file.
    const std::string why = output_refusal(a.benchmark_out, {config_path, ro.out_path},
                                           {"the config file", "the results file (--out)"});
    if (!why.empty()) {
      err << "attnbench run: --benchmark_out = " << printable(a.benchmark_out) << ": "
          << printable(why) << "\n";
      return false;
    }
    ro.other_files.push_back({a.benchmark_out, "Google Benchmark's --benchmark_out"});
  }
  return true;
}

// `run` and `expand`: the config (or the problem flags) with the overrides, parsed, then the
// cases printed (expand) or run, here or on --devices.
int cmd_run(const RunArgs& a, const std::map<std::string, std::string>& bench_flags,
            const std::string& command_line, const std::vector<std::string>& raw_args) {
  std::ostream& err = std::cerr;
  const std::string who = a.expand ? "attnbench expand: " : "attnbench run: ";
  const bool adhoc = problem_flags_given(a);
  if (adhoc && !a.config.empty()) {
    err << who
        << "problem flags (--seq, --batch, ...) describe a problem or a sweep without a config; "
           "drop them or the config '"
        << printable(a.config) << "'\n";
    return kBadInput;
  }

  ojson doc;
  std::string config_path;
  std::map<std::string, std::string> flag_of_path;  // "/problem/heads_kv" -> "--heads-kv"
  const bool read =
      adhoc ? adhoc_document(a, who, doc, flag_of_path) : config_document(a, who, doc, config_path);
  if (!read || !apply_overrides(a, who, doc)) return kBadInput;

  ParseOptions po;
  po.max_bytes = host_memory_bytes();
  po.allow_no_rows = a.expand;  // lists the cases of cuda.* configs in a build without CUDA
  const ConfigResult parsed = parse_config_doc(doc, po);
  if (const auto* e = std::get_if<ConfigError>(&parsed)) {
    report_config_error(a, who, *e, flag_of_path, config_path);
    return kBadInput;
  }
  Config cfg = std::get<Config>(parsed);
  // A former name resolved: one line each (the parent of a --devices run has said it already).
  if (a.worker_part.empty())
    for (const std::string& n : cfg.notes) err << who << printable(n) << "\n";
  if (!select_cases(a, who, cfg)) return kBadInput;

  if (a.expand) return print_expanded(cfg, std::cout);  // expand.cpp

  const bool worker = !a.worker_part.empty();
  std::vector<int> devices;
  if (!worker && a.devices_opt->count() > 0 && !check_devices(a, who, cfg, devices)) {
    return kBadInput;
  }
  RunOptions ro;
  if (!run_options(a, who, cfg, config_path, ro)) return kBadInput;
  ro.command_line = command_line;
  ro.benchmark_flags = bench_flags;
  if (!a.quiet) {
    std::cerr << "attnbench: " << cfg.name << ": " << count_of(static_cast<long long>(cfg.case_count()), "case")
              << ", " << count_of(static_cast<long long>(cfg.row_count()), "row") << (a.profile ? " (profile: one call per row, no timing)" : "") << "\n";
  }
  try {
    if (!devices.empty()) return run_on_devices(cfg, ro, devices, raw_args, std::cout, std::cerr);
    return run_config(cfg, ro, std::cout, std::cerr);
  } catch (const std::runtime_error& e) {
    err << "attnbench run: " << printable(e.what()) << "\n";
    return kBadInput;
  }
}

// While it lives, std::cerr (and, with on_stdout, std::cout) write through a PrintableBuf.
class PrintableStreams {
 public:
  PrintableStreams() : err_(std::cerr.rdbuf()) { std::cerr.rdbuf(&err_); }
  void on_stdout() {
    if (!out_) {
      out_ = std::make_unique<PrintableBuf>(std::cout.rdbuf());
      std::cout.rdbuf(out_.get());
    }
  }
  ~PrintableStreams() {
    std::cerr.flush();
    std::cerr.rdbuf(err_.dest());
    if (out_) {
      std::cout.flush();
      std::cout.rdbuf(out_->dest());
    }
  }
  PrintableStreams(const PrintableStreams&) = delete;
  PrintableStreams& operator=(const PrintableStreams&) = delete;

 private:
  PrintableBuf err_;
  std::unique_ptr<PrintableBuf> out_;
};

// The arguments split: --benchmark_* for Google Benchmark, everything else for CLI11.
struct SplitArgs {
  std::vector<char*> gb_argv, cli_argv;
  std::map<std::string, std::string> bench_flags;  // name without dashes -> value
  std::string benchmark_out;
  std::string command_line = "attnbench";
  std::vector<std::string> raw_args;  // for the workers of run --devices
};

SplitArgs split_args(int argc, char** argv) {
  SplitArgs a;
  a.gb_argv = {argv[0]};
  a.cli_argv = {argv[0]};
  a.raw_args.assign(argv + 1, argv + argc);
  for (int i = 1; i < argc; ++i) {
    const std::string s = argv[i];
    a.command_line += " " + shell_word(s);
    if (s.rfind("--benchmark_", 0) == 0) {
      a.gb_argv.push_back(argv[i]);
      if (s.rfind("--benchmark_out=", 0) == 0) a.benchmark_out = s.substr(16);
      const auto eq = s.find('=');
      a.bench_flags[s.substr(2, eq == std::string::npos ? std::string::npos : eq - 2)] =
          eq == std::string::npos ? "" : s.substr(eq + 1);
    } else {
      a.cli_argv.push_back(argv[i]);
    }
  }
  return a;
}

// What CLI11 and Google Benchmark would answer badly, refused first: a misspelt command (CLI11
// would only say "A subcommand is required") and a bad report format (Google Benchmark would
// print its usage and exit 0).
bool arguments_plausible(const SplitArgs& a) {
  if (a.cli_argv.size() > 1 && a.cli_argv[1][0] != '-') {
    const std::string cmd = a.cli_argv[1];
    if (cmd != "list" && cmd != "run" && cmd != "expand" && cmd != "check" && cmd != "compare" && cmd != "table") {
      std::cerr << "attnbench: unknown command '" << printable(cmd)
                << "' (commands: list, run, expand, check, compare, table; see --help)\n";
      return false;
    }
  }
  for (const char* f : {"benchmark_format", "benchmark_out_format"}) {
    if (const auto it = a.bench_flags.find(f); it != a.bench_flags.end() &&
                                               it->second != "console" && it->second != "json" &&
                                               it->second != "csv") {
      std::cerr << "attnbench: --" << f << "=" << it->second << ": must be console, json or csv\n";
      return false;
    }
  }
  return true;
}

// The config and the flags that change it (shared by run and expand, so that expand prints the
// cases of exactly the run the same flags would make).
void add_case_flags(CLI::App* c, RunArgs& r) {
  c->add_option("config", r.config,
                "Config file (JSON; see docs/cli.md). Default: configs/default.json")
      ->type_name("CONFIG.json");
  c->add_option("--impl", r.impls,
                "Implementation name or glob, repeatable (replaces the config's list)")
      ->allow_extra_args(false)
      ->type_name("GLOB");
  c->add_option("--case", r.cases,
                "Only the cases whose label matches this glob, repeatable (e.g. '*_causal_*', "
                "'*_sq16384_*'); labels as in the table and the results' \"case\"")
      ->allow_extra_args(false)
      ->type_name("GLOB");
  c->add_option("--pass", r.passes,
                "fwd, bwd, fwd_bwd; repeatable or comma-separated (replaces the config's)")
      ->allow_extra_args(false)
      ->delimiter(',')
      ->type_name("PASS");
  r.verify_opt = c->add_option("--verify", r.verify, "Verification: auto, full, sampled or off")
                     ->type_name("MODE");
  r.seed_opt =
      c->add_option("--seed", r.seed, "Seed of the inputs (replaces the config's)")->type_name("N");
  c->add_flag("--hot", r.hot, "Do not flush the caches between timed calls");
  c->add_option("--flush", r.flush,
                "How the L2 is flushed before each timed call: write (default: zeros over twice "
                "the L2, whose dirty lines the call then writes back) or read (twice the L2 read: "
                "clean lines, the call pays only its own misses)")
      ->type_name("MODE");
  const char* group =
      "A problem or a sweep (instead of a config; comma-separated values make a product)";
  for (const ProblemFlag& f : problem_flags()) {
    if (f.kind == ProblemFlag::boolean) {
      r.causal_opt = c->add_option(f.flag, r.problem[f.flag],
                                   "Causal (bottom-right aligned); alone: true; or false, both")
                         ->expected(0, 1)
                         ->default_str("true")
                         ->type_name("[true|false|both]")
                         ->group(group);
      continue;
    }
    const char* tn = f.kind == ProblemFlag::integer        ? "N,..."
                     : f.kind == ProblemFlag::real           ? "X,..."
                     : std::string(f.key) == "page_order"    ? "ORDER,..."
                                                             : "DTYPE,...";
    std::string help = f.key;
    if (std::string(f.key) == "seq") help = "seq_q = seq_kv (1k = 1024)";
    if (std::string(f.key) == "scale") help += " (default 1/sqrt(head_dim))";
    if (std::string(f.key) == "dtype") help += ": f32, f16, bf16";
    if (std::string(f.key) == "window_left")
      help = "sliding window: keys before the diagonal a query sees (default -1: all)";
    if (std::string(f.key) == "window_right")
      help = "sliding window: keys after the diagonal a query sees (default -1: all)";
    if (std::string(f.key) == "softcap") help = "logit soft-capping softcap*tanh(s/softcap) (default 0: off)";
    if (std::string(f.key) == "page_size")
      help = "paged KV cache: keys per page (default 0: K and V contiguous); decode: --seq-q 1";
    if (std::string(f.key) == "page_order")
      help = "the block table's pages: sequential (default) or shuffled (a fixed-seed order of the pool)";
    r.problem_opts[f.flag] =
        c->add_option(f.flag, r.problem[f.flag], help)->type_name(tn)->group(group);
  }
}

CLI::App* add_run(CLI::App& app, RunArgs& ra) {
  CLI::App* run = app.add_subcommand(
      "run", "Verify, time and record a config (default configs/default.json) or one problem given by flags");
  run->footer(R"(
Every (case, implementation, option set, pass) of the config is checked against the float64
reference, timed through Google Benchmark (--benchmark_* flags are passed to it), and written
as one row of the results JSON; a table is printed at the end. Config format, verification,
timing, memory and profiling: docs/cli.md. Results format: docs/results_schema.md.
A single problem starts from batch 1, heads 1, seq 1, head_dim 64, f32, non-causal, every
implementation, pass fwd; the flags change what they name (--heads-kv defaults to --heads-q).

Examples:
  attnbench run                                       # configs/default.json
  attnbench run configs/smoke.json --impl 'cpu.*' --out /tmp/smoke.json
  attnbench run --seq 2048 --heads-q 16 --heads-kv 4 --head-dim 128 --causal --dtype bf16 --pass fwd,bwd
  attnbench run configs/fa2_grid.json --impl cuda.flash_fwd --profile --verify off   # for ncu/nsys
  attnbench run configs/smoke.json --dump /tmp/tensors --impl cpu.flash_fwd
  attnbench run configs/default.json --benchmark_repetitions=10 --benchmark_out=gb.json

Exit codes: 0 all rows pass or skip, 1 a row failed, 2 bad input, 130/143/129 stopped by
SIGINT/SIGTERM/SIGHUP.)");
  add_case_flags(run, ra);
  run->add_option("--out,-o", ra.out, "Results file. Default: results/local/<config name>-<UTC date>.json")
      ->type_name("FILE");
  run->add_flag("--profile", ra.profile, "One validation call per row, no timing loop (for ncu / nsys)");
  run->add_option("--resume", ra.resume,
                  "Continue an earlier (e.g. interrupted) results file of the same config: its rows with a "
                  "verdict and a time are kept, verified rows without a time are timed (not verified "
                  "again), the rest run. Writes to --out, default FILE itself")
      ->type_name("FILE");
  run->add_option("--dump", ra.dump, "Write each verified case's tensors as .npy files under DIR")->type_name("DIR");
  run->add_flag("--quiet,-q", ra.quiet, "No progress lines and no Google Benchmark output; just the table");
  ra.devices_opt = run->add_option("--devices", ra.devices,
                                   "One worker process per GPU (all, or indices like 0,1,3) over a partition of the "
                                   "cases balanced by FLOPs; the parts merge into --out (docs/multi_gpu.md)")
                       ->type_name("all|LIST");
  // Hidden: what the parent of a --devices run gives each worker (devices.hpp).
  run->add_option("--worker-device", ra.worker_device)->group("");
  run->add_option("--worker-cases", ra.worker_cases)->group("");
  run->add_option("--worker-part", ra.worker_part)->group("");
  return run;
}

CLI::App* add_expand(CLI::App& app, RunArgs& ea) {
  CLI::App* exp = app.add_subcommand("expand", "Print the cases of a config (or one problem) as JSON lines, for other tools");
  exp->footer(R"(
One compact JSON object per case, in run order: label, case_index, problem, FLOPs and io_bytes
per pass, config_name and config_hash, the seed and distribution of the inputs, verify and timing
settings, the implementations with their option sets, and the rows (impl, options, pass, NVTX
name). The flags are run's and change the config as they would for run (the hash follows).
scripts/peers/ and scripts/ncu_hbm.py read their cases from it. docs/cli.md, "attnbench expand".

Examples:
  attnbench expand configs/fa3_grid.json --case '*_sq16384_*'
  attnbench expand --seq 1024 --heads-q 8 --head-dim 128 --causal --dtype bf16 --pass fwd,bwd

Exit codes: 0 printed, 2 bad input (nothing printed).)");
  add_case_flags(exp, ea);
  return exp;
}

CLI::App* add_check(CLI::App& app, CheckOptions& ko) {
  CLI::App* chk = app.add_subcommand("check", "Run the conformance suite on implementations; exit 1 on a failure");
  chk->add_option("--impl", ko.impls, "Implementation name or glob, repeatable (default: every one)")->type_name("GLOB");
  chk->add_option("--device", ko.device, "Only the implementations of this device: cpu or cuda")->type_name("DEVICE");
  chk->add_option("--case", ko.cases, "Only the cases whose label matches this glob, repeatable")->type_name("GLOB");
  chk->add_flag("--quiet,-q", ko.quiet, "No progress lines: the failures and the summary only");
  chk->footer("\nThe suite and its output: docs/cli.md, \"attnbench check\". Exit codes: 0 nothing failed, 1 a case\n"
              "failed, 2 bad input.");
  return chk;
}

// compare's --rerun flags, and its footer.
void add_rerun_flags(CLI::App* cmp, CompareOptions& co) {
  cmp->add_option("--rerun", co.rerun,
                  "Measure the rows found slower again with this attnbench binary (NEW's build) "
                  "before deciding")
      ->type_name("BINARY");
  cmp->add_option("--rerun-base", co.rerun_base,
                  "With --rerun: measure them again with BASE's build too, alternating with NEW's")
      ->type_name("BINARY");
  cmp->add_option("--rerun-rows", co.rerun_rows,
                  "With --rerun: slower (the rows found slower), suspect (above the threshold, "
                  "significant or not) or all (every timed row)")
      ->capture_default_str();
  cmp->add_option("--rerun-rounds", co.rerun_rounds,
                  "Rounds of the rerun, one invocation a side per implementation each, sides "
                  "alternating (default 0: enough for the signed-rank test to reach alpha over "
                  "the rows, at least 6)")
      ->capture_default_str();
  cmp->add_option("--rerun-more-rounds", co.rerun_more_rounds,
                  "With --rerun: rounds more for the rows the first rounds leave beyond the "
                  "threshold but not significant, each stage at alpha/2 (default -1: three times "
                  "the first stage's; 0: one stage at alpha)")
      ->capture_default_str();
  cmp->add_option("--rerun-repetitions", co.rerun_repetitions,
                  "Repetitions in each rerun invocation (their median is the round's sample)")
      ->capture_default_str();
  cmp->footer(R"(
Slower means: new/base above 1 + threshold, and NEW's repetitions (time.samples_ms) slower than
BASE's by a one-sided Mann-Whitney U test at level alpha over all the rows tested (Holm by
default). Rows without samples (older files) are judged by the spread rule. With --rerun the
rows are measured again in rounds (one invocation a side, alternating) and decided instead by a
one-sided Wilcoxon signed-rank test on the rounds' log(new/base). compare.hpp and docs/cli.md have
the rules.

Examples:
  attnbench compare base.json new.json
  attnbench compare base.json new.json --rerun build/attnbench --rerun-base base-build/attnbench
  attnbench compare base.json new.json --only-changed
  attnbench compare base.json new.json --format json > diff.json

Exit codes: 0 no regression, 1 a regression, 2 bad input.)");
}

CLI::App* add_compare(CLI::App& app, CompareOptions& co, std::string& correction) {
  CLI::App* cmp =
      app.add_subcommand("compare", "Compare two results files row by row; exit 1 on a regression");
  cmp->add_option("base", co.base, "Baseline results file")->required()->type_name("BASE.json");
  cmp->add_option("new", co.next, "New results file")->required()->type_name("NEW.json");
  cmp->add_option("--threshold", co.threshold, "Slowdown tolerated beyond the noise (fraction)")
      ->capture_default_str();
  cmp->add_flag("--allow-missing", co.allow_missing,
                "A row of BASE missing from NEW is not a failure");
  cmp->add_option("--error-factor", co.error_factor, "Error growth tolerated (factor on max_abs)")
      ->capture_default_str();
  cmp->add_option("--alpha", co.alpha, "Level of the test over all the rows, after the correction")
      ->capture_default_str();
  cmp->add_option("--correction", correction,
                  "For testing many rows: holm (family-wise), bh (false discovery rate) or none")
      ->capture_default_str();
  cmp->add_flag("--only-changed", co.only_changed, "Leave out the rows whose verdict is ok");
  cmp->add_option("--format", co.format, "text or json")->capture_default_str();
  add_rerun_flags(cmp, co);
  return cmp;
}

CLI::App* add_table(CLI::App& app, TableOptions& to) {
  CLI::App* tab = app.add_subcommand("table", "Render a results file as the papers' tables (markdown or CSV)");
  tab->add_option("results", to.results, "Results file")->required()->type_name("RESULTS.json");
  tab->add_option(
         "--format", to.format,
         "markdown; csv (tidy: one line per row, for pandas); wide-csv (the tables as CSV)")
      ->capture_default_str();
  tab->add_option("--baseline", to.baseline, "Implementation the speedups divide by (default: cuda.standard_cublas where the group has it, else cpu.naive_3pass)")->type_name("IMPL");
  tab->add_option("--metric", to.metric, "tflops, ms or memory")->capture_default_str();
  return tab;
}

}  // namespace

int main(int argc, char** argv) {
  // Every message quotes its arguments through it: no control byte of a path, a glob or a results
  // file reaches the terminal. stdout of `run` keeps Google Benchmark's colours.
  PrintableStreams printable_streams;
  SplitArgs args = split_args(argc, argv);
  if (!arguments_plausible(args)) return kBadInput;
  int gb_argc = static_cast<int>(args.gb_argv.size());
  args.gb_argv.push_back(nullptr);
  benchmark::Initialize(&gb_argc, args.gb_argv.data());
  if (benchmark::ReportUnrecognizedArguments(gb_argc, args.gb_argv.data())) return kBadInput;

  CLI::App app{
      "attnbench: benchmark and verify exact attention implementations (CPU and CUDA)\n"
      "against a float64 reference, with timing through Google Benchmark.",
      "attnbench"};
  app.footer(kExamples);
  app.require_subcommand(1);

  app.add_subcommand("list", "List every registered implementation and what it supports");
  RunArgs ra;
  ra.benchmark_out = args.benchmark_out;
  CLI::App* run = add_run(app, ra);
  RunArgs ea;
  ea.expand = true;
  CLI::App* exp = add_expand(app, ea);
  CheckOptions ko;  // check.hpp
  CLI::App* chk = add_check(app, ko);
  CompareOptions co;
  std::string correction = "holm";
  CLI::App* cmp = add_compare(app, co, correction);
  TableOptions to;
  CLI::App* tab = add_table(app, to);

  if (args.cli_argv.size() == 1) {  // no command: show what there is
    std::cout << app.help();
    return kBadInput;
  }
  try {
    app.parse(static_cast<int>(args.cli_argv.size()), args.cli_argv.data());
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : kBadInput;
  }

  int rc = 0;
  if (app.got_subcommand("list")) {
    print_list(std::cout);
  } else if (run->parsed()) {
    rc = cmd_run(ra, args.bench_flags, args.command_line, args.raw_args);
  } else if (exp->parsed()) {
    rc = cmd_run(ea, args.bench_flags, args.command_line, args.raw_args);
  } else if (chk->parsed()) {
    rc = run_check(ko, std::cout, std::cerr);
  } else if (cmp->parsed()) {
    if (!parse_correction(correction, co.correction)) {
      std::cerr << "attnbench compare: --correction must be holm, bh or none, got \"" << correction
                << "\"\n";
      rc = kBadInput;
    } else {
      printable_streams.on_stdout();  // the rows' strings come from the files
      rc = run_compare(co, std::cout, std::cerr);
    }
  } else if (tab->parsed()) {
    printable_streams.on_stdout();
    rc = run_table(to, std::cout, std::cerr);
  }
  benchmark::Shutdown();
  return rc;
}
