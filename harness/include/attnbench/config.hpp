// Run configurations (configs/*.json): what to run, parsed and validated before anything runs.
//
// A config names the cases (problem defaults plus sweeps), the implementations (names or globs),
// the passes, the inputs, the verification mode and the timing. docs/cli.md documents every key;
// the short form:
//
//   {"name": "smoke", "description": "...",
//    "problem": {"batch": 1, "heads_q": 8, "heads_kv": 2, "seq_q": 17, "seq_kv": 33,
//                "head_dim": 64, "causal": false, "scale": 0, "dtype": "bf16"},
//    "sweep": {"product": {"causal": [false, true], "dtype": ["f32", "bf16"]},
//              "zip": [{"seq": [512, 1024], "batch": [32, 16]}]},
//    "implementations": ["cpu.*"], "passes": ["fwd", "bwd", "fwd_bwd"],
//    "options": {"cpu.flash_fwd": {"block_c": [32, 64]}},
//    "inputs": {"distribution": "normal", "seed": 1234},
//    "verify": {"mode": "auto", "sample_heads": 2, "sample_rows": 64},
//    "timing": {"hot": false, "min_time_s": 0.1, "repetitions": 3, "warmup_s": 0.05},
//    "devices": ["cpu", "cuda"],
//    "groups": [ {...}, ... ]}
//
// Sweeps: every product axis is crossed with every other axis; the arrays of one zip group
// advance together (equal lengths) and the group is crossed with the rest. "seq" sets seq_q and
// seq_kv, "heads" sets heads_q and heads_kv; heads_kv set nowhere (problem, group, sweep) is
// heads_q (MHA), as in FlashAttention and PyTorch. Product axes vary slowest, in the order written,
// then the zip groups. "groups" splits a config into parts with their own sweeps,
// implementations, passes, options and devices (e.g. CPU-sized and GPU-sized cases); "problem",
// "verify" and "timing" at the top are per-field defaults for every group.
//
// Former names are still read, with a note (Config::notes): "params", the former name of the
// key "options" (both in one object is an error), and an implementation's former name
// (ATTNBENCH_FORMER_NAME) written out in "implementations" or as an "options" key.
//
// Every error carries the JSON pointer of the offending value (e.g. /sweep/product/seq_q/2) and
// the value itself.
#pragma once

#include <cstdint>
#include <optional>
#include <streambuf>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "attnbench/execute.hpp"
#include "attnbench/implementation.hpp"
#include "attnbench/tensors.hpp"
#include "attnbench/verify.hpp"

namespace attnbench {

struct TimingSettings {
  bool hot = false;          // true: no cache flush between timed calls
  FlushMode flush = FlushMode::write;  // how the caches are flushed when not hot (execute.hpp)
  double min_time_s = 0.1;   // Google Benchmark's minimum time per repetition
  int repetitions = 3;       // repetitions; median, min, mean and cv are taken over them
  double warmup_s = 0.02;    // untimed warm-up before the first repetition
};

struct VerifySettings {
  VerifyMode mode = VerifyMode::automatic;
  SampleSpec sample;
};

// One implementation of a group with the option sets it runs with ("options"); a single empty
// set when the config gives none.
struct ImplRun {
  const Implementation* impl = nullptr;
  std::vector<Options> option_sets{Options{}};
};

struct ConfigGroup {
  std::string description;
  std::vector<Problem> cases;
  std::vector<ImplRun> impls;  // sorted by name, already filtered by "devices"
  std::vector<Pass> passes;
  VerifySettings verify;
  TimingSettings timing;
};

struct Config {
  std::string name = "config";
  std::string description;
  Distribution distribution = Distribution::normal;
  std::uint64_t seed = 1234;
  std::vector<ConfigGroup> groups;
  nlohmann::ordered_json json;  // the document as parsed, key order kept
  // One line each for the user (stderr), e.g. that a former implementation name was resolved:
  // "note: cpu.flash_1pass is the former name of cpu.flash_fwd, ...".
  std::vector<std::string> notes;

  std::size_t case_count() const;
  std::size_t row_count() const;  // cases x implementations x option sets x passes
  std::string hash() const;       // FNV-1a 64 (hex) of the canonical (key-sorted) dump of json
};

struct ConfigError {
  std::string path;     // JSON pointer; "" for the document itself
  std::string value;    // the offending value as compact JSON ("" when there is none)
  std::string message;  // what is wrong with it
  // "/sweep/product/seq_q/2 = -5: must be a positive integer"
  std::string text() const;
};

struct ParseOptions {
  // Bound on the tensors of one case, passed to validate(); 0 = no bound.
  std::int64_t max_bytes = 0;
  // Where implementations are looked up; null = Registry::instance().
  const Registry* registry = nullptr;
  // `attnbench expand`: a config whose implementations this build lacks (cuda.* without CUDA)
  // still lists its cases instead of failing with "nothing to run".
  bool allow_no_rows = false;
};

using ConfigResult = std::variant<Config, ConfigError>;

// Pure functions: the text (or document) in, a Config or the first error out. No I/O.
ConfigResult parse_config(std::string_view text, const ParseOptions& opts = {});
ConfigResult parse_config_doc(const nlohmann::ordered_json& doc, const ParseOptions& opts = {});

// Configs nest a few levels; deeper documents are refused before anything walks them, because
// copying or printing a JSON value recurses once per level (nlohmann) and would overflow the
// stack. Iterative. Returns the error, or nullopt when the document is shallow enough.
inline constexpr int kMaxConfigDepth = 64;
std::optional<ConfigError> check_depth(const nlohmann::ordered_json& doc, int max_depth = kMaxConfigDepth);

// Text from the command line or a file, for a message on the terminal: control bytes (below
// 0x20, and 0x7f) as \xNN, so that a hostile argument cannot move the cursor, clear the screen
// or retitle the terminal.
std::string printable(std::string_view text);

// A stream buffer that writes through to `dest` with printable()'s escapes, except that newline
// and tab pass: installed on std::cerr (and on std::cout for table and compare), it keeps any
// path, glob or results-file string a message quotes from reaching the terminal as control bytes.
class PrintableBuf : public std::streambuf {
 public:
  explicit PrintableBuf(std::streambuf* dest) : dest_(dest) {}
  std::streambuf* dest() const { return dest_; }

 protected:
  int_type overflow(int_type ch) override;
  std::streamsize xsputn(const char* s, std::streamsize n) override;
  int sync() override { return dest_->pubsync(); }

 private:
  std::streambuf* dest_;
};

// JSON pointer escaping of one key ('~' -> "~0", '/' -> "~1").
std::string json_pointer_escape(std::string_view key);

}  // namespace attnbench
