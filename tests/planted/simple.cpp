// The simple algorithm every Bug-planted implementation shares, and cpu.planted_control (no bug).
//
// Varlen (packed THD): each sequence is its own problem (Problem::sequence) at its tokens.
// Paged: key j of sequence b read through the block table (Starts::key); forward only.
// Forward, per (batch, query head, query row): scores of the visible keys (causal and sliding
// window; soft-capped when the problem asks) in double, their maximum, the sum of exponentials
// and P V in one more loop, O = acc / sum and LSE = max + log(sum). Backward, per (batch, kv
// head): dK and dV accumulated in double over the query heads that read the kv head; per query
// row, P is recomputed from the scores (not from the LSE input), D = dO . O, dP = dO . V_j,
// dS = P (dP - D) (times 1 - tanh^2 under a soft cap), dQ += dS K, dK += dS Q, dV += P dO; the
// scale multiplies dQ and dK once at the end.
// Passes over memory: K and V are read once per query row (O(N^2 d) reads, no N x N storage).
// Writes: O and LSE (forward); dQ, dK, dV (backward), each element once.
// Extra memory: forward seq_kv + head_dim doubles; backward 2 seq_kv head_dim + seq_kv +
// head_dim doubles. Limits: single-threaded and slow; for test shapes only.
// Accumulating in double makes the control's error the rounding of its outputs alone, well
// inside the verification bound, so a planted bug is the only reason for a failure.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "planted.hpp"

namespace attnbench::planted {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// Element (token, h, c) of a tensor with `heads` heads: BSHD or packed THD, token counted from
// the start of the tensor (a sequence's first token plus the row).
std::size_t at(const Problem& p, int heads, std::int64_t token, int h, int c) {
  return static_cast<std::size_t>((token * heads + h) * p.head_dim + c);
}

// The first query and key tokens of batch or sequence b, with the planted varlen bug that reads
// sequence b's keys and values from sequence b - 1's offset.
struct Starts {
  std::int64_t q, kv;
  const Problem* whole = nullptr;  // paged: the problem with the block table
  int b = 0;
  bool wrong_page = false;  // the planted paged bug
  // The token (row of [heads_kv, d]) of key j: through the block table when paged.
  std::int64_t key(int j) const {
    if (!whole || !whole->paged()) return kv + j;
    const int lp = j / whole->page_size;
    const std::int64_t page =
        wrong_page ? (std::int64_t{b} * whole->pages_per_seq + lp) % whole->num_pages
                   : whole->page(b, lp);
    return page * whole->page_size + j % whole->page_size;
  }
};
Starts starts_of(const Problem& p, int b, Bug bug) {
  const int kb = bug == Bug::varlen_wrong_offset && p.varlen() && b > 0 ? b - 1 : b;
  return {p.q_start(b), p.paged() ? 0 : p.kv_start(kb), &p, b, bug == Bug::paged_wrong_page};
}

int kv_of(const Problem& p, int h, Bug bug) { return bug == Bug::gqa_mapping ? h % p.heads_kv : p.kv_head(h); }

// The keys [lo, hi) row i sees (causal and window: Problem::visible_in over all keys), with the
// planted mask bugs.
using Keys = Problem::KeySpan;
Keys visible_keys(const Problem& p, int i, Bug bug) {
  Keys r = p.visible_in(i, 0, p.seq_kv);
  if (bug == Bug::causal_off_by_one && p.causal) r.hi = std::min(r.hi + 1, p.seq_kv);
  if (bug == Bug::window_off_by_one && p.window_left >= 0 && r.hi > r.lo)
    r.lo = std::max(r.lo - 1, 0);
  return r;
}

// The soft cap the scores get (0: none), with the planted bug that forgets it.
double cap_of(const Problem& p, Bug bug) {
  return bug == Bug::softcap_ignored ? 0.0 : p.softcap;
}

// s[j] = scale * q_i . k_j, soft-capped (cap * tanh(s / cap)), for the keys [lo, hi) row i of
// head h sees; returns their maximum. p is the batch's or sequence's own problem, at its tokens st.
double scores(const Problem& p, const void* q, const void* k, Starts st, int h, int hk, int i,
              Keys keys, double cap, double* s) {
  const DType t = p.dtype;
  const double scale = p.effective_scale();
  double m = kNegInf;
  for (int j = keys.lo; j < keys.hi; ++j) {
    double dot = 0;
    for (int c = 0; c < p.head_dim; ++c) {
      dot += static_cast<double>(load_as_float(q, at(p, p.heads_q, st.q + i, h, c), t)) *
             load_as_float(k, at(p, p.heads_kv, st.key(j), hk, c), t);
    }
    s[j] = scale * dot;
    if (cap > 0) s[j] = cap * std::tanh(s[j] / cap);
    m = std::max(m, s[j]);
  }
  return m;
}

}  // namespace

FarRow far_row_of(const Problem& p) { return {p.batch - 1, p.heads_q - 1, p.seq_q / 2}; }

std::size_t simple_workspace_bytes(const Problem& p, Pass pass) {
  const std::size_t n = static_cast<std::size_t>(p.seq_kv), d = static_cast<std::size_t>(p.head_dim);
  return sizeof(double) * (pass == Pass::fwd ? n + d : 2 * n * d + n + 2 * d);
}

void simple_forward(const FwdArgs& a, Bug bug) {
  const DType t = a.p.dtype;
  const int d = a.p.head_dim;
  double* s = static_cast<double*>(a.workspace);  // [Skv]
  double* acc = s + a.p.seq_kv;                   // [D]
  const FarRow far = far_row_of(a.p);
  for (int b = 0; b < a.p.batch; ++b) {
    const Problem p = a.p.sequence(b);  // varlen: sequence b's own lengths and masks
    const Starts st = starts_of(a.p, b, bug);
    for (int h = 0; h < p.heads_q; ++h) {
      const int hk = kv_of(p, h, bug);
      for (int i = 0; i < p.seq_q; ++i) {
        const Keys keys = visible_keys(p, i, bug);
        const bool none = keys.hi <= keys.lo;
        const double m = scores(p, a.q, a.k, st, h, hk, i, keys, cap_of(p, bug), s);
        double l = 0;
        for (int c = 0; c < d; ++c) acc[c] = 0;  // a loop: g++ 13 misreads std::fill's bound here
        for (int j = keys.lo; j < keys.hi; ++j) {
          const double e = std::exp(s[j] - m);
          l += e;
          for (int c = 0; c < d; ++c)
            acc[c] += e * load_as_float(a.v, at(p, p.heads_kv, st.key(j), hk, c), t);
        }
        for (int c = 0; c < d; ++c) {
          if (bug == Bug::unwritten_tile && b == 0 && h == 0 && i >= 16 && i < 32 && c >= 16 && c < 32) continue;
          double o = none ? 0.0 : acc[c] / l;
          if (bug == Bug::far_row && b == far.batch && h == far.head && i == far.row) o += 0.5;
          store_from_float(a.o, at(p, p.heads_q, st.q + i, h, c), static_cast<float>(o), t);
        }
        float* lse = a.lse + a.p.lse_start(b, h) + i;
        if (bug == Bug::lse_unwritten) continue;
        *lse = none ? -std::numeric_limits<float>::infinity()
                    : static_cast<float>(bug == Bug::lse_garbage ? m : m + std::log(l));
      }
    }
  }
}

void simple_backward(const BwdArgs& a, Bug bug) {
  const DType t = a.p.dtype;
  const int d = a.p.head_dim;
  const double scale = a.p.effective_scale();
  const double gscale = bug == Bug::unscaled_grads ? 1.0 : scale;
  const std::size_t n_max = static_cast<std::size_t>(a.p.seq_kv);
  double* dk = static_cast<double*>(a.workspace);  // [Skv, D]
  double* dv = dk + n_max * d;                     // [Skv, D]
  double* s = dv + n_max * d;                      // [Skv]
  double* dq = s + n_max;                          // [D]
  double* dorow = dq + d;                          // [D]
  for (int b = 0; b < a.p.batch; ++b) {
    const Problem p = a.p.sequence(b);  // varlen: sequence b's own lengths and masks
    const int n = p.seq_kv;
    const Starts st = starts_of(a.p, b, bug);
    auto kv = [&](const void* x, int j, int hk, int c) {
      return static_cast<double>(load_as_float(x, at(p, p.heads_kv, st.key(j), hk, c), t));
    };
    auto qs = [&](const void* x, int i, int h, int c) {
      return static_cast<double>(load_as_float(x, at(p, p.heads_q, st.q + i, h, c), t));
    };
    for (int hk = 0; hk < p.heads_kv; ++hk) {
      for (std::int64_t e = 0; e < static_cast<std::int64_t>(n) * d; ++e) dk[e] = dv[e] = 0;
      for (int h = 0; h < p.heads_q; ++h) {
        if (kv_of(p, h, bug) != hk) continue;
        for (int i = 0; i < p.seq_q; ++i) {
          const Keys keys = visible_keys(p, i, bug);
          const double cap = cap_of(p, bug);
          const double m = scores(p, a.q, a.k, st, h, hk, i, keys, cap, s);
          double l = 0;
          for (int j = keys.lo; j < keys.hi; ++j) l += std::exp(s[j] - m);
          double dsum = 0;  // D = dO . O
          for (int c = 0; c < d; ++c) {
            dorow[c] = qs(a.dout, i, h, c);
            dsum += dorow[c] * qs(a.o, i, h, c);
          }
          for (int c = 0; c < d; ++c) dq[c] = 0;
          for (int j = keys.lo; j < keys.hi; ++j) {
            const double pj = std::exp(s[j] - m) / l;
            double dp = 0;
            for (int c = 0; c < d; ++c) dp += dorow[c] * kv(a.v, j, hk, c);
            // Through the soft cap: d(cap * tanh(x / cap)) / dx = 1 - tanh^2 = 1 - (s / cap)^2
            // (the planted softcap_no_derivative forgets it).
            const bool through_cap = cap > 0 && bug != Bug::softcap_no_derivative;
            const double ds = pj * (dp - dsum) * (through_cap ? 1 - (s[j] / cap) * (s[j] / cap) : 1.0);
            for (int c = 0; c < d; ++c) {
              const std::size_t jc = static_cast<std::size_t>(j) * d + c;
              dq[c] += ds * kv(a.k, j, hk, c);
              dk[jc] += ds * qs(a.q, i, h, c);
              dv[jc] += pj * dorow[c];
            }
          }
          for (int c = 0; c < d; ++c) {
            store_from_float(a.dq, at(p, p.heads_q, st.q + i, h, c),
                             static_cast<float>(gscale * dq[c]), t);
          }
        }
      }
      // Stored at the sequence's own keys (the planted offset bug reads the wrong ones only).
      const std::int64_t k0 = a.p.kv_start(b);
      for (int j = 0; j < n; ++j) {
        for (int c = 0; c < d; ++c) {
          const std::size_t jc = static_cast<std::size_t>(j) * d + c;
          store_from_float(a.dk, at(p, p.heads_kv, k0 + j, hk, c),
                           static_cast<float>(gscale * dk[jc]), t);
          store_from_float(a.dv, at(p, p.heads_kv, k0 + j, hk, c), static_cast<float>(dv[jc]), t);
        }
      }
    }
  }
}

namespace {

class Control final : public Simple {
 public:
  Control() : Simple("cpu.planted_control", Bug::none, "the planted implementations' algorithm with no bug (must pass)") {}
};

}  // namespace
}  // namespace attnbench::planted

ATTNBENCH_REGISTER(attnbench::planted::Control)
