// Tests of the float64 reference (reference/), independent of every implementation: closed-form
// tiny cases, a scalar definition-level forward, central finite differences for the gradients,
// GQA == MHA with repeated K/V heads, causal edge rows, LSE shift invariance, the custom scale,
// and bitwise agreement of the sampled entry points with the full ones.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "attnbench/reference.hpp"
#include "test_util.hpp"

namespace attnbench {
namespace {

using Vec = std::vector<double>;

// BSHD element offset: [batch, seq, heads, d]
std::int64_t at(int b, int s, int h, int c, int seq, int heads, int d) {
  return ((static_cast<std::int64_t>(b) * seq + s) * heads + h) * d + c;
}

Vec random_vec(std::int64_t n, std::uint64_t seed, double lo = -1, double hi = 1) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  Vec x(static_cast<std::size_t>(n));
  for (double& e : x) e = dist(rng);
  return x;
}

// test::make_problem for float32 problems, with the scale as the optional last argument.
Problem make(int batch, int hq, int hkv, int sq, int skv, int d, bool causal, double scale = 0) {
  return test::make_problem(batch, hq, hkv, sq, skv, d, causal, DType::f32, scale);
}

struct Case {
  Problem p;
  Vec q, k, v, dout;
  explicit Case(const Problem& prob, std::uint64_t seed = 1)
      : p(prob),
        q(random_vec(prob.q_elems(), seed)),
        k(random_vec(prob.kv_elems(), seed + 1)),
        v(random_vec(prob.kv_elems(), seed + 2)),
        dout(random_vec(prob.q_elems(), seed + 3)) {}
};

struct Fwd {
  Vec o, lse;
};
Fwd run_forward(const Problem& p, const Vec& q, const Vec& k, const Vec& v) {
  Fwd f{Vec(static_cast<std::size_t>(p.q_elems())), Vec(static_cast<std::size_t>(p.lse_elems()))};
  reference::forward(p, q.data(), k.data(), v.data(), f.o.data(), f.lse.data());
  return f;
}

struct Grads {
  Vec dq, dk, dv;
};
Grads run_backward(const Problem& p, const Vec& q, const Vec& k, const Vec& v, const Vec& dout) {
  Grads g{Vec(static_cast<std::size_t>(p.q_elems())), Vec(static_cast<std::size_t>(p.kv_elems())),
          Vec(static_cast<std::size_t>(p.kv_elems()))};
  reference::backward(p, q.data(), k.data(), v.data(), dout.data(), g.dq.data(), g.dk.data(),
                      g.dv.data());
  return g;
}

double max_abs(const Vec& x) {
  double m = 0;
  for (double e : x) m = std::max(m, std::abs(e));
  return m;
}

// max |a - b| / max |b| over the elements where b is finite: the relative error used throughout.
// Non-finite values (LSE = -inf of rows without keys) must match exactly, else the error is inf.
double rel_err(const Vec& a, const Vec& b) {
  EXPECT_EQ(a.size(), b.size());
  double diff = 0, scale = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(b[i]) || !std::isfinite(a[i])) {
      if (a[i] != b[i]) return std::numeric_limits<double>::infinity();
      continue;
    }
    diff = std::max(diff, std::abs(a[i] - b[i]));
    scale = std::max(scale, std::abs(b[i]));
  }
  return diff / std::max(scale, 1e-300);
}

// ---- Closed-form tiny case ---------------------------------------------------------------------
// seq_q = 2, seq_kv = 3, head_dim = 4 (default scale 1/sqrt(4) = 1/2, exact):
//   q0 = [2,0,0,0], q1 = [0,2,2,0]
//   k0 = [1,0,0,0], k1 = [0,1,0,0], k2 = [0,0,1,0]
//   v0 = [1,0,0,0], v1 = [0,1,0,0], v2 = [0,0,1,3]
// Scores S = (1/2) q k^T: row 0 = [1, 0, 0], row 1 = [0, 1, 1].
// Row 0: Z = e + 2,  LSE = log(e + 2) = 1.55144471393205..,  O = [e, 1, 1, 3] / Z
// Row 1: Z = 1 + 2e, LSE = log(1 + 2e) = 1.86199480405825..,  O = [1, e, e, 3e] / Z
// Causal (bottom-right): row 0 sees keys 0..1 (0 <= j <= 0 + 3 - 2), row 1 sees all three.
// Causal row 0: Z = e + 1, LSE = log(e + 1) = 1.31326168751822.., O = [e, 1, 0, 0] / Z
struct Tiny {
  Vec q{2, 0, 0, 0, 0, 2, 2, 0};
  Vec k{1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0};
  Vec v{1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 3};
};

TEST(Reference, HandComputedTinyCase) {
  const Tiny t;
  const double e = std::exp(1.0);
  const Fwd f = run_forward(make(1, 1, 1, 2, 3, 4, false), t.q, t.k, t.v);
  const double z0 = e + 2, z1 = 1 + 2 * e;
  const Vec o_expect{e / z0, 1 / z0, 1 / z0, 3 / z0, 1 / z1, e / z1, e / z1, 3 * e / z1};
  const Vec lse_expect{std::log(z0), std::log(z1)};
  for (int i = 0; i < 8; ++i) EXPECT_NEAR(f.o[i], o_expect[i], 1e-15) << "o[" << i << "]";
  EXPECT_NEAR(f.lse[0], 1.5514447139320509, 1e-14);
  EXPECT_NEAR(f.lse[1], 1.861994804058251, 1e-14);
  for (int i = 0; i < 2; ++i) EXPECT_NEAR(f.lse[i], lse_expect[i], 1e-15);
}

TEST(Reference, HandComputedTinyCaseCausal) {
  const Tiny t;
  const double e = std::exp(1.0);
  const Fwd f = run_forward(make(1, 1, 1, 2, 3, 4, true), t.q, t.k, t.v);
  const double z0 = e + 1, z1 = 1 + 2 * e;
  const Vec o_expect{e / z0, 1 / z0, 0, 0, 1 / z1, e / z1, e / z1, 3 * e / z1};
  for (int i = 0; i < 8; ++i) EXPECT_NEAR(f.o[i], o_expect[i], 1e-15) << "o[" << i << "]";
  EXPECT_NEAR(f.lse[0], 1.3132616875182228, 1e-14);
  EXPECT_NEAR(f.lse[1], std::log(z1), 1e-15);
}

// ---- Definition-level scalar forward -----------------------------------------------------------
// Straight from the formulas (no max subtraction: inputs are small), with GQA, causal, the sliding
// window and soft-capping written out independently of Problem's helpers.
Fwd scalar_forward(const Problem& p, const Vec& q, const Vec& k, const Vec& v, double scale) {
  Fwd f{Vec(static_cast<std::size_t>(p.q_elems()), 0.0),
        Vec(static_cast<std::size_t>(p.lse_elems()))};
  const int d = p.head_dim;
  for (int b = 0; b < p.batch; ++b) {
    for (int h = 0; h < p.heads_q; ++h) {
      const int hk = h / (p.heads_q / p.heads_kv);
      for (int i = 0; i < p.seq_q; ++i) {
        double z = 0;
        for (int j = 0; j < p.seq_kv; ++j) {
          const int diag = i + p.seq_kv - p.seq_q;  // the key aligned with query i
          if (p.causal && j > diag) continue;
          if (p.window_left >= 0 && j < diag - p.window_left) continue;
          if (p.window_right >= 0 && j > diag + p.window_right) continue;
          double s = 0;
          for (int c = 0; c < d; ++c) {
            s += q[at(b, i, h, c, p.seq_q, p.heads_q, d)] *
                 k[at(b, j, hk, c, p.seq_kv, p.heads_kv, d)];
          }
          s *= scale;
          if (p.softcap > 0) s = p.softcap * std::tanh(s / p.softcap);
          const double w = std::exp(s);
          z += w;
          for (int c = 0; c < d; ++c) {
            f.o[at(b, i, h, c, p.seq_q, p.heads_q, d)] +=
                w * v[at(b, j, hk, c, p.seq_kv, p.heads_kv, d)];
          }
        }
        for (int c = 0; c < d; ++c) {
          if (z > 0) f.o[at(b, i, h, c, p.seq_q, p.heads_q, d)] /= z;
        }
        f.lse[(static_cast<std::int64_t>(b) * p.heads_q + h) * p.seq_q + i] = std::log(z);
      }
    }
  }
  return f;
}

// A problem with a sliding window and soft-capping (-1 / 0: off).
Problem with(Problem p, int window_left, int window_right, double softcap = 0) {
  p.window_left = window_left;
  p.window_right = window_right;
  p.softcap = softcap;
  return p;
}

TEST(Reference, MatchesScalarDefinition) {
  // Shapes cross the internal row blocks (seq_q > 64), GQA, causal with seq_q != seq_kv both ways;
  // windows (with and without causal, seq_q != seq_kv both ways, 0 and 1 wide, wider than the
  // sequence, one side only) and soft-capping (strong: scores reach about 2.8, the cap is 0.5).
  const Problem problems[] = {make(2, 4, 2, 70, 33, 8, false), make(1, 6, 2, 130, 75, 16, true),
                              make(1, 2, 1, 40, 90, 8, true), make(2, 3, 1, 9, 9, 5, true, 0.37),
                              with(make(2, 4, 2, 70, 33, 8, false), 3, 2),
                              with(make(1, 6, 2, 130, 75, 16, true), 10, -1),
                              with(make(1, 2, 1, 40, 90, 8, true), 5, 7),
                              with(make(1, 2, 1, 90, 40, 8, false), 0, 0),
                              with(make(1, 2, 2, 17, 17, 8, false), 1, 1),
                              with(make(1, 2, 2, 17, 33, 8, true), 100, 100),
                              with(make(1, 2, 1, 129, 60, 8, false), -1, 4),
                              with(make(2, 4, 2, 70, 33, 8, false), -1, -1, 0.5),
                              with(make(1, 6, 2, 130, 75, 16, true), 20, -1, 2.0),
                              with(make(1, 2, 1, 9, 9, 5, false, 3.0), 2, 2, 30.0)};
  for (const Problem& p : problems) {
    SCOPED_TRACE(p.label());
    const Case c(p, 11);
    const Fwd f = run_forward(p, c.q, c.k, c.v);
    const Fwd s = scalar_forward(p, c.q, c.k, c.v,
                                 p.scale != 0 ? p.scale : 1 / std::sqrt(double(p.head_dim)));
    EXPECT_LT(rel_err(f.o, s.o), 1e-13);
    EXPECT_LT(rel_err(f.lse, s.lse), 1e-13);
  }
}

// ---- Gradients by central differences ----------------------------------------------------------
// L = sum(O * dout); dL/dx ~ (L(x + h) - L(x - h)) / 2h, error O(h^2) + O(eps / h) ~ 1e-10.
double loss(const Problem& p, const Vec& q, const Vec& k, const Vec& v, const Vec& dout) {
  const Fwd f = run_forward(p, q, k, v);
  double l = 0;
  for (std::size_t i = 0; i < f.o.size(); ++i) l += f.o[i] * dout[i];
  return l;
}

Vec finite_diff(const Case& c, int which) {
  Vec q = c.q, k = c.k, v = c.v;
  Vec& x = which == 0 ? q : which == 1 ? k : v;
  Vec g(x.size());
  const double h = 1e-5;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double x0 = x[i];
    x[i] = x0 + h;
    const double lp = loss(c.p, q, k, v, c.dout);
    x[i] = x0 - h;
    const double lm = loss(c.p, q, k, v, c.dout);
    x[i] = x0;
    g[i] = (lp - lm) / (2 * h);
  }
  return g;
}

TEST(Reference, GradientsMatchFiniteDifferences) {
  const Problem problems[] = {
      make(2, 4, 2, 5, 7, 3, false),        // GQA
      make(1, 2, 1, 5, 7, 4, true),         // MQA, causal, seq_q < seq_kv
      make(1, 3, 3, 7, 4, 2, true, 0.7),    // causal, seq_q > seq_kv (rows 0..2 see no key)
      make(1, 2, 1, 130, 75, 2, true),      // several row blocks, partial last block
      make(1, 2, 1, 600, 40, 2, true, 1.3),  // several backward chunks summed into dK/dV
      with(make(2, 4, 2, 5, 7, 3, false), 1, 2),         // window, GQA
      with(make(1, 2, 1, 7, 4, 2, true), 1, -1),         // window + causal, seq_q > seq_kv
      with(make(1, 2, 1, 130, 75, 2, false), 20, 3),     // window across row blocks
      with(make(1, 2, 2, 5, 7, 3, false), -1, -1, 0.4),  // soft-capping, strong (1 - tanh^2)
      with(make(1, 2, 1, 7, 9, 3, true, 2.0), 2, -1, 1.5)  // all three
  };
  for (const Problem& p : problems) {
    SCOPED_TRACE(p.label());
    const Case c(p, 5);
    const Grads g = run_backward(p, c.q, c.k, c.v, c.dout);
    const Vec* an[] = {&g.dq, &g.dk, &g.dv};
    const char* names[] = {"dQ", "dK", "dV"};
    for (int w = 0; w < 3; ++w) {
      const Vec fd = finite_diff(c, w);
      EXPECT_GT(max_abs(fd), 1e-3) << names[w] << " is trivially small";
      EXPECT_LT(rel_err(*an[w], fd), 1e-6) << names[w];
    }
  }
}

// ---- GQA == MHA with repeated K/V heads --------------------------------------------------------
// kv: [b, skv, hkv, d] -> [b, skv, hq, d] with query head h reading kv head h / group
Vec repeat_kv(const Problem& p, const Vec& kv) {
  const int g = p.heads_q / p.heads_kv, d = p.head_dim;
  Vec r(static_cast<std::size_t>(p.batch) * p.seq_kv * p.heads_q * d);
  for (int b = 0; b < p.batch; ++b)
    for (int j = 0; j < p.seq_kv; ++j)
      for (int h = 0; h < p.heads_q; ++h)
        for (int c = 0; c < d; ++c)
          r[at(b, j, h, c, p.seq_kv, p.heads_q, d)] =
              kv[at(b, j, h / g, c, p.seq_kv, p.heads_kv, d)];
  return r;
}

// grad: [b, skv, hq, d] -> [b, skv, hkv, d], summing each group's heads
Vec sum_groups(const Problem& p, const Vec& grad) {
  const int g = p.heads_q / p.heads_kv, d = p.head_dim;
  Vec s(static_cast<std::size_t>(p.kv_elems()), 0.0);
  for (int b = 0; b < p.batch; ++b)
    for (int j = 0; j < p.seq_kv; ++j)
      for (int h = 0; h < p.heads_q; ++h)
        for (int c = 0; c < d; ++c)
          s[at(b, j, h / g, c, p.seq_kv, p.heads_kv, d)] +=
              grad[at(b, j, h, c, p.seq_kv, p.heads_q, d)];
  return s;
}

TEST(Reference, GqaEqualsMhaWithRepeatedHeads) {
  for (bool causal : {false, true}) {
    for (int hkv : {1, 2}) {
      const Problem gqa = make(2, 4, hkv, 70, 50, 8, causal);
      Problem mha = gqa;
      mha.heads_kv = mha.heads_q;
      SCOPED_TRACE(gqa.label());
      const Case c(gqa, 21);
      const Vec kr = repeat_kv(gqa, c.k), vr = repeat_kv(gqa, c.v);
      const Fwd fg = run_forward(gqa, c.q, c.k, c.v), fm = run_forward(mha, c.q, kr, vr);
      EXPECT_LT(rel_err(fg.o, fm.o), 1e-14);
      EXPECT_LT(rel_err(fg.lse, fm.lse), 1e-14);
      const Grads gg = run_backward(gqa, c.q, c.k, c.v, c.dout);
      const Grads gm = run_backward(mha, c.q, kr, vr, c.dout);
      EXPECT_LT(rel_err(gg.dq, gm.dq), 1e-14);
      EXPECT_LT(rel_err(gg.dk, sum_groups(gqa, gm.dk)), 1e-13);
      EXPECT_LT(rel_err(gg.dv, sum_groups(gqa, gm.dv)), 1e-13);
    }
  }
}

// ---- Causal edge rows --------------------------------------------------------------------------
TEST(Reference, CausalRowZeroSquareIsV0) {
  const Problem p = make(2, 4, 2, 33, 33, 8, true);
  const Case c(p, 31);
  const Fwd f = run_forward(p, c.q, c.k, c.v);
  const Grads g = run_backward(p, c.q, c.k, c.v, c.dout);
  const int d = p.head_dim;
  const double scale = 1 / std::sqrt(double(d));
  for (int b = 0; b < p.batch; ++b) {
    for (int h = 0; h < p.heads_q; ++h) {
      const int hk = h / 2;
      double s = 0;  // row 0 sees only key 0: O = v0, LSE = S[0][0]
      for (int cc = 0; cc < d; ++cc) {
        EXPECT_NEAR(f.o[at(b, 0, h, cc, p.seq_q, p.heads_q, d)],
                    c.v[at(b, 0, hk, cc, p.seq_kv, p.heads_kv, d)], 1e-15);
        s += c.q[at(b, 0, h, cc, p.seq_q, p.heads_q, d)] *
             c.k[at(b, 0, hk, cc, p.seq_kv, p.heads_kv, d)];
        // A one-key softmax is constant (P = 1): no gradient reaches q0.
        EXPECT_NEAR(g.dq[at(b, 0, h, cc, p.seq_q, p.heads_q, d)], 0.0, 1e-15);
      }
      EXPECT_NEAR(f.lse[(b * p.heads_q + h) * p.seq_q], scale * s, 1e-15);
    }
  }
}

TEST(Reference, RowWithoutKeysIsZeroWithMinusInfLse) {
  // Row i sees keys j <= i + seq_kv - seq_q, so with seq_q > seq_kv rows 0 .. seq_q - seq_kv - 1
  // see none. 70 x 6: those rows fill a whole internal row block of 64; 10 x 4: they share a
  // block with rows that do see keys.
  for (const auto& [sq, skv] : {std::pair{70, 6}, std::pair{10, 4}}) {
    const Problem p = make(1, 2, 1, sq, skv, 4, true);
    SCOPED_TRACE(p.label());
    const Case c(p, 41);
    const Fwd f = run_forward(p, c.q, c.k, c.v);
    const Grads g = run_backward(p, c.q, c.k, c.v, c.dout);
    const int d = p.head_dim, empty = sq - skv;
    for (int h = 0; h < p.heads_q; ++h) {
      for (int i = 0; i < empty; ++i) {
        const double lse = f.lse[h * sq + i];
        EXPECT_TRUE(std::isinf(lse) && lse < 0) << "row " << i << " lse " << lse;
        for (int cc = 0; cc < d; ++cc) {
          EXPECT_EQ(f.o[at(0, i, h, cc, sq, p.heads_q, d)], 0.0);
          EXPECT_EQ(g.dq[at(0, i, h, cc, sq, p.heads_q, d)], 0.0);
        }
      }
      EXPECT_TRUE(std::isfinite(f.lse[h * sq + empty]));
    }
    // dK/dV come only from the rows that see keys: the same as a problem made of those rows
    // alone (with seq_q = seq_kv, its row r sees keys j <= r, as row empty + r of the full one).
    const Problem tail = make(1, 2, 1, skv, skv, 4, true);
    Vec qt(static_cast<std::size_t>(tail.q_elems())), dot(qt.size());
    for (int r = 0; r < skv; ++r)
      for (int h = 0; h < p.heads_q; ++h)
        for (int cc = 0; cc < d; ++cc) {
          qt[at(0, r, h, cc, skv, p.heads_q, d)] = c.q[at(0, empty + r, h, cc, sq, p.heads_q, d)];
          dot[at(0, r, h, cc, skv, p.heads_q, d)] =
              c.dout[at(0, empty + r, h, cc, sq, p.heads_q, d)];
        }
    const Grads gt = run_backward(tail, qt, c.k, c.v, dot);
    EXPECT_LT(rel_err(g.dk, gt.dk), 1e-14);
    EXPECT_LT(rel_err(g.dv, gt.dv), 1e-14);
  }
}

// ---- Shift invariance of the softmax -----------------------------------------------------------
// Adding c to every score of row i must add c to LSE[i] and leave O unchanged. Construction:
// append one dimension to head_dim (fixed explicit scale, so the extra dimension does not change
// it); every key gets 1 there, query row i gets c / scale and the other rows 0, V gets 0. Then
// S'[i][j] = scale * (q_i . k_j + (c / scale) * 1) = S[i][j] + c, other rows are unchanged, and
// O' = [O, 0]. c = +-1000 also proves the softmax is safe: exp(S + 1000) overflows and
// exp(S - 1000) underflows to 0 without the max subtraction.
TEST(Reference, LseShiftsWithScoresAndOIsInvariant) {
  const double scale = 0.25;
  // Causal with seq_kv > seq_q: every row sees at least 4 keys (finite LSE everywhere).
  const Problem p = make(1, 2, 1, 9, 12, 3, true, scale);
  const Problem pe = make(1, 2, 1, 9, 12, 4, true, scale);
  const Case c(p, 51);
  const int d = p.head_dim, de = pe.head_dim, row = 7;
  const Fwd f = run_forward(p, c.q, c.k, c.v);
  for (double shift : {1000.0, -1000.0, 0.5}) {
    SCOPED_TRACE(shift);
    Vec q(static_cast<std::size_t>(pe.q_elems()), 0.0),
        k(static_cast<std::size_t>(pe.kv_elems()), 0.0), v(k.size(), 0.0);
    for (int h = 0; h < p.heads_q; ++h)
      for (int i = 0; i < p.seq_q; ++i) {
        for (int cc = 0; cc < d; ++cc)
          q[at(0, i, h, cc, p.seq_q, 2, de)] = c.q[at(0, i, h, cc, p.seq_q, 2, d)];
        q[at(0, i, h, d, p.seq_q, 2, de)] = i == row ? shift / scale : 0.0;
      }
    for (int j = 0; j < p.seq_kv; ++j) {
      for (int cc = 0; cc < d; ++cc) {
        k[at(0, j, 0, cc, p.seq_kv, 1, de)] = c.k[at(0, j, 0, cc, p.seq_kv, 1, d)];
        v[at(0, j, 0, cc, p.seq_kv, 1, de)] = c.v[at(0, j, 0, cc, p.seq_kv, 1, d)];
      }
      k[at(0, j, 0, d, p.seq_kv, 1, de)] = 1.0;
    }
    const Fwd fe = run_forward(pe, q, k, v);
    for (int h = 0; h < p.heads_q; ++h)
      for (int i = 0; i < p.seq_q; ++i) {
        const double expect = f.lse[h * p.seq_q + i] + (i == row ? shift : 0.0);
        // S' = S + c is rounded at |c|: allow a few ulps of 1000.
        EXPECT_NEAR(fe.lse[h * p.seq_q + i], expect, 1e-12) << "h " << h << " row " << i;
        for (int cc = 0; cc < d; ++cc)
          EXPECT_NEAR(fe.o[at(0, i, h, cc, p.seq_q, 2, de)], f.o[at(0, i, h, cc, p.seq_q, 2, d)],
                      1e-12);
        EXPECT_EQ(fe.o[at(0, i, h, d, p.seq_q, 2, de)], 0.0);
      }
  }
}

// ---- Custom scale ------------------------------------------------------------------------------
// With scale s, S = s q k^T equals the default scale s0 = 1/sqrt(d) applied to q * (s / s0):
// O, LSE, dK, dV must match, and dQ = (s / s0) * dQ' by the chain rule.
TEST(Reference, CustomScaleIsHonoured) {
  for (bool causal : {false, true}) {
    const Problem ps = make(1, 4, 2, 20, 30, 16, causal, 0.9);
    Problem p0 = ps;
    p0.scale = 0;
    SCOPED_TRACE(ps.label());
    const Case c(ps, 61);
    const double ratio = 0.9 * std::sqrt(16.0);
    Vec qs = c.q;
    for (double& x : qs) x *= ratio;
    const Fwd fs = run_forward(ps, c.q, c.k, c.v), f0 = run_forward(p0, qs, c.k, c.v);
    EXPECT_LT(rel_err(fs.o, f0.o), 1e-13);
    EXPECT_LT(rel_err(fs.lse, f0.lse), 1e-13);
    // And the scale really changes the result (a reference that ignored it would fail above, but
    // make the difference explicit).
    const Fwd fd = run_forward(p0, c.q, c.k, c.v);
    EXPECT_GT(rel_err(fs.o, fd.o), 1e-3);
    const Grads gs = run_backward(ps, c.q, c.k, c.v, c.dout),
                g0 = run_backward(p0, qs, c.k, c.v, c.dout);
    Vec dq0 = g0.dq;
    for (double& x : dq0) x *= ratio;
    EXPECT_LT(rel_err(gs.dq, dq0), 1e-13);
    EXPECT_LT(rel_err(gs.dk, g0.dk), 1e-13);
    EXPECT_LT(rel_err(gs.dv, g0.dv), 1e-13);
  }
}

// ---- Sampled entry points agree bitwise with the full ones --------------------------------------
TEST(Reference, ForwardRowsEqualsForwardExactly) {
  // seq_q spans several row blocks and a partial last one.
  for (bool causal : {false, true}) {
    const Problem p = make(2, 4, 2, 200, 150, 16, causal);
    SCOPED_TRACE(p.label());
    const Case c(p, 71);
    const Fwd f = run_forward(p, c.q, c.k, c.v);
    const std::vector<int> rows{199, 0, 63, 64, 130, 5, 130, 128, 127};
    const int d = p.head_dim;
    for (int b = 0; b < p.batch; ++b) {
      for (int h = 0; h < p.heads_q; ++h) {
        Vec o(rows.size() * d), lse(rows.size());
        reference::forward_rows(p, c.q.data(), c.k.data(), c.v.data(), b, h, rows, o.data(),
                                lse.data());
        for (std::size_t n = 0; n < rows.size(); ++n) {
          EXPECT_EQ(lse[n], f.lse[(b * p.heads_q + h) * p.seq_q + rows[n]]);
          for (int cc = 0; cc < d; ++cc)
            EXPECT_EQ(o[n * d + cc], f.o[at(b, rows[n], h, cc, p.seq_q, p.heads_q, d)]);
        }
      }
    }
  }
  const Problem p = make(1, 1, 1, 8, 8, 4, false);
  const Case c(p);
  Vec o(4), lse(1);
  EXPECT_THROW(reference::forward_rows(p, c.q.data(), c.k.data(), c.v.data(), 0, 0, {8}, o.data(),
                                       lse.data()),
               std::out_of_range);
}

TEST(Reference, BackwardKvHeadEqualsBackwardExactly) {
  // seq_q = 700 spans two backward chunks; batch * heads_kv = 4 so that, with few threads,
  // backward() parallelises over kv groups while backward_kv_head() runs units concurrently.
  for (bool causal : {false, true}) {
    const Problem p = make(2, 4, 2, 700, 300, 8, causal);
    SCOPED_TRACE(p.label());
    const Case c(p, 81);
    const Grads g = run_backward(p, c.q, c.k, c.v, c.dout);
    const int d = p.head_dim, grp = p.group();
    for (int b = 0; b < p.batch; ++b) {
      for (int hk = 0; hk < p.heads_kv; ++hk) {
        Vec dq(static_cast<std::size_t>(grp) * p.seq_q * d),
            dk(static_cast<std::size_t>(p.seq_kv) * d), dv(dk.size());
        reference::backward_kv_head(p, c.q.data(), c.k.data(), c.v.data(), c.dout.data(), b, hk,
                                    dq.data(), dk.data(), dv.data());
        std::int64_t mismatches = 0;
        for (int gi = 0; gi < grp; ++gi)
          for (int i = 0; i < p.seq_q; ++i)
            for (int cc = 0; cc < d; ++cc)
              mismatches += dq[(static_cast<std::size_t>(gi) * p.seq_q + i) * d + cc] !=
                            g.dq[at(b, i, hk * grp + gi, cc, p.seq_q, p.heads_q, d)];
        for (int j = 0; j < p.seq_kv; ++j)
          for (int cc = 0; cc < d; ++cc) {
            mismatches += dk[static_cast<std::size_t>(j) * d + cc] !=
                          g.dk[at(b, j, hk, cc, p.seq_kv, p.heads_kv, d)];
            mismatches += dv[static_cast<std::size_t>(j) * d + cc] !=
                          g.dv[at(b, j, hk, cc, p.seq_kv, p.heads_kv, d)];
          }
        EXPECT_EQ(mismatches, 0) << "b " << b << " hk " << hk;
      }
    }
  }
}

TEST(Reference, RejectsInvalidProblem) {
  const Problem p = make(1, 3, 2, 4, 4, 4, false);  // heads_q not a multiple of heads_kv
  Vec x(1000);
  EXPECT_THROW(reference::forward(p, x.data(), x.data(), x.data(), x.data(), x.data()),
               std::invalid_argument);
}

// ---- Sliding window and soft-capping: edges and equivalences ----------------------------------

// A window that reaches past both ends is no window; window_right 0 is causal (bitwise: the same
// key ranges go through the same code).
TEST(Reference, WindowEquivalences) {
  const Problem base = make(1, 4, 2, 70, 90, 8, false);
  const Case c(base, 21);
  const Fwd dense = run_forward(base, c.q, c.k, c.v);
  const Fwd wide = run_forward(with(base, 1000, 1000), c.q, c.k, c.v);
  EXPECT_EQ(wide.o, dense.o);
  EXPECT_EQ(wide.lse, dense.lse);
  Problem causal = base;
  causal.causal = true;
  const Fwd fc = run_forward(causal, c.q, c.k, c.v);
  const Fwd right0 = run_forward(with(base, -1, 0), c.q, c.k, c.v);
  EXPECT_EQ(right0.o, fc.o);
  EXPECT_EQ(right0.lse, fc.lse);
  const Grads gc = run_backward(causal, c.q, c.k, c.v, c.dout);
  const Grads gr = run_backward(with(base, -1, 0), c.q, c.k, c.v, c.dout);
  EXPECT_EQ(gr.dq, gc.dq);
  EXPECT_EQ(gr.dk, gc.dk);
  EXPECT_EQ(gr.dv, gc.dv);
  // window 0 on both sides: each row sees only its diagonal key, so O is that key's V and
  // LSE its score.
  const Problem diag = with(make(1, 1, 1, 5, 5, 4, false), 0, 0);
  const Case d(diag, 3);
  const Fwd f = run_forward(diag, d.q, d.k, d.v);
  for (int i = 0; i < 5; ++i) {
    double s = 0;
    for (int e = 0; e < 4; ++e) s += d.q[at(0, i, 0, e, 5, 1, 4)] * d.k[at(0, i, 0, e, 5, 1, 4)];
    EXPECT_NEAR(f.lse[i], s / 2, 1e-15) << "row " << i;
    for (int e = 0; e < 4; ++e) EXPECT_EQ(f.o[at(0, i, 0, e, 5, 1, 4)], d.v[at(0, i, 0, e, 5, 1, 4)]);
  }
}

// Rows a window leaves without keys (seq_q > seq_kv: the first rows' windows end before key 0)
// have O = 0, LSE = -inf and no gradient, like causal's.
TEST(Reference, WindowRowsWithoutKeys) {
  // Row i's diagonal is key i - 8 and it sees keys [i - 9, i - 8]: rows 0..7 see none, row 8 key
  // 0 alone, rows 9..11 two keys each.
  const Problem p = with(make(1, 2, 1, 12, 4, 4, false), 1, 0);
  const Case c(p, 8);
  const Fwd f = run_forward(p, c.q, c.k, c.v);
  const Grads g = run_backward(p, c.q, c.k, c.v, c.dout);
  for (int h = 0; h < 2; ++h) {
    for (int i = 0; i < 12; ++i) {
      const bool none = i < 8;
      EXPECT_EQ(p.visible_keys(i), none ? 0 : i == 8 ? 1 : 2) << "row " << i;
      EXPECT_EQ(std::isinf(f.lse[h * 12 + i]), none) << "row " << i;
      if (!none) continue;
      for (int e = 0; e < 4; ++e) {
        EXPECT_EQ(f.o[at(0, i, h, e, 12, 2, 4)], 0.0);
        EXPECT_EQ(g.dq[at(0, i, h, e, 12, 2, 4)], 0.0);
      }
    }
  }
  EXPECT_EQ(p.visible_pairs(), 1 + 2 * 3);
}

// Problem::visible_in, the one clamp of a row's visible keys to a tile, against visible(i, j) key
// by key: causal or not, windows on either side, seq_q above and below seq_kv, tiles that start
// before, inside and past the keys.
TEST(Reference, VisibleInIsVisibilityWithinATile) {
  int checked = 0;
  for (const auto& [sq, skv] : {std::pair{5, 9}, std::pair{9, 5}, std::pair{7, 7}}) {
    for (const bool causal : {false, true}) {
      for (const auto& [wl, wr] : {std::pair{-1, -1}, std::pair{2, -1}, std::pair{-1, 1},
                                   std::pair{0, 0}, std::pair{3, 2}}) {
        const Problem p = with(make(1, 1, 1, sq, skv, 4, causal), wl, wr);
        for (int i = 0; i < sq; ++i) {
          for (int j0 = 0; j0 <= skv; ++j0) {
            for (int n = 0; j0 + n <= skv; ++n) {
              const Problem::KeySpan got = p.visible_in(i, j0, n);
              ASSERT_LE(0, got.lo);
              ASSERT_LE(got.lo, got.hi);
              ASSERT_LE(got.hi, n);
              for (int j = j0; j < j0 + n; ++j) {
                const bool inside = j - j0 >= got.lo && j - j0 < got.hi;
                ASSERT_EQ(inside, p.visible(i, j)) << p.label() << " row " << i << " key " << j
                                                   << " tile [" << j0 << ", " << j0 + n << ")";
              }
              ++checked;
            }
          }
        }
      }
    }
  }
  EXPECT_GT(checked, 1000);
}

// A cap far above every score changes the scores by at most s^3 / (3 cap^2); a cap of c bounds
// every score by c, so LSE <= c + log(seq_kv).
TEST(Reference, SoftcapLimits) {
  const Problem p = make(1, 2, 2, 20, 30, 8, true);
  const Case c(p, 4);
  const Fwd dense = run_forward(p, c.q, c.k, c.v);
  const Fwd loose = run_forward(with(p, -1, -1, 1e6), c.q, c.k, c.v);
  EXPECT_LT(rel_err(loose.o, dense.o), 1e-10);
  EXPECT_LT(rel_err(loose.lse, dense.lse), 1e-10);
  Case big = c;
  for (double& x : big.q) x *= 100;  // scores up to ~300
  const Fwd capped = run_forward(with(p, -1, -1, 5.0), big.q, big.k, big.v);
  for (double l : capped.lse) {
    if (std::isfinite(l)) {
      EXPECT_LE(l, 5.0 + std::log(30.0) + 1e-12);
    }
  }
}

TEST(Reference, WindowAndSoftcapFieldsAreValidated) {
  Problem p = make(1, 1, 1, 4, 4, 8, false);
  EXPECT_EQ(validate(with(p, -1, -1)), "");
  EXPECT_EQ(validate(with(p, 0, 0, 30)), "");
  EXPECT_NE(validate(with(p, -2, -1)).find("window_left = -2"), std::string::npos);
  EXPECT_NE(validate(with(p, -1, -7)).find("window_right = -7"), std::string::npos);
  EXPECT_NE(validate(with(p, -1, -1, -1)).find("softcap = -1"), std::string::npos);
  EXPECT_NE(validate(with(p, -1, -1, std::nan(""))).find("softcap"), std::string::npos);
  EXPECT_EQ(with(p, 128, 0, 30).label(), "b1_hq1_hkv1_sq4_skv4_d8_f32_wl128_wr0_softcap30");
  Vec x(16);
  EXPECT_THROW(run_forward(with(p, -3, -1), x, x, x), std::invalid_argument);
}

}  // namespace
}  // namespace attnbench
