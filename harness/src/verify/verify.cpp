// The verification rule (verify.hpp): the float64 reference of a case, full or sampled, and the
// comparison of an implementation's outputs with it and with the naive baseline.
#include "attnbench/verify.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <memory>
#include <numeric>
#include <random>
#include <set>
#include <sstream>
#include <utility>

#include "attnbench/reference.hpp"

namespace attnbench {

namespace detail {
bool poison_float64_copies = false;
}  // namespace detail

const char* to_string(VerifyMode m) {
  switch (m) {
    case VerifyMode::automatic: return "auto";
    case VerifyMode::full: return "full";
    case VerifyMode::sampled: return "sampled";
    case VerifyMode::off: return "off";
  }
  return "?";
}

VerifyMode resolve_mode(const Problem& p, VerifyMode requested) {
  // Sampling picks (batch, head) pairs and rows of a dense batch; a varlen batch is checked in
  // full (its score work is the sum of its sequences' squares, well below a dense batch of the
  // same tokens).
  if (p.varlen() && requested != VerifyMode::off) return VerifyMode::full;
  if (requested != VerifyMode::automatic) return requested;
  const double work = static_cast<double>(p.batch) * p.heads_q * static_cast<double>(p.seq_q) *
                      p.seq_kv * p.head_dim;
  return work <= kFullReferenceMaxWork ? VerifyMode::full : VerifyMode::sampled;
}

std::int64_t reference_host_bytes(const Problem& p, VerifyMode requested, bool need_fwd,
                                  bool need_bwd, SampleSpec spec) {
  const long double q = static_cast<long double>(p.q_elems()),
                    kv = static_cast<long double>(p.kv_elems());
  const long double lse = static_cast<long double>(p.lse_elems());
  const long double ds = static_cast<long double>(dtype_size(p.dtype));
  long double bytes = (2 * q + 2 * kv) * ds;  // q, k, v, dout in the dtype
  const VerifyMode mode = resolve_mode(p, requested);
  if (mode != VerifyMode::off && (need_fwd || need_bwd)) {
    if (mode == VerifyMode::full) {
      bytes += 8 * (q + 2 * kv);                    // q, k, v as float64
      if (need_bwd) bytes += 8 * q;                 // dout as float64
      bytes += 2 * 8 * (q + lse) + ds * q;          // o and lse, their RefOutput copies, o_in
      if (need_bwd) bytes += 2 * 8 * (q + 2 * kv);  // dq, dk, dv and their RefOutput copies
    } else {
      // The float64 copies hold only the sampled (sequence, kv head) pairs' q, dout, k and v
      // (SampledInputs; pages of the rest are never touched), at most 2 spec.heads pairs. Index and
      // value per sampled element: rows of spec.heads query heads, and the whole dq, dk, dv of
      // spec.heads kv heads (with their query heads) and the scratch of one of them.
      const long double hd = p.head_dim, heads = spec.heads;
      const long double kv_head =
          (static_cast<long double>(p.group()) * p.seq_q + 2.0L * p.seq_kv) * hd;
      const long double pair = kv_head + static_cast<long double>(p.group()) * p.seq_q * hd;
      bytes += std::min<long double>(8 * (2 * q + 2 * kv), 2 * heads * 8 * pair);
      bytes += 16 * heads * (spec.rows + 2) * (hd + 1);
      if (need_bwd) bytes += (16 * heads + 8) * kv_head;
    }
  }
  const long double cap = static_cast<long double>(std::numeric_limits<std::int64_t>::max() / 2);
  return bytes > cap ? static_cast<std::int64_t>(cap) : static_cast<std::int64_t>(bytes);
}

namespace {

// Distinct values from [0, n), seeded; all of them when count >= n. Sorted.
std::vector<int> pick(int n, int count, std::mt19937_64& rng, std::vector<int> always = {}) {
  std::vector<int> out;
  if (count >= n) {
    out.resize(static_cast<std::size_t>(n));
    std::iota(out.begin(), out.end(), 0);
    return out;
  }
  out = std::move(always);
  std::uniform_int_distribution<int> d(0, n - 1);
  while (static_cast<int>(out.size()) < count) {
    const int x = d(rng);
    if (std::find(out.begin(), out.end(), x) == out.end()) out.push_back(x);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

// max over rows of the Euclidean norm of the head_dim-long rows of x (BSHD: every row of d), from
// the dtype tensor itself (its values are exact in float64; no float64 copy of the whole needed).
double max_row_norm(const HostTensor& x, int d) {
  const std::int64_t rows = x.numel / d;
  double m = 0;
#pragma omp parallel for schedule(static) reduction(max : m)
  for (std::int64_t r = 0; r < rows; ++r) {
    double s = 0;
    for (int c = 0; c < d; ++c) {
      const double e = x.get(r * d + c);
      s += e * e;
    }
    m = std::max(m, s);
  }
  return std::sqrt(m);
}

double max_abs(const HostTensor& x) {
  double m = 0;
#pragma omp parallel for schedule(static) reduction(max : m)
  for (std::int64_t i = 0; i < x.numel; ++i)
    m = std::max(m, std::fabs(static_cast<double>(x.get(i))));
  return m;
}

// A float64 copy of one input for the reference: the whole tensor (full mode), or only what the
// sampled (sequence, kv head) pairs read (SampledInputs). The buffer has the tensor's size but is
// not value-initialised: in sampled mode the rest of it is never written, and for a large tensor
// never faulted in. (A std::vector<double> of the whole was value-initialised by one thread, then
// converted, for each of q, k, v and dout: 4 bytes of float64 zeroed serially per byte of bf16,
// the larger part of a decode case's untimed phase.)
class Float64Copy {
 public:
  explicit Float64Copy(const HostTensor& t)
      : t_(&t), x_(new double[static_cast<std::size_t>(t.numel)]) {
    if (detail::poison_float64_copies)
      std::fill(x_.get(), x_.get() + t.numel, std::numeric_limits<double>::quiet_NaN());
  }
  void all() {
    double* x = x_.get();
    const HostTensor& t = *t_;
#pragma omp parallel for schedule(static)
    for (std::int64_t i = 0; i < t.numel; ++i) x[i] = t.get(i);
  }
  void range(std::int64_t first, std::int64_t n) {
    for (std::int64_t i = first; i < first + n; ++i) x_[static_cast<std::size_t>(i)] = t_->get(i);
  }
  const double* data() const { return x_.get(); }

 private:
  const HostTensor* t_;
  std::unique_ptr<double[]> x_;
};

// The q rows (or dout rows: the same layout) of kv head hk's query heads in sequence b.
void copy_q_rows(const Problem& p, int b, int hk, Float64Copy& x) {
  const int d = p.head_dim, g = p.group();
  for (int i = 0; i < p.seq_q_of(b); ++i)
    x.range(((p.q_start(b) + i) * p.heads_q + std::int64_t{hk} * g) * d, std::int64_t{g} * d);
}

// The sampled reference's float64 q, k and v: what reference::forward_rows (any query head of kv
// head hk) and backward_kv_head read for sequence b and kv head hk, the q rows of the group's
// query heads and the k and v rows of the sequence's keys (through the block table when paged),
// copied the first time a step needs that pair (the sampled heads of one group, and the backward
// after the forward, share them).
class SampledInputs {
 public:
  SampledInputs(const Problem& p, Float64Copy& q, Float64Copy& k, Float64Copy& v)
      : p_(p), q_(q), k_(k), v_(v) {}
  void need(int b, int hk) {
    if (!copied_.insert({b, hk}).second) return;
    copy_q_rows(p_, b, hk, q_);
    const int d = p_.head_dim;
    for (int j = 0; j < p_.seq_kv_of(b); ++j) {
      const std::int64_t at = (p_.kv_row(b, j) * p_.heads_kv + hk) * d;
      k_.range(at, d);
      v_.range(at, d);
    }
  }
  const double* q() const { return q_.data(); }
  const double* k() const { return k_.data(); }
  const double* v() const { return v_.data(); }

 private:
  const Problem& p_;
  Float64Copy &q_, &k_, &v_;
  std::set<std::pair<int, int>> copied_;
};

// floor(dQ), floor(dK) of the absolute bound (verify.hpp): the rounding of dP - D,
// (u + 2 d u_f32) |dO_i| max|v_j|, times what dQ and dK multiply dS by.
void set_gradient_floors(const Problem& p, const HostTensor& q, const HostTensor& k,
                         const HostTensor& v, const HostTensor& dout, Reference& ref) {
  const int d = p.head_dim;
  const double u = unit_roundoff(p.dtype) + 2.0 * d * unit_roundoff(DType::f32);
  const double residual = u * max_row_norm(dout, d) * max_row_norm(v, d);
  const double scale = p.effective_scale();
  double column_mass = std::max(1.0, static_cast<double>(p.group()) * p.seq_q / p.seq_kv);
  if (p.varlen()) {  // the largest of the sequences' own (the maxima need not share a sequence)
    column_mass = 1.0;
    for (int b = 0; b < p.batch; ++b) {
      if (p.seq_kv_of(b) > 0) {
        column_mass =
            std::max(column_mass, static_cast<double>(p.group()) * p.seq_q_of(b) / p.seq_kv_of(b));
      }
    }
  }
  ref.floor_dq = residual * scale * max_abs(k);
  ref.floor_dk = residual * scale * max_abs(q) * column_mass;
}

}  // namespace

double absolute_bound_factor(const Problem& p, bool gradient) {
  const double n =
      static_cast<double>(p.seq_kv) + (gradient ? static_cast<double>(p.group()) * p.seq_q : 0.0);
  return 32.0 * unit_roundoff(p.dtype) + (n + 2.0 * p.head_dim) * unit_roundoff(DType::f32);
}

namespace {

// The progress lines of a long reference: "reference: <step> (<work>)", then the step's time.
class Steps {
 public:
  Steps(const ReferenceProgress& p, double work) {
    if (work > p.min_work) f_ = p.line;
  }
  void step(const std::string& what, double work) {
    if (!f_) return;
    done();
    std::ostringstream s;
    s << "reference: " << what << " (" << work << " multiply-adds in float64) ...";
    f_(s.str());
    t0_ = std::chrono::steady_clock::now();
    open_ = true;
  }
  void done() {
    if (!f_ || !open_) return;
    std::ostringstream s;
    s << "reference: done in "
      << std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count() << " s";
    f_(s.str());
    open_ = false;
  }
  ~Steps() { done(); }

 private:
  std::function<void(const std::string&)> f_;
  std::chrono::steady_clock::time_point t0_;
  bool open_ = false;
};

// Full mode: the whole forward (its O and LSE also the inputs of a standalone backward) and,
// when asked, the whole backward.
void full_reference(const CaseInputs& in, const double* q, const double* k, const double* v,
                    bool need_fwd, bool need_bwd, double per_head,
                    const ReferenceProgress& progress, Reference& ref) {
  const Problem& p = in.p;
  const double heads = static_cast<double>(p.batch) * p.heads_q;
  Steps steps(progress, heads * per_head * (2 + (need_bwd ? 5 : 0)));
  std::vector<double> o(static_cast<std::size_t>(p.q_elems())),
      lse(static_cast<std::size_t>(p.lse_elems()));
  steps.step("full forward", heads * per_head * 2);
  reference::forward(p, q, k, v, o.data(), lse.data());
  ref.o_in = HostTensor(p.dtype, p.q_elems());
  for (std::int64_t i = 0; i < p.q_elems(); ++i)
    ref.o_in.set(i, static_cast<float>(o[static_cast<std::size_t>(i)]));
  ref.lse_in.assign(lse.begin(), lse.end());
  for (double l : lse) {
    if (std::isfinite(l)) ref.lse_abs_max = std::max(ref.lse_abs_max, std::fabs(l));
  }
  if (need_fwd) {
    ref.o.val = std::move(o);
    ref.lse.val = std::move(lse);
  }
  if (need_bwd) {
    steps.step("full backward", heads * per_head * 5);
    Float64Copy dout(in.dout);
    dout.all();
    ref.dq.val.resize(static_cast<std::size_t>(p.q_elems()));
    ref.dk.val.resize(static_cast<std::size_t>(p.kv_elems()));
    ref.dv.val.resize(static_cast<std::size_t>(p.kv_elems()));
    reference::backward(p, q, k, v, dout.data(), ref.dq.val.data(), ref.dk.val.data(),
                        ref.dv.val.data());
  }
}

// Sampled mode, forward: the sampled rows (first and last always in) of a seeded subset of
// (batch, head) pairs, n_fwd of them.
void sampled_forward(const Problem& p, SampledInputs& in, const SampleSpec& spec,
                     std::mt19937_64& rng, int n_fwd, double rows_work, Steps& steps,
                     Reference& ref) {
  const int d = p.head_dim;
  const int pairs_q = p.batch * p.heads_q;
  int n = 0;
  for (int bh : pick(pairs_q, spec.heads, rng)) {
    const int b = bh / p.heads_q, h = bh % p.heads_q;
    std::ostringstream what;
    what << "sampled rows of (batch " << b << ", head " << h << "), " << ++n << "/" << n_fwd;
    steps.step(what.str(), rows_work);
    const std::vector<int> rows = pick(p.seq_q, spec.rows, rng, {0, p.seq_q - 1});
    in.need(b, p.kv_head(h));
    std::vector<double> o(rows.size() * static_cast<std::size_t>(d)), lse(rows.size());
    reference::forward_rows(p, in.q(), in.k(), in.v(), b, h, rows, o.data(), lse.data());
    for (std::size_t r = 0; r < rows.size(); ++r) {
      const std::int64_t row_base =
          ((static_cast<std::int64_t>(b) * p.seq_q + rows[r]) * p.heads_q + h) * d;
      for (int c = 0; c < d; ++c) {
        ref.o.idx.push_back(row_base + c);
        ref.o.val.push_back(o[r * static_cast<std::size_t>(d) + static_cast<std::size_t>(c)]);
      }
      ref.lse.idx.push_back((static_cast<std::int64_t>(b) * p.heads_q + h) * p.seq_q + rows[r]);
      ref.lse.val.push_back(lse[r]);
      if (std::isfinite(lse[r])) ref.lse_abs_max = std::max(ref.lse_abs_max, std::fabs(lse[r]));
    }
  }
}

// Sampled mode, backward: dK and dV of a seeded subset of (batch, kv head) pairs, n_bwd of them,
// and dQ of their query heads.
void sampled_backward(const CaseInputs& in, SampledInputs& x, const SampleSpec& spec,
                      std::mt19937_64& rng, int n_bwd, double kv_work, Steps& steps,
                      Reference& ref) {
  const Problem& p = in.p;
  const int d = p.head_dim;
  Float64Copy dout(in.dout);  // each sampled pair's rows: the pairs are distinct
  const int g = p.group();
  int n = 0;
  for (int bh : pick(p.batch * p.heads_kv, spec.heads, rng)) {
    const int b = bh / p.heads_kv, hk = bh % p.heads_kv;
    std::ostringstream what;
    what << "backward of (batch " << b << ", kv head " << hk << ") and its " << g
         << " query head(s), " << ++n << "/" << n_bwd;
    steps.step(what.str(), kv_work);
    x.need(b, hk);
    copy_q_rows(p, b, hk, dout);
    std::vector<double> dq(static_cast<std::size_t>(g) * p.seq_q * d);
    std::vector<double> dk(static_cast<std::size_t>(p.seq_kv) * d), dv(dk.size());
    reference::backward_kv_head(p, x.q(), x.k(), x.v(), dout.data(), b, hk, dq.data(),
                                dk.data(), dv.data());
    for (int j = 0; j < p.seq_kv; ++j) {
      const std::int64_t base =
          ((static_cast<std::int64_t>(b) * p.seq_kv + j) * p.heads_kv + hk) * d;
      for (int c = 0; c < d; ++c) {
        const std::size_t s = static_cast<std::size_t>(j) * d + static_cast<std::size_t>(c);
        ref.dk.idx.push_back(base + c);
        ref.dk.val.push_back(dk[s]);
        ref.dv.idx.push_back(base + c);
        ref.dv.val.push_back(dv[s]);
      }
    }
    for (int gi = 0; gi < g; ++gi) {
      const int h = hk * g + gi;
      for (int i = 0; i < p.seq_q; ++i) {
        const std::int64_t base =
            ((static_cast<std::int64_t>(b) * p.seq_q + i) * p.heads_q + h) * d;
        for (int c = 0; c < d; ++c) {
          ref.dq.idx.push_back(base + c);
          ref.dq.val.push_back(
              dq[(static_cast<std::size_t>(gi) * p.seq_q + i) * d + static_cast<std::size_t>(c)]);
        }
      }
    }
  }
}

}  // namespace

Reference compute_reference(const CaseInputs& in, VerifyMode requested, bool need_fwd,
                            bool need_bwd, std::uint64_t seed, SampleSpec spec,
                            const ReferenceProgress& progress) {
  const Problem& p = in.p;
  Reference ref;
  ref.mode = resolve_mode(p, requested);
  if (ref.mode == VerifyMode::off) return ref;
  // Multiply-adds of one (batch, head)'s scores: the forward is about 2 of them, the backward 5.
  const double per_head = static_cast<double>(p.seq_q) * p.seq_kv * p.head_dim;
  if (need_bwd) set_gradient_floors(p, in.q, in.k, in.v, in.dout, ref);
  Float64Copy q(in.q), k(in.k), v(in.v);

  if (ref.mode == VerifyMode::full) {
    q.all();
    k.all();
    v.all();
    full_reference(in, q.data(), k.data(), v.data(), need_fwd, need_bwd, per_head, progress, ref);
    return ref;
  }

  // Sampled: a seeded subset of (batch, head) pairs and query rows. The first and last rows are
  // always in (tails and causal edges live there).
  std::mt19937_64 rng(seed ^ 0x5eed5eedull);
  const int pairs_q = p.batch * p.heads_q;
  const double rows_work = 2.0 * std::min(spec.rows + 2, p.seq_q) / p.seq_q * per_head;
  const double kv_work = 5.0 * p.group() * per_head;
  const int n_fwd = std::min(spec.heads, pairs_q),
            n_bwd = std::min(spec.heads, p.batch * p.heads_kv);
  Steps steps(progress, n_fwd * rows_work + (need_bwd ? n_bwd * kv_work : 0));
  SampledInputs inputs(p, q, k, v);
  if (need_fwd || need_bwd) {
    sampled_forward(p, inputs, spec, rng, n_fwd, rows_work, steps, ref);
    if (!need_fwd) {  // the rows were computed only for the LSE magnitude
      ref.o = {};
      ref.lse = {};
    }
  }
  if (need_bwd) sampled_backward(in, inputs, spec, rng, n_bwd, kv_work, steps, ref);
  return ref;
}

namespace {

// Read-only view of one output: a dtype tensor or the float32 LSE.
struct View {
  const HostTensor* t = nullptr;
  const std::vector<float>* f = nullptr;
  std::int64_t size() const { return t ? t->numel : static_cast<std::int64_t>(f->size()); }
  double at(std::int64_t i) const { return t ? t->get(i) : (*f)[static_cast<std::size_t>(i)]; }
  bool present() const { return t ? t->numel > 0 : (f && !f->empty()); }
};

struct OutputSpec {
  const char* name;
  View impl, naive;
  const RefOutput* ref;
  DType dtype;  // rounding of the output (f32 for LSE)
  double k;     // 2 forward, 3 gradients
  bool is_lse;
  // Unit roundoff of the problem's dtype, in which the naive baseline stores S and P.
  double u_problem = 0;
  // Gradients: a backward that recomputes P = exp(S - LSE) from an LSE stored in float32 gives
  // each P of row i a relative error of order u_f32 * (1 + |LSE_i|) (the rounding of the stored
  // LSE and of the recomputed S, which sits near it), which the naive baseline, renormalising its
  // own P, does not have: with seq_kv = 1 naive is exact and the bound would be atol alone.
  // atol grows by 4 * u_f32 * (1 + max|LSE|) * max|X_ref| (4: two roundings, through exp).
  double lse_rel = 0;
  // The absolute bound (verify.hpp): c and, for dQ and dK, the floor.
  double c_abs = 0;
  double floor = 0;
};

// 1. Every element, sampled or not: no NaN/Inf (unwritten poison is NaN), and an LSE of -inf
// exactly where a row sees no key. Sets r.nonfinite; returns the first bad element (-1: none).
std::int64_t scan_nonfinite(const Problem& p, const OutputSpec& s, OutputReport& r) {
  // An LSE of -inf is correct exactly where a row sees no key. Varlen (LSE [heads_q, total_q]):
  // whether each packed row sees a key, from its own sequence's mask.
  std::vector<char> varlen_empty;
  if (p.varlen() && s.is_lse) {
    varlen_empty.reserve(static_cast<std::size_t>(p.total_q()));
    for (int b = 0; b < p.batch; ++b) {
      const Problem sp = p.sequence(b);
      for (int i = 0; i < sp.seq_q; ++i) varlen_empty.push_back(sp.visible_keys(i) == 0);
    }
  }
  const std::int64_t total_q = p.varlen() ? p.total_q() : 1;
  auto lse_row_empty = [&](std::int64_t i) {
    if (!varlen_empty.empty()) return varlen_empty[static_cast<std::size_t>(i % total_q)] != 0;
    const int row = static_cast<int>(i % p.seq_q);
    return p.visible_keys(row) == 0;  // causal or window
  };
  const std::int64_t n = s.impl.size();
  std::int64_t nonfinite = 0, wrong_inf = 0, first_bad = -1;
#pragma omp parallel for reduction(+ : nonfinite, wrong_inf) schedule(static)
  for (std::int64_t i = 0; i < n; ++i) {
    const double x = s.impl.at(i);
    if (std::isfinite(x)) {
      if (s.is_lse && lse_row_empty(i)) ++wrong_inf;  // must be -inf
      continue;
    }
    if (s.is_lse && x < 0 && std::isinf(x) && lse_row_empty(i)) continue;
    ++nonfinite;
  }
  if (nonfinite > 0 || wrong_inf > 0) {
    for (std::int64_t i = 0; i < n && first_bad < 0; ++i) {
      const double x = s.impl.at(i);
      const bool empty = s.is_lse && lse_row_empty(i);
      if (empty ? !(std::isinf(x) && x < 0) : !std::isfinite(x)) first_bad = i;
    }
  }
  r.nonfinite = nonfinite + wrong_inf;
  return first_bad;
}

// 2. Errors at the elements with reference values, against the bound (verify.hpp).
void check_against_reference(const OutputSpec& s, OutputReport& r) {
  const auto& ref = *s.ref;
  const bool all = ref.idx.empty();
  const std::int64_t m = static_cast<std::int64_t>(ref.val.size());
  double max_abs = 0, naive_max = 0, sq_err = 0, sq_ref = 0, ref_max = 0;
  std::int64_t checked = 0, worst = -1, naive_bad = 0;
  const bool have_naive = s.naive.present();
  for (std::int64_t j = 0; j < m; ++j) {
    const std::int64_t i = all ? j : ref.idx[static_cast<std::size_t>(j)];
    const double rv = ref.val[static_cast<std::size_t>(j)];
    if (!std::isfinite(rv)) continue;  // -inf LSE rows: handled by the scan above
    const double x = s.impl.at(i);
    const double e = std::fabs(x - rv);
    ++checked;
    if (!(e <= max_abs)) {  // also catches NaN
      max_abs = std::isnan(e) ? std::numeric_limits<double>::infinity() : e;
      worst = i;
    }
    sq_err += std::isfinite(e) ? e * e : 0;
    sq_ref += rv * rv;
    ref_max = std::max(ref_max, std::fabs(rv));
    if (have_naive) {
      const double en = std::fabs(s.naive.at(i) - rv);
      if (std::isfinite(en))
        naive_max = std::max(naive_max, en);
      else
        ++naive_bad;  // NaN/Inf where the reference is finite: reported, never as 0
    }
  }
  r.checked = checked;
  r.max_abs = max_abs;
  r.rel_l2 = sq_ref > 0 ? std::sqrt(sq_err / sq_ref) : std::sqrt(sq_err);
  // "Twice the rounding error of X_ref in the dtype": 2 * unit roundoff * max|X_ref|.
  r.atol = (2.0 * unit_roundoff(s.dtype) + s.lse_rel) * ref_max;
  r.abs_bound = s.c_abs * ref_max + r.atol + s.floor;
  std::ostringstream naive_text;  // the baseline's error as the messages give it
  if (have_naive) {
    r.naive_nonfinite = naive_bad;
    r.naive_max_abs = naive_bad > 0 ? std::numeric_limits<double>::infinity() : naive_max;
    r.naive_ok = naive_bad == 0 && naive_max <= r.abs_bound;
    if (naive_bad > 0)
      naive_text << "naive " << naive_bad << " element(s) NaN/Inf";
    else
      naive_text << "naive " << naive_max;
    // A baseline that fails its own absolute bound is no yardstick: the absolute bound is.
    r.bound = r.naive_ok ? s.k * naive_max + r.atol : r.abs_bound;
    r.ratio = naive_bad == 0 && naive_max > 0 ? max_abs / naive_max : 0;
  } else {
    // No same-device baseline could run: fall back to a dtype-based bound, said in `why`.
    r.bound = 16.0 * r.atol;
    naive_text << "no naive baseline";
  }
  if (!(max_abs <= r.bound)) {
    r.ok = false;
    std::ostringstream w;
    if (r.naive_ok) {
      w << "max_abs " << max_abs << " > bound " << r.bound << " (k=" << s.k << ", "
        << naive_text.str() << ", atol " << r.atol << ") at element " << worst;
    } else {
      w << "max_abs " << max_abs << " > absolute bound " << r.bound << " (c*max|ref| + atol"
        << (s.floor > 0 ? " + floor" : "") << ", c=" << s.c_abs
        << "; the naive baseline fails it: " << naive_text.str() << ") at element " << worst;
    }
    r.why = w.str();
  }
}

OutputReport check_output(const Problem& p, const OutputSpec& s, VerifyMode mode) {
  OutputReport r;
  r.name = s.name;
  if (!s.impl.present()) {
    r.ok = false;
    r.why = "output missing";
    return r;
  }
  const std::int64_t first_bad = scan_nonfinite(p, s, r);
  if (mode != VerifyMode::off && s.ref && !s.ref->empty()) check_against_reference(s, r);
  if (r.nonfinite > 0) {
    r.ok = false;
    std::ostringstream w;
    w << r.nonfinite << " element(s) NaN/Inf/unwritten or LSE not -inf on an empty row, first at " << first_bad;
    r.why = r.why.empty() ? w.str() : w.str() + "; " + r.why;
  }
  return r;
}

// Sampled mode: every element against the naive baseline, so a wrong row anywhere is caught.
// |impl - naive| <= |impl - ref| + |naive - ref| <= (k + 1) * naive_err + atol on the samples;
// a factor 4 allows for rows where the error is larger than on the sampled rows, and a term
// 2 (k + 1) u |naive_i| (u of the problem's dtype) for rows where the naive baseline's own
// error, from S and P stored in that dtype, is larger than anywhere in the sample (seen: the
// LSE of causal rows with few visible keys). A wrong row is off by O(|X|), far above both.
OutputReport check_against_naive(const OutputSpec& s, const OutputReport& sampled) {
  OutputReport r;
  r.name = std::string(s.name) + "~naive";
  const std::int64_t n = s.impl.size();
  double max_abs = 0, mag = 0;
  std::int64_t worst = -1;
  for (std::int64_t i = 0; i < n; ++i) {
    const double b = s.naive.at(i);
    if (std::isfinite(b)) mag = std::max(mag, std::fabs(b));
  }
  r.atol = 2.0 * unit_roundoff(s.dtype) * mag;
  // The baseline's error on the samples; when it failed its absolute bound, the error the
  // absolute bound allows (a broken baseline must not loosen this check either).
  const double base = 4.0 * ((s.k + 1.0) * std::max(sampled.naive_max_abs, 0.0) + r.atol);
  const double rel = 2.0 * (s.k + 1.0) * s.u_problem;
  double worst_excess = 0, worst_bound = base;
  for (std::int64_t i = 0; i < n; ++i) {
    const double a = s.impl.at(i), b = s.naive.at(i);
    if (!std::isfinite(b)) continue;  // -inf LSE rows, checked by the scan
    const double e = std::fabs(a - b);
    const double bound = base + rel * std::fabs(b);
    if (std::isnan(e)) {
      max_abs = std::numeric_limits<double>::infinity();
      worst = i;
      continue;
    }
    max_abs = std::max(max_abs, e);
    if (e - bound > worst_excess) {
      worst_excess = e - bound;
      worst = i;
      worst_bound = bound;
    }
  }
  r.checked = n;
  r.max_abs = max_abs;
  r.naive_max_abs = sampled.naive_max_abs;
  r.bound = base;
  r.ratio = sampled.naive_max_abs > 0 ? max_abs / sampled.naive_max_abs : 0;
  if (worst_excess > 0 || std::isinf(max_abs)) {
    r.ok = false;
    std::ostringstream w;
    w << "differs from the naive baseline by " << (std::isinf(max_abs) ? max_abs : worst_excess + worst_bound)
      << " > " << worst_bound << " (" << base << " + " << rel << "|naive|) at element " << worst;
    r.why = w.str();
  }
  return r;
}

}  // namespace

std::string Verdict::failure() const {
  std::string s;
  for (const auto& o : outputs) {
    if (o.ok) continue;
    if (!s.empty()) s += "; ";
    s += o.name + ": " + o.why;
  }
  return s;
}

Verdict verify(const Problem& p, Pass pass, const Outputs& impl, const Outputs* naive,
               const Reference& ref) {
  Verdict v;
  std::vector<OutputSpec> specs;
  auto view_t = [](const Outputs* o, const HostTensor Outputs::*m) {
    View w;
    if (o) w.t = &(o->*m);
    return w;
  };
  auto view_f = [](const Outputs* o) {
    View w;
    if (o) w.f = &o->lse;
    return w;
  };
  const double up = unit_roundoff(p.dtype);
  if (pass != Pass::bwd) {
    const double c = absolute_bound_factor(p, false);
    specs.push_back({"O", view_t(&impl, &Outputs::o), view_t(naive, &Outputs::o), &ref.o, p.dtype,
                     2.0, false, up, 0, c});
    specs.push_back(
        {"LSE", view_f(&impl), view_f(naive), &ref.lse, DType::f32, 2.0, true, up, 0, c});
  }
  if (pass != Pass::fwd) {
    const double lse_rel = 4.0 * unit_roundoff(DType::f32) * (1.0 + ref.lse_abs_max);
    const double c = absolute_bound_factor(p, true);
    specs.push_back({"dQ", view_t(&impl, &Outputs::dq), view_t(naive, &Outputs::dq), &ref.dq,
                     p.dtype, 3.0, false, up, lse_rel, c, ref.floor_dq});
    specs.push_back({"dK", view_t(&impl, &Outputs::dk), view_t(naive, &Outputs::dk), &ref.dk,
                     p.dtype, 3.0, false, up, lse_rel, c, ref.floor_dk});
    specs.push_back({"dV", view_t(&impl, &Outputs::dv), view_t(naive, &Outputs::dv), &ref.dv,
                     p.dtype, 3.0, false, up, lse_rel, c});
  }
  for (const auto& s : specs) {
    OutputReport r = check_output(p, s, ref.mode);
    const bool global = ref.mode == VerifyMode::sampled && s.naive.present() && s.impl.present();
    v.ok = v.ok && r.ok;
    v.outputs.push_back(r);
    if (global && r.naive_ok) {
      OutputReport g = check_against_naive(s, r);
      v.ok = v.ok && g.ok;
      v.outputs.push_back(std::move(g));
    } else if (global) {
      // A baseline that failed its absolute bound on the samples is no proxy for the reference
      // elsewhere: the every-element check is not made (checked 0, naive_ok false says so).
      OutputReport g;
      g.name = std::string(s.name) + "~naive";
      g.naive_max_abs = r.naive_max_abs;
      g.naive_nonfinite = r.naive_nonfinite;
      g.naive_ok = false;
      v.outputs.push_back(std::move(g));
    }
  }
  return v;
}

}  // namespace attnbench
