// Self-test of cuda.flash_fwd_mma and cuda.flash_bwd_mma on the CPU emulator (emulation/mma/):
// odd shapes (tails, GQA/MQA, causal with seq_q < and > seq_kv, empty rows and blocks, every
// head_dim, both dtypes, both backward modes) against a float64 reference of its own. Tolerances:
// max abs error <= 2% (bf16) / 0.4% (f16) of max |O| for O, 3% / 0.6% of max |grad| for gradients,
// 2e-3 for LSE; no NaN/Inf; -inf LSE exactly where the reference has it.
//
// Built and run by CTest as test_mma_emulation (tests/mma_emulation/, tests/CMakeLists.txt): each
// implementation file is compiled as C++ in its own wrapper translation unit
// (`#include "flash_fwd_mma.cu"`), with this folder before impls/cuda on the include path, and
// linked with attn_core only. Do not link attn_impls_cuda as well: the names would be registered
// twice.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

#include "attnbench/implementation.hpp"

namespace attn_mma_emulation {
using namespace attnbench;

struct Ref {
  std::vector<double> o, lse, dq, dk, dv;
};

inline std::vector<uint16_t> rnd(size_t n, DType t, std::mt19937& g, float amp) {
  std::normal_distribution<float> d(0.f, amp);
  std::vector<uint16_t> v(n);
  for (auto& x : v) {
    float f = d(g);
    x = t == DType::f16 ? float_to_f16(f) : float_to_bf16(f);
  }
  return v;
}
inline double val(const std::vector<uint16_t>& v, size_t i, DType t) {
  return t == DType::f16 ? f16_to_float(v[i]) : bf16_to_float(v[i]);
}

inline Ref reference(const Problem& p, const std::vector<uint16_t>& q,
                     const std::vector<uint16_t>& k, const std::vector<uint16_t>& v,
                     const std::vector<uint16_t>& dout) {
  const int D = p.head_dim;
  const double sc = p.effective_scale();
  Ref r;
  r.o.assign(p.q_elems(), 0);
  r.dq.assign(p.q_elems(), 0);
  r.lse.assign(p.lse_elems(), 0);
  r.dk.assign(p.kv_elems(), 0);
  r.dv.assign(p.kv_elems(), 0);
  auto qi = [&](int b, int i, int h, int d) {
    return ((size_t(b) * p.seq_q + i) * p.heads_q + h) * D + d;
  };
  auto ki = [&](int b, int j, int h, int d) {
    return ((size_t(b) * p.seq_kv + j) * p.heads_kv + h) * D + d;
  };
  for (int b = 0; b < p.batch; ++b)
    for (int h = 0; h < p.heads_q; ++h) {
      const int kh = p.kv_head(h);
      for (int i = 0; i < p.seq_q; ++i) {
        std::vector<double> s(p.seq_kv), P(p.seq_kv, 0.0), dp(p.seq_kv);
        double mx = -INFINITY;
        for (int j = 0; j < p.seq_kv; ++j) {
          double a = 0;
          for (int d = 0; d < D; ++d)
            a += val(q, qi(b, i, h, d), p.dtype) * val(k, ki(b, j, kh, d), p.dtype);
          s[j] = a * sc;
          if (p.visible(i, j)) mx = std::max(mx, s[j]);
        }
        double sum = 0;
        for (int j = 0; j < p.seq_kv; ++j)
          if (p.visible(i, j)) sum += std::exp(s[j] - mx);
        const size_t li = (size_t(b) * p.heads_q + h) * p.seq_q + i;
        if (sum == 0) {
          r.lse[li] = -INFINITY;
          continue;
        }
        r.lse[li] = mx + std::log(sum);
        for (int j = 0; j < p.seq_kv; ++j)
          if (p.visible(i, j)) P[j] = std::exp(s[j] - r.lse[li]);
        for (int d = 0; d < D; ++d) {
          double a = 0;
          for (int j = 0; j < p.seq_kv; ++j) a += P[j] * val(v, ki(b, j, kh, d), p.dtype);
          r.o[qi(b, i, h, d)] = a;
        }
        double Dr = 0;
        for (int j = 0; j < p.seq_kv; ++j) {
          double a = 0;
          for (int d = 0; d < D; ++d)
            a += val(dout, qi(b, i, h, d), p.dtype) * val(v, ki(b, j, kh, d), p.dtype);
          dp[j] = a;
          Dr += P[j] * a;
        }
        for (int j = 0; j < p.seq_kv; ++j) {
          if (P[j] == 0) continue;
          const double ds = P[j] * (dp[j] - Dr);
          for (int d = 0; d < D; ++d) {
            r.dq[qi(b, i, h, d)] += sc * ds * val(k, ki(b, j, kh, d), p.dtype);
            r.dk[ki(b, j, kh, d)] += sc * ds * val(q, qi(b, i, h, d), p.dtype);
            r.dv[ki(b, j, kh, d)] += P[j] * val(dout, qi(b, i, h, d), p.dtype);
          }
        }
      }
    }
  return r;
}

inline int failures = 0;
inline void cmp(const char* what, const std::vector<uint16_t>& got, const std::vector<double>& ref,
                DType t, double tol_rel) {
  double err = 0, mx = 0;
  size_t bad = 0, worst = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double g = val(got, i, t);
    if (!std::isfinite(g)) {
      ++bad;
      continue;
    }
    const double e = std::fabs(g - ref[i]);
    if (e > err) {
      err = e;
      worst = i;
    }
    mx = std::max(mx, std::fabs(ref[i]));
  }
  const bool ok = bad == 0 && err <= tol_rel * std::max(mx, 1e-3);
  if (!ok) ++failures;
  std::printf("  %-4s max|ref| %.4g  max err %.3g (rel %.3g) at %zu  nonfinite %zu  %s\n", what, mx,
              err, err / std::max(mx, 1e-30), worst, bad, ok ? "ok" : "FAIL");
}
inline void cmp_lse(const std::vector<float>& got, const std::vector<double>& ref) {
  double err = 0;
  size_t bad = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (std::isinf(ref[i])) {
      if (!(std::isinf(got[i]) && got[i] < 0)) ++bad;
      continue;
    }
    if (!std::isfinite(got[i])) {
      ++bad;
      continue;
    }
    err = std::max(err, std::fabs(got[i] - ref[i]));
  }
  const bool ok = bad == 0 && err < 2e-3;
  if (!ok) ++failures;
  std::printf("  lse  max err %.3g  bad %zu  %s\n", err, bad, ok ? "ok" : "FAIL");
}

// Runs every case (or only case `only`); prints one block per case; returns the number of failed
// comparisons.
inline int selftest(int only = -1) {
  struct Case {
    int b, hq, hkv, sq, skv, d;
    bool causal;
    DType t;
    bool bwd;
  };
  std::vector<Case> cases = {
      {1, 2, 1, 70, 90, 64, true, DType::bf16, true},
      {1, 2, 2, 130, 40, 128, true, DType::f16, true},
      {2, 1, 1, 33, 200, 64, false, DType::f16, true},
      {1, 1, 1, 20, 150, 256, true, DType::bf16, false},
      {1, 4, 1, 65, 129, 128, false, DType::bf16, true},
      {1, 1, 1, 256, 256, 128, true, DType::bf16, true},
      {1, 2, 1, 1, 1, 64, true, DType::bf16, true},
      {1, 1, 1, 300, 17, 256, false, DType::f16, false},
      {1, 1, 1, 300, 10, 64, true, DType::bf16, true},
      {1, 2, 2, 100, 300, 64, true, DType::f16, true},
      {2, 3, 1, 200, 333, 128, true, DType::bf16, true},
      {1, 2, 1, 129, 257, 256, true, DType::f16, false},
  };
  const Implementation* fwd = Registry::instance().find("cuda.flash_fwd_mma");
  const Implementation* bwd = Registry::instance().find("cuda.flash_bwd_mma");
  if (!fwd || !bwd) {
    std::printf("impls not registered\n");
    return 1;
  }
  for (size_t ci = 0; ci < cases.size(); ++ci) {
    if (only >= 0 && int(ci) != only) continue;
    const Case& c = cases[ci];
    Problem p;
    p.batch = c.b;
    p.heads_q = c.hq;
    p.heads_kv = c.hkv;
    p.seq_q = c.sq;
    p.seq_kv = c.skv;
    p.head_dim = c.d;
    p.causal = c.causal;
    p.dtype = c.t;
    std::printf("case %zu: %s\n", ci, p.label().c_str());
    std::mt19937 g(1234 + ci);
    auto q = rnd(p.q_elems(), p.dtype, g, 1.0f), k = rnd(p.kv_elems(), p.dtype, g, 1.0f),
         v = rnd(p.kv_elems(), p.dtype, g, 1.0f), dout = rnd(p.q_elems(), p.dtype, g, 1.0f);
    const Ref r = reference(p, q, k, v, dout);
    std::vector<uint16_t> o(p.q_elems());
    std::vector<float> lse(p.lse_elems());
    poison_nan(o.data(), o.size(), p.dtype);
    poison_nan(lse.data(), lse.size(), DType::f32);
    Options opts;
    std::printf("  supports fwd: %s\n",
                fwd->supports(p, Pass::fwd) ? "yes" : fwd->supports(p, Pass::fwd).reason.c_str());
    fwd->prepare(p, Pass::fwd, opts);
    FwdArgs fa;
    fa.p = p;
    fa.q = q.data();
    fa.k = k.data();
    fa.v = v.data();
    fa.o = o.data();
    fa.lse = lse.data();
    fa.options = &opts;
    auto t0 = std::chrono::steady_clock::now();
    fwd->forward(fa);
    std::printf("  fwd %.1f s\n",
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    const double tol = p.dtype == DType::bf16 ? 2e-2 : 4e-3;
    cmp("O", o, r.o, p.dtype, tol);
    cmp_lse(lse, r.lse);
    if (!c.bwd) {
      std::printf("  bwd supports: %s\n", bwd->supports(p, Pass::bwd).reason.c_str());
      continue;
    }
    for (int det = 0; det < 2; ++det) {
      Options bo;
      bo["deterministic"] = det;
      std::vector<uint16_t> dq(p.q_elems()), dk(p.kv_elems()), dv(p.kv_elems());
      poison_nan(dq.data(), dq.size(), p.dtype);
      poison_nan(dk.data(), dk.size(), p.dtype);
      poison_nan(dv.data(), dv.size(), p.dtype);
      const size_t ws = bwd->workspace_bytes(p, Pass::bwd, bo);
      std::vector<float> wsbuf(ws / 4 + 4, NAN);
      bwd->prepare(p, Pass::bwd, bo);
      BwdArgs ba;
      ba.p = p;
      ba.q = q.data();
      ba.k = k.data();
      ba.v = v.data();
      ba.o = o.data();
      ba.lse = lse.data();
      ba.dout = dout.data();
      ba.dq = dq.data();
      ba.dk = dk.data();
      ba.dv = dv.data();
      ba.workspace = wsbuf.data();
      ba.workspace_bytes = ws;
      ba.options = &bo;
      t0 = std::chrono::steady_clock::now();
      bwd->backward(ba);
      std::printf("  bwd det=%d ws=%zu %.1f s\n", det, ws,
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      const double gt = p.dtype == DType::bf16 ? 3e-2 : 6e-3;
      cmp("dQ", dq, r.dq, p.dtype, gt);
      cmp("dK", dk, r.dk, p.dtype, gt);
      cmp("dV", dv, r.dv, p.dtype, gt);
    }
  }
  std::printf("%d failures\n", failures);
  return failures;
}

}  // namespace attn_mma_emulation
