// The Implementation interface and the registry: the only list of implementations.
//
// An implementation is one file in impls/<device>/ that defines a class derived from
// Implementation and registers it with ATTNBENCH_REGISTER(Class); a renamed one declares its
// former names in the same file with ATTNBENCH_FORMER_NAME(former, current), so that configs,
// --impl and old results files that use them still work. It only computes: it never
// allocates in forward()/backward() (the harness allocates the workspace it asks for), never
// times itself and never prints. Errors are reported by throwing (e.g. a failed CUDA call);
// the harness turns them into a FAIL row and goes on.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "attnbench/problem.hpp"

namespace attnbench {

enum class Device { cpu, cuda };
constexpr std::string_view to_string(Device d) { return d == Device::cpu ? "cpu" : "cuda"; }

// fwd: q,k,v -> o,lse. bwd: q,k,v,o,lse,do -> dq,dk,dv. fwd_bwd: both, timed together.
enum class Pass { fwd, bwd, fwd_bwd };
constexpr std::string_view to_string(Pass p) {
  return p == Pass::fwd ? "fwd" : p == Pass::bwd ? "bwd" : "fwd_bwd";
}

// Whether an implementation can run a case; when it cannot, `reason` says why (a SKIP row).
struct Support {
  bool ok = true;
  std::string reason;
  static Support yes() { return {}; }
  static Support no(std::string why) { return {false, std::move(why)}; }
  explicit operator bool() const { return ok; }
};

// Run-time tuning knobs (e.g. tile sizes), given per case by the config's "options" (read under
// its former name "params" too) and written in each results row's "options".
using Options = std::map<std::string, std::int64_t>;

// options[key], or fallback when options is null or has no such key.
inline std::int64_t option_or(const Options* options, const std::string& key,
                              std::int64_t fallback) {
  if (!options) return fallback;
  auto it = options->find(key);
  return it == options->end() ? fallback : it->second;
}

// Pointers are device pointers for the implementation's device. Tensors use the problem's dtype
// except lse (float32). `stream` is a cudaStream_t for CUDA implementations, null on the CPU.
struct FwdArgs {
  Problem p;
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* o = nullptr;
  float* lse = nullptr;
  void* workspace = nullptr;
  std::size_t workspace_bytes = 0;
  void* stream = nullptr;
  const Options* options = nullptr;
  // Varlen and paged problems: their int32 sequence metadata in the implementation's device memory
  // (sequence_metadata, problem.hpp), uploaded by the harness with the inputs; null where the
  // problem has none. CPU code may read the same from p (block_table, seqlens, q_start, ...).
  const std::int32_t* cu_seqlens_q = nullptr;   // varlen: [batch + 1]
  const std::int32_t* cu_seqlens_kv = nullptr;  // varlen, contiguous K/V: [batch + 1]
  const std::int32_t* seqlens_kv = nullptr;     // varlen or paged: [batch] context lengths
  const std::int32_t* block_table = nullptr;    // paged: [batch, p.pages_per_seq]

  std::int64_t option(const std::string& key, std::int64_t fallback) const {
    return option_or(options, key, fallback);
  }
};

struct BwdArgs {
  Problem p;
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  const void* o = nullptr;
  const float* lse = nullptr;
  const void* dout = nullptr;
  void* dq = nullptr;
  void* dk = nullptr;
  void* dv = nullptr;
  void* workspace = nullptr;
  std::size_t workspace_bytes = 0;
  void* stream = nullptr;
  const Options* options = nullptr;
  // Varlen: as FwdArgs.
  const std::int32_t* cu_seqlens_q = nullptr;
  const std::int32_t* cu_seqlens_kv = nullptr;

  std::int64_t option(const std::string& key, std::int64_t fallback) const {
    return option_or(options, key, fallback);
  }
};

// What an implementation supports, checked by supports() before anything runs.
struct Capabilities {
  std::vector<DType> dtypes{DType::f32, DType::f16, DType::bf16};
  int min_head_dim = 1;
  int max_head_dim = kMaxHeadDim;
  int head_dim_multiple = 1;  // head_dim % this == 0
  bool causal = true;
  bool gqa = true;  // heads_kv < heads_q (GQA and MQA)
  bool window = false;   // sliding-window attention (Problem::window_left / window_right)
  bool softcap = false;  // logit soft-capping (Problem::softcap)
  bool varlen = false;   // variable-length batches (Problem::seqlens_q / seqlens_kv, THD layout)
  bool paged = false;    // paged KV caches (Problem::page_size, block_table; forward only)
  bool forward = true;
  bool backward = false;
  // For an implementation without a forward (a backward-only kernel), the implementation whose
  // forward produces O and LSE in a fwd_bwd timing.
  std::string fwd_partner;
  // Tuning knobs this implementation reads from Options (anything else is a config error).
  std::vector<std::string> options;
  // Whether S and P are stored in the problem's dtype between passes (the naive 3-pass, standard
  // attention). Where that dtype cannot resolve the logits (f16 and bf16 at very large scales) it
  // has the naive baseline's error by construction, and the conformance suite holds it to what it
  // holds the baseline to there: failing only the absolute bound is an expected failure.
  bool scores_in_dtype = false;
  // Conformance cases known to fail for a reason outside attnbench (a vendor library's bug):
  // `cases` is a glob on "<pass> <case label>" (e.g. "bwd b1_hq2_hkv1_sq64_skv64_d64_bf16"), `why`
  // says what fails and where it was seen. Such a case is an expected failure while it fails, and
  // a failure once it passes, so that an upstream fix is noticed and the entry removed.
  struct KnownFailure {
    std::string cases;
    std::string why;
  };
  std::vector<KnownFailure> known_failures;
};

class Implementation {
 public:
  virtual ~Implementation() = default;

  // Unique name, "<device>.<algorithm>[_<direction>][_<tensor-core instruction>]" (docs/
  // architecture.md, "Names"), e.g. "cpu.naive_3pass", "cuda.flash_fwd", "cuda.flash_bwd_mma".
  virtual std::string name() const = 0;
  virtual Device device() const = 0;
  // One line for `attnbench list`.
  virtual std::string summary() const = 0;
  virtual Capabilities capabilities() const = 0;

  // Capabilities first, then supports_extra(). Passes: fwd and bwd (fwd_bwd needs both).
  Support supports(const Problem& p, Pass pass) const;

  // Checks beyond Capabilities (shared-memory limits, library availability, ...).
  virtual Support supports_extra(const Problem&, Pass) const { return Support::yes(); }

  // Whether one set of tuning options can run this problem (a tile too large for the shared
  // memory at this head_dim, say). A "no" is a SKIP row with the reason, like supports().
  // Options outside Capabilities::options are refused before this, when the config is read.
  virtual Support supports_options(const Problem&, Pass, const Options&) const { return Support::yes(); }

  // Scratch memory for one call, allocated by the harness on the implementation's device. Its
  // contents are unspecified (emulator tests poison them), except for a zeroed prefix:
  virtual std::size_t workspace_bytes(const Problem&, Pass, const Options&) const { return 0; }
  // How many of the workspace's first bytes are zero before the first call of a case (at most
  // workspace_bytes): the harness zero-fills them once, when it allocates the workspace, outside
  // any timed call. An implementation that keeps state there across its kernels (arrival counters,
  // say) must leave it zero again at the end of every call, so that each call starts as the first.
  virtual std::size_t workspace_zeroed_bytes(const Problem&, Pass, const Options&) const { return 0; }

  // Called once per case, outside any timed region, before the first call: build plans,
  // create library handles, set kernel attributes. Calls for one problem follow it.
  virtual void prepare(const Problem&, Pass, const Options&) const {}

  virtual void forward(const FwdArgs& a) const;
  virtual void backward(const BwdArgs& a) const;
};

class Registry {
 public:
  static Registry& instance();
  // Aborts the program on a duplicate name: two files claiming one name, or a name that is
  // another implementation's former name, is a build defect.
  bool add(std::unique_ptr<Implementation> impl);
  // Records that the implementation named `current` was once named `former`
  // (ATTNBENCH_FORMER_NAME, in that implementation's own file). Aborts when `former` is a
  // current name, is already the former name of another implementation, or equals `current`.
  bool add_former_name(std::string former, std::string current);
  // The current name of a former name (following a rename of a rename); any other name as it
  // is. Exact names only: a glob is never a former name.
  std::string canonical(std::string_view name) const;
  bool is_former_name(std::string_view name) const;
  // Every former name with the current name it resolves to, sorted by the former name.
  std::vector<std::pair<std::string, std::string>> former_names() const;
  // Current names only (canonical() first to accept a former one).
  const Implementation* find(std::string_view name) const;
  std::vector<const Implementation*> all() const;  // sorted by name
  // Current names matching a glob (glob_match), sorted.
  std::vector<const Implementation*> match(std::string_view glob) const;

 private:
  std::vector<std::unique_ptr<Implementation>> impls_;
  std::map<std::string, std::string, std::less<>> former_;  // former name -> the name it became
};

// fnmatch(3)'s globs without flags: '*', '?', bracket expressions ([fn], [a-z], [!x], [[:digit:]])
// and backslash escapes; the same for --impl, --case and the configs' "implementations".
bool glob_match(std::string_view pattern, std::string_view text);

// The same-device naive 3-pass implementation used as the error baseline of the verification
// rule ("<device>.naive_3pass").
const Implementation* naive_baseline(Device d);

}  // namespace attnbench

#define ATTNBENCH_CONCAT_INNER(a, b) a##b
#define ATTNBENCH_CONCAT(a, b) ATTNBENCH_CONCAT_INNER(a, b)
// Registers an implementation at static-initialisation time. Implementation files are compiled
// into an OBJECT library, so the registration survives linking.
#define ATTNBENCH_REGISTER(Type)                                                    \
  namespace {                                                                       \
  [[maybe_unused]] const bool ATTNBENCH_CONCAT(attnbench_registered_, __LINE__) = \
      ::attnbench::Registry::instance().add(std::make_unique<Type>());              \
  }
// Declares, next to ATTNBENCH_REGISTER in the renamed implementation's own file, a name it had
// before: ATTNBENCH_FORMER_NAME("cpu.flash_1pass", "cpu.flash_fwd"). Configs, --impl and old
// results files that use the former name get the implementation of the current one
// (Registry::canonical); globs match current names only.
#define ATTNBENCH_FORMER_NAME(former, current)                                          \
  namespace {                                                                           \
  [[maybe_unused]] const bool ATTNBENCH_CONCAT(attnbench_former_name_, __LINE__) =     \
      ::attnbench::Registry::instance().add_former_name(former, current);               \
  }
