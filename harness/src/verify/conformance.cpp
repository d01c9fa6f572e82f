// The conformance suite (conformance.hpp): the list, check_impl, and one case with its planted
// faults.
#include "attnbench/conformance.hpp"

#include "attnbench/make_problem.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <exception>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <sstream>
#include <tuple>
#include <utility>

#include "attnbench/execute.hpp"
#include "attnbench/nvtx.hpp"
#include "attnbench/validation.hpp"

namespace attnbench {

namespace {

std::shared_ptr<const Outputs> call_outputs(const Implementation& impl, const Problem& p, Pass pass,
                                            const Options& opts, const CaseInputs& in,
                                            const Reference& ref) {
  const std::string range = nvtx::call_range_name(impl.name(), opts, p.label(), pass);
  return std::make_shared<const Outputs>(
      validation_call(impl, p, pass, opts, in, ref, range).outputs);
}

// The same-device naive baseline's outputs; null when there is none or it cannot run the case.
std::shared_ptr<const Outputs> baseline(Device d, const Problem& p, Pass pass, const CaseInputs& in,
                                        const Reference& ref) {
  const Implementation* base = naive_baseline(d);
  if (!base || !base->supports(p, pass)) return nullptr;
  return call_outputs(*base, p, pass, {}, in, ref);
}

}  // namespace

Verdict check_impl(const Implementation& impl, const Problem& p, Pass pass, std::uint64_t seed,
                   VerifyMode mode, const Options& opts, Distribution dist) {
  const CaseInputs in = make_inputs(p, seed, dist);
  // The backward's O/LSE inputs need the full forward reference; computed whenever affordable.
  const Reference ref = compute_reference(in, mode, pass != Pass::bwd, pass != Pass::fwd, seed);
  const std::shared_ptr<const Outputs> out = call_outputs(impl, p, pass, opts, in, ref);
  const bool own = naive_baseline(impl.device()) == &impl && opts.empty();  // its own baseline
  const std::shared_ptr<const Outputs> naive =
      own ? out : baseline(impl.device(), p, pass, in, ref);
  return verify(p, pass, *out, naive.get(), ref);
}

namespace conformance {

std::string_view to_string(Group g) {
  switch (g) {
    case Group::odd_shapes:
      return "odd_shapes";
    case Group::grouped:
      return "grouped";
    case Group::causal_rect:
      return "causal_rect";
    case Group::custom_scale:
      return "custom_scale";
    case Group::large_scale:
      return "large_scale";
    case Group::outlier:
      return "outlier";
    case Group::window_softcap:
      return "window_softcap";
    case Group::varlen:
      return "varlen";
    case Group::paged:
      return "paged";
    case Group::random:
      return "random";
  }
  return "?";
}

namespace {

constexpr DType kDTypes[] = {DType::f32, DType::f16, DType::bf16};

// The suite's shapes, group by group, in their order. Long (about 110 lines) because it is the one
// list: kept whole, it reads top to bottom in the order the cases run and faults are planted.
std::vector<Shape> make_shapes() {
  std::vector<Shape> v;
  auto add = [&](Group g, const Problem& p, Distribution dist = Distribution::normal) {
    v.push_back({p, g, dist});
  };
  // Sequence tails x head_dims, MHA, batch 2 (batch strides), causal and not.
  for (DType t : kDTypes)
    for (int s : {1, 17, 129})
      for (int d : {16, 40, 64, 80, 96, 128, 256})
        for (bool causal : {false, true})
          add(Group::odd_shapes, make_problem(2, 2, 2, s, s, d, causal, t));
  // GQA 8:2 and MQA 8:1, square and rectangular, causal and not.
  for (DType t : kDTypes) {
    for (int hkv : {2, 1})
      for (auto [sq, skv] : {std::pair{33, 33}, std::pair{65, 40}, std::pair{17, 130}})
        for (int d : {40, 64})
          for (bool causal : {false, true})
            add(Group::grouped, make_problem(2, 8, hkv, sq, skv, d, causal, t));
    for (bool causal : {false, true}) {
      add(Group::grouped, make_problem(1, 8, 2, 65, 65, 64, causal, t));
      add(Group::grouped, make_problem(2, 8, 1, 40, 72, 32, causal, t));
    }
  }
  // Bottom-right causal with seq_q != seq_kv: seq_q > seq_kv leaves the first seq_q - seq_kv rows
  // with no visible key (O = 0, LSE = -inf); seq_q < seq_kv shifts the diagonal right. The same
  // rectangles without the mask.
  for (DType t : kDTypes) {
    for (auto [sq, skv] :
         {std::pair{17, 129}, std::pair{1, 64}, std::pair{129, 17}, std::pair{64, 1},
          std::pair{100, 37}, std::pair{37, 100}, std::pair{200, 199}})
      for (int d : {64, 128}) add(Group::causal_rect, make_problem(1, 2, 1, sq, skv, d, true, t));
    for (bool causal : {false, true}) {
      add(Group::causal_rect, make_problem(1, 2, 1, 33, 100, 64, causal, t));
      add(Group::causal_rect, make_problem(1, 2, 2, 100, 33, 64, causal, t));
    }
  }
  for (DType t : kDTypes) {
    add(Group::custom_scale, make_problem(1, 4, 2, 70, 90, 48, true, t, 0.3));
    add(Group::custom_scale, make_problem(1, 2, 2, 50, 70, 48, true, t, 0.3));
  }
  // Large logits: scaled scores near 1e9, where the running max and the exponents must stay exact
  // (an FMA residual alone overflows exp there). f16's naive baseline stores S in f16, which would
  // overflow at 1e8, so f16 takes 500 (scores near 2e4).
  for (DType t : kDTypes) {
    const double big = t == DType::f16 ? 500.0 : 1e8;
    add(Group::large_scale, make_problem(1, 2, 1, 64, 64, 64, false, t, big));
    add(Group::large_scale, make_problem(1, 4, 2, 33, 100, 40, true, t, big));
    add(Group::large_scale, make_problem(2, 4, 2, 33, 100, 40, true, t, big));
    add(Group::large_scale, make_problem(1, 2, 2, 100, 33, 64, true, t, big));
    add(Group::large_scale, make_problem(1, 2, 2, 100, 33, 128, true, t, big));
    add(Group::large_scale, make_problem(1, 2, 2, 70, 90, 256, false, t, big));
  }
  // FlashAttention-3's outlier inputs (N(0,1) + N(0,100) * Bernoulli(0.001)): P nearly one-hot, so
  // any rounding of S before the exp shows in the gradients. The long rows of keys (1025, 4097:
  // decode-like, one query row) come last: faults are planted on the first case of each group,
  // dtype and pass (Case::plant), and three copies and verdicts of the 4097-key case's dK and dV
  // (17M elements each) would be a third of the CPU suite's time.
  for (DType t : kDTypes) {
    add(Group::outlier, make_problem(2, 8, 2, 129, 300, 64, true, t), Distribution::outlier);
    add(Group::outlier, make_problem(1, 4, 1, 77, 300, 64, true, t), Distribution::outlier);
    add(Group::outlier, make_problem(1, 4, 4, 77, 77, 80, false, t), Distribution::outlier);
    add(Group::outlier, make_problem(2, 2, 2, 129, 129, 40, false, t), Distribution::outlier);
    add(Group::outlier, make_problem(1, 2, 1, 200, 150, 256, true, t), Distribution::outlier);
    add(Group::outlier, make_problem(2, 8, 2, 1, 1025, 128, false, t), Distribution::outlier);
    add(Group::outlier, make_problem(4, 32, 8, 1, 4097, 128, false, t), Distribution::outlier);
  }
  // Sliding windows and soft-capping (implementations that declare them; the others SKIP): both
  // sides, one side, 0 and 1 wide, with causal at seq_q != seq_kv both ways, rows a window leaves
  // without keys (seq_q > seq_kv, window_right 0), GQA and MQA; soft-capping alone, with causal,
  // with a window, and on outlier inputs at scale 100 (most scores far beyond the cap; at 1e4 the
  // float32 scores themselves are off by ~1e-2 near zero, where tanh passes them on, and even the
  // naive baseline misses the bounds: that needs the large_scale group's treatment).
  auto windowed = [](Problem p, int left, int right, double softcap) {
    p.window_left = left;
    p.window_right = right;
    p.softcap = softcap;
    return p;
  };
  for (DType t : kDTypes) {
    const Group g = Group::window_softcap;
    add(g, windowed(make_problem(2, 4, 2, 70, 90, 64, false, t), 16, 8, 0));
    add(g, windowed(make_problem(1, 2, 2, 90, 70, 64, true, t), 10, -1, 0));
    add(g, windowed(make_problem(1, 2, 2, 17, 17, 40, false, t), 0, 0, 0));
    add(g, windowed(make_problem(1, 2, 1, 33, 40, 96, false, t), 1, 1, 0));
    add(g, windowed(make_problem(1, 2, 2, 64, 200, 80, false, t), -1, 30, 0));
    add(g, windowed(make_problem(1, 8, 2, 129, 129, 128, true, t), 32, -1, 0));
    add(g, windowed(make_problem(1, 2, 1, 120, 40, 64, false, t), 3, 0, 0));
    add(g, windowed(make_problem(1, 2, 2, 64, 64, 128, false, t), -1, -1, 30));
    add(g, windowed(make_problem(1, 4, 1, 70, 90, 256, true, t), -1, -1, 50));
    add(g, windowed(make_problem(1, 2, 2, 100, 100, 64, false, t), 8, 8, 5));
    // f32 only: the naive baseline stores the capped scores in the dtype, and bf16 resolves
    // scores near the cap (30) to 0.125, beyond the baseline's own rel_l2 bound (0.126 measured).
    if (t == DType::f32) {
      add(g, windowed(make_problem(1, 4, 2, 77, 300, 64, true, t, 100), -1, -1, 30),
          Distribution::outlier);
    }
  }
  // Variable-length batches (implementations that declare varlen; the others SKIP), packed THD:
  // a sequence without queries and one with queries but no key (O = 0, LSE = -inf, no gradient),
  // causal with seq_q > seq_kv and seq_q < seq_kv within one batch, a window, a soft cap, GQA 8:2
  // and MQA. The last sequence's last row always sees keys (the planted wrong row goes there), and
  // every batch has a sequence after a non-empty one (a wrong sequence offset shows there).
  auto varlen = [](Problem p, std::vector<int> q, std::vector<int> kv) {
    p.set_seqlens(std::move(q), std::move(kv));
    return p;
  };
  for (DType t : kDTypes) {
    const Group g = Group::varlen;
    for (bool causal : {false, true}) {
      add(g, varlen(make_problem(1, 2, 2, 1, 1, 64, causal, t), {50, 25, 0, 33}, {20, 0, 17, 40}));
    }
    add(g, windowed(varlen(make_problem(1, 8, 2, 1, 1, 40, true, t), {65, 1, 30}, {40, 64, 30}), 16,
                    -1, 0));
    add(g, windowed(varlen(make_problem(1, 8, 1, 1, 1, 64, false, t), {33, 100, 7}, {90, 20, 7}), 8,
                    8, 0));
    add(g, windowed(varlen(make_problem(1, 4, 2, 1, 1, 128, true, t), {64, 0, 70}, {0, 30, 100}),
                    -1, -1, 30));
  }
  // Paged KV caches (implementations that declare paged; the others SKIP; forward only, so the
  // backward passes SKIP too): decode and speculative decode (seq_q 1, 3, 4, 16) against caches
  // whose contexts are not multiples of the page size, a shuffled pool, an explicit table with
  // pages repeated within a sequence and shared between two, a ragged batch with a context of 1
  // and one of 0 (O = 0, LSE = -inf), a page larger than its context, a pool with unused pages,
  // seq_q > context (rows that see no key), GQA 16:1, a window and a soft cap. No table is the
  // contiguous layout in table-row order (b * pages_per_seq + lp): a kernel that ignores the
  // table reads the wrong pages in every case.
  auto paged = [](Problem p, int page_size, PageOrder order, int num_pages = 0) {
    p.page_size = page_size;
    p.page_order = order;
    p.num_pages = num_pages;
    p.make_block_table();
    return p;
  };
  for (DType t : kDTypes) {
    const Group g = Group::paged;
    add(g, paged(make_problem(3, 4, 2, 1, 100, 64, false, t), 16, PageOrder::shuffled));
    add(g, paged(make_problem(2, 16, 1, 4, 77, 128, true, t), 8, PageOrder::shuffled));
    add(g, paged(varlen(make_problem(1, 4, 4, 1, 1, 64, true, t), {1, 1, 1, 1}, {1, 0, 300, 33}),
                 16, PageOrder::shuffled));
    Problem shared = make_problem(2, 2, 2, 3, 40, 40, true, t);
    shared.page_size = 16;
    shared.set_block_table({{5, 2, 5}, {2, 0, 3}});
    shared.make_block_table();  // num_pages: the largest entry + 1
    add(g, shared);
    add(g, windowed(paged(varlen(make_problem(1, 8, 2, 1, 1, 128, true, t), {16, 5, 16},
                                 {16, 200, 3}),
                          64, PageOrder::shuffled, 20),
                    40, -1, 30));
  }
  // Random shapes from a fixed seed: any head_dim 1..256, group 1..4, seq 1..300. One draw per
  // statement: argument evaluation order is unspecified, the shapes must not be.
  std::mt19937 rng(kSeed);
  auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  for (DType t : kDTypes) {
    for (int n = 0; n < 10; ++n) {
      const int hkv = uniform(1, 3);
      const int group = uniform(1, 4);
      const int batch = uniform(1, 3);
      const int sq = uniform(1, 300);
      const int skv = uniform(1, 300);
      const int d = uniform(1, 256);
      const bool causal = uniform(0, 1) == 1;
      add(Group::random, make_problem(batch, hkv * group, hkv, sq, skv, d, causal, t));
    }
  }
  return v;
}

// ---- Planted faults in an implementation's outputs ------------------------------------------

// One output of a pass, as the verdict names it, with its layout.
struct Tensor {
  const char* name;
  HostTensor* t = nullptr;            // O, dQ, dK, dV
  std::vector<float>* lse = nullptr;  // LSE
  int batch, rows, heads, cols;  // [batch, rows, heads, cols]; LSE: [batch, heads, rows], cols 1
  std::int64_t numel() const { return static_cast<std::int64_t>(batch) * rows * heads * cols; }
  std::int64_t index(int b, int r, int h, int c) const {
    if (lse) return (static_cast<std::int64_t>(b) * heads + h) * rows + r;
    return ((static_cast<std::int64_t>(b) * rows + r) * heads + h) * cols + c;
  }
  double get(std::int64_t i) const { return lse ? (*lse)[static_cast<std::size_t>(i)] : t->get(i); }
  void set(std::int64_t i, double x) {
    if (lse)
      (*lse)[static_cast<std::size_t>(i)] = static_cast<float>(x);
    else
      t->set(i, static_cast<float>(x));
  }
  void poison(
      std::int64_t i) {  // the harness's NaN poison, as a call that never wrote it leaves it
    if (lse)
      std::memset(&(*lse)[static_cast<std::size_t>(i)], 0xff, sizeof(float));
    else
      std::memset(t->bytes.data() + static_cast<std::size_t>(i) * dtype_size(t->dtype), 0xff,
                  dtype_size(t->dtype));
  }
};

std::vector<Tensor> tensors_of(const Problem& p, Pass pass, Outputs& o) {
  std::vector<Tensor> v;
  // Varlen: the packed [total, heads, d] tensors and the [heads_q, total_q] LSE are a batch of one.
  const int b = p.varlen() ? 1 : p.batch, d = p.head_dim;
  const int sq = p.varlen() ? static_cast<int>(p.total_q()) : p.seq_q;
  const int skv = p.varlen() ? static_cast<int>(p.total_kv()) : p.seq_kv;
  if (pass != Pass::bwd) {
    v.push_back({"O", &o.o, nullptr, b, sq, p.heads_q, d});
    v.push_back({"LSE", nullptr, &o.lse, b, sq, p.heads_q, 1});
  }
  if (pass != Pass::fwd) {
    v.push_back({"dQ", &o.dq, nullptr, b, sq, p.heads_q, d});
    v.push_back({"dK", &o.dk, nullptr, b, skv, p.heads_kv, d});
    v.push_back({"dV", &o.dv, nullptr, b, skv, p.heads_kv, d});
  }
  return v;
}

enum class Fault { unwritten, nan, wrong_row };
const char* fault_name(Fault f) {
  return f == Fault::unwritten ? "unwritten tile" : f == Fault::nan ? "one NaN" : "wrong row";
}

// unwritten: a 16 x 16 tile (batch 0, head 0, rows and columns 0..15) still poison, as a kernel
// that skips a tile leaves it. nan: the middle element. wrong_row: the last row of the last batch
// and head (a row that always sees every key, so its LSE is finite) off by half the output's
// largest magnitude (at least 0.5), as a wrong index or a lost update makes it.
void plant(Tensor& x, Fault f) {
  switch (f) {
    case Fault::unwritten:
      for (int r = 0; r < std::min(16, x.rows); ++r)
        for (int c = 0; c < std::min(16, x.cols); ++c) x.poison(x.index(0, r, 0, c));
      return;
    case Fault::nan:
      x.set(x.numel() / 2, std::numeric_limits<double>::quiet_NaN());
      return;
    case Fault::wrong_row: {
      double mag = 1;
      for (std::int64_t i = 0; i < x.numel(); ++i) {
        const double a = x.get(i);
        if (std::isfinite(a)) mag = std::max(mag, std::fabs(a));
      }
      for (int c = 0; c < x.cols; ++c) {
        const std::int64_t i = x.index(x.batch - 1, x.rows - 1, x.heads - 1, c);
        x.set(i, x.get(i) + 0.5 * mag);
      }
      return;
    }
  }
}

}  // namespace

const std::vector<Shape>& shapes() {
  static const std::vector<Shape> v = make_shapes();
  return v;
}

std::vector<Pass> declared_passes(const Implementation& impl) {
  const Capabilities c = impl.capabilities();
  std::vector<Pass> v;
  if (c.forward) v.push_back(Pass::fwd);
  if (c.backward) v.push_back(Pass::bwd);
  if (c.backward && (c.forward || !c.fwd_partner.empty())) v.push_back(Pass::fwd_bwd);
  return v;
}

double rel_l2_bound(DType t) {
  switch (t) {
    case DType::f32:
      return 1e-4;
    case DType::f16:
      return 2e-2;
    case DType::bf16:
      return 1e-1;
  }
  return 0;
}

std::string Case::name() const {
  std::string s = impl->name();
  s.append(" ").append(to_string(pass)).append(" ").append(shape.p.label());
  if (shape.dist == Distribution::outlier) s.append(" outlier");
  return s;
}

std::vector<Case> cases(const std::vector<const Implementation*>& impls) {
  std::vector<Case> v;
  std::set<std::tuple<const Implementation*, Group, DType, Pass>> planted;
  for (const Shape& s : shapes()) {
    const std::size_t first = v.size();
    for (const Implementation* impl : impls) {
      const Capabilities caps = impl->capabilities();
      if (std::find(caps.dtypes.begin(), caps.dtypes.end(), s.p.dtype) == caps.dtypes.end())
        continue;
      for (Pass pass : declared_passes(*impl)) {
        const bool large = s.group == Group::large_scale, narrow = s.p.dtype != DType::f32;
        Case c;
        c.impl = impl;
        c.shape = s;
        c.pass = pass;
        c.beyond_its_dtype = large && narrow && caps.scores_in_dtype;
        c.rel_l2 = !(large && pass != Pass::fwd) && !c.beyond_its_dtype;
        c.wrong_row = !(large && (pass != Pass::fwd || narrow));
        c.plant = planted.insert({impl, s.group, s.p.dtype, pass}).second;
        const std::string key = c.name().substr(impl->name().size() + 1);  // "<pass> <label>"
        for (const Capabilities::KnownFailure& k : caps.known_failures) {
          if (glob_match(k.cases, key)) {
            c.known_failure = k.why;
            break;
          }
        }
        v.push_back(c);
      }
    }
    const bool bwd =
        std::any_of(v.begin() + first, v.end(), [](const Case& c) { return c.pass != Pass::fwd; });
    for (auto it = v.begin() + first; it != v.end(); ++it) it->reference_gradients = bwd;
  }
  return v;
}

std::vector<Case> cases(const Implementation& impl) {
  return cases(std::vector<const Implementation*>{&impl});
}

namespace {

// The inputs, the reference and the naive baselines of the shape checked last. cases() runs the
// suite shape by shape, so each is made once per shape (the baselines once per device and pass)
// rather than once per implementation and pass. The reference has the gradients as soon as one
// case of the shape needs them (verify reads only the outputs of its pass).
struct ShapeCache {
  std::string key;
  std::shared_ptr<const CaseInputs> in;
  std::shared_ptr<const Reference> ref;
  bool ref_bwd = false;
  std::map<std::pair<Device, Pass>, std::shared_ptr<const Outputs>> naive;  // null: cannot run
};

ShapeCache& prepare(const Shape& s, bool need_bwd, std::uint64_t seed) {
  static ShapeCache cache;
  need_bwd = need_bwd && !s.p.paged();  // forward-only: its backward cases SKIP, no gradients
  const std::string key = s.p.label() +
                          (s.dist == Distribution::outlier ? ":outlier:" : ":normal:") +
                          std::to_string(seed);
  if (cache.key != key) {
    cache = ShapeCache{};  // the previous shape's buffers go first
    cache.in = std::make_shared<const CaseInputs>(make_inputs(s.p, seed, s.dist));
    cache.key = key;
  }
  if (!cache.ref || (need_bwd && !cache.ref_bwd)) {
    cache.ref = std::make_shared<const Reference>(
        compute_reference(*cache.in, VerifyMode::full, true, need_bwd, seed));
    cache.ref_bwd = need_bwd;
  }
  return cache;
}

}  // namespace

bool ok_or_only_its_absolute_bound(const Verdict& v) {
  // verify() holds an output to its absolute bound exactly when the baseline fails that bound
  // (naive_ok false), so a finite output that failed then failed that bound: the report's fields
  // say so, not the wording of its message.
  for (const OutputReport& o : v.outputs) {
    if (!o.ok && (o.naive_ok || o.nonfinite > 0)) return false;
  }
  return true;
}

namespace {

// The planted faults of a case whose outputs passed. Each fault goes into every output of the
// pass at once: the verdict judges each output on its own, so every output must fail, by name.
void check_planted(const Case& c, const Outputs& out, const Outputs* naive, const Reference& ref,
                   Result& r, std::vector<std::string>& problems) {
  const Problem& p = c.shape.p;
  for (Fault f : {Fault::unwritten, Fault::nan, Fault::wrong_row}) {
    if (f == Fault::wrong_row && !c.wrong_row) continue;
    Outputs planted = out;
    std::vector<Tensor> ts = tensors_of(p, c.pass, planted);
    for (Tensor& t : ts) plant(t, f);
    const Verdict v = verify(p, c.pass, planted, naive, ref);
    for (const Tensor& t : ts) {
      ++r.planted;
      const bool caught =
          std::any_of(v.outputs.begin(), v.outputs.end(),
                      [&](const OutputReport& o) { return !o.ok && o.name == t.name; });
      if (caught) {
        ++r.planted_caught;
      } else {
        problems.push_back(std::string("planted fault not caught: ") + fault_name(f) + " in " +
                           t.name);
      }
    }
  }
}

// The case's status and reason from its problems and its expected failure (and a listed known
// failure).
void settle(const Case& c, const std::vector<std::string>& problems, const std::string& expected,
            Result& r) {
  for (const std::string& s : problems) r.reason.append(r.reason.empty() ? "" : "; ").append(s);
  if (!c.known_failure.empty()) {
    // A listed vendor failure: expected while it fails; once it passes, the entry is stale.
    if (problems.empty() && expected.empty()) {
      r.status = Result::Status::fail;
      r.reason = "listed as a known failure (" + c.known_failure +
                 ") but passed: an upstream fix? remove the entry from the implementation's "
                 "Capabilities::known_failures";
    } else {
      r.status = Result::Status::xfail;
      r.reason =
          "known failure (" + c.known_failure + "): " + (r.reason.empty() ? expected : r.reason);
    }
  } else if (!problems.empty()) {
    r.status = Result::Status::fail;
  } else if (!expected.empty()) {
    r.status = Result::Status::xfail;
    r.reason = expected;
  }
}

}  // namespace

Result check_case(const Case& c, std::uint64_t seed) {
  Result r;
  const Implementation& impl = *c.impl;
  const Problem& p = c.shape.p;
  if (const Support s = impl.supports(p, c.pass); !s) {
    r.status = Result::Status::skip;
    r.reason = s.reason;
    return r;
  }
  if (!device_present(impl.device())) {
    r.status = Result::Status::skip;
    r.reason = "no " + std::string(to_string(impl.device())) + " device";
    return r;
  }
  std::shared_ptr<const Outputs> out, naive;
  std::shared_ptr<const Reference> ref;
  try {
    ShapeCache& k = prepare(c.shape, c.pass != Pass::fwd || c.reference_gradients, seed);
    ref = k.ref;
    out = call_outputs(impl, p, c.pass, {}, *k.in, *ref);
    if (naive_baseline(impl.device()) == &impl) {
      naive = out;  // its own baseline
    } else {
      const auto at = std::pair{impl.device(), c.pass};
      if (!k.naive.count(at)) k.naive[at] = baseline(impl.device(), p, c.pass, *k.in, *ref);
      naive = k.naive[at];
    }
  } catch (const std::exception& e) {
    r.status = Result::Status::fail;
    r.reason = std::string("threw: ") + e.what();
    return r;
  }
  r.verdict = verify(p, c.pass, *out, naive.get(), *ref);
  std::vector<std::string> problems;
  // An implementation that stores S in the dtype (the baseline itself among them) beyond that
  // dtype (large scales in f16/bf16) may fail its absolute bound, as the baseline does: an
  // expected failure. The other implementations are then held to that bound (verify.hpp).
  std::string expected;
  if (!r.verdict.ok) {
    if (c.beyond_its_dtype && ok_or_only_its_absolute_bound(r.verdict)) {
      expected = "S and P stored in " + std::string(to_string(p.dtype)) +
                 ", which cannot resolve these logits (as the naive baseline): " +
                 r.verdict.failure();
    } else {
      problems.push_back(r.verdict.failure());
    }
  }
  std::int64_t checked = 0;
  for (const OutputReport& o : r.verdict.outputs) {
    checked += o.checked;
    if (c.rel_l2 && o.checked > 0 && !(o.rel_l2 <= rel_l2_bound(p.dtype))) {
      std::ostringstream w;
      w << o.name << ": relative L2 error " << o.rel_l2 << " > " << rel_l2_bound(p.dtype)
        << " (max abs " << o.max_abs << ")";
      problems.push_back(w.str());
    }
  }
  if (checked == 0) problems.push_back("no output element was verified");
  // The planted faults, on the cases that carry them and whose outputs passed (a failing one
  // needs no proof).
  if (r.verdict.ok && c.plant) check_planted(c, *out, naive.get(), *ref, r, problems);
  settle(c, problems, expected, r);
  return r;
}

}  // namespace conformance
}  // namespace attnbench
