// Variable-length batches (issue 30, varlen): the Problem's fields, validation, label and FLOPs;
// the float64 reference against each sequence computed as its own dense problem; cpu.naive_3pass,
// cpu.flash_fwd and cpu.flash_bwd against the reference; the packed inputs; the results JSON and
// the C API's problem reader.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "attnbench/reference.hpp"
#include "attnbench/results.hpp"
#include "attnbench/tensors.hpp"
#include "attnbench/verify_outputs.hpp"
#include "check_impl.hpp"
#include "test_util.hpp"

namespace attnbench {
namespace {

using test::make_problem;
constexpr std::uint64_t kSeed = 20261202;
constexpr double kInf = std::numeric_limits<double>::infinity();

Problem varlen(Problem p, std::vector<int> q, std::vector<int> kv, int wl = -1, int wr = -1,
               double softcap = 0) {
  p.set_seqlens(std::move(q), std::move(kv));
  p.window_left = wl;
  p.window_right = wr;
  p.softcap = softcap;
  return p;
}

// The batches every test below runs: a sequence without queries and one without keys, causal with
// seq_q > seq_kv and seq_q < seq_kv in one batch, a window, a soft cap, GQA 8:2 and MQA.
std::vector<Problem> batches(DType t = DType::f32) {
  return {
      varlen(make_problem(1, 2, 2, 1, 1, 32, false, t), {17, 0, 9, 33}, {20, 11, 0, 40}),
      varlen(make_problem(1, 2, 2, 1, 1, 32, true, t), {50, 0, 9, 33}, {20, 11, 0, 40}),
      varlen(make_problem(1, 8, 2, 1, 1, 40, true, t), {65, 1, 30}, {40, 64, 30}, 16, -1),
      varlen(make_problem(1, 8, 1, 1, 1, 64, false, t), {33, 100, 7}, {90, 20, 7}, 8, 8),
      varlen(make_problem(1, 4, 2, 1, 1, 48, true, t), {64, 0, 70}, {0, 30, 100}, -1, -1, 30),
  };
}

std::vector<double> randn(std::int64_t n, std::mt19937_64& rng) {
  std::normal_distribution<double> d;
  std::vector<double> v(static_cast<std::size_t>(n));
  for (double& x : v) x = d(rng);
  return v;
}

// Rows [t0, t0 + n) of a packed [total, heads, d] tensor: a dense [1, n, heads, d] one.
std::vector<double> slice(const std::vector<double>& x, std::int64_t t0, int n, int heads, int d) {
  const std::int64_t w = std::int64_t{heads} * d;
  return {x.begin() + t0 * w, x.begin() + (t0 + n) * w};
}

// Each sequence computed as its own dense problem (built from scratch, not Problem::sequence)
// equals the slice of the varlen result; zero-length sequences have O = 0, LSE = -inf, no
// gradient, and every element of the packed outputs is written.
TEST(VarlenReference, EachSequenceIsItsOwnDenseProblem) {
  for (const Problem& p : batches()) {
    SCOPED_TRACE(p.label());
    std::mt19937_64 rng(kSeed);
    const auto q = randn(p.q_elems(), rng), k = randn(p.kv_elems(), rng),
               v = randn(p.kv_elems(), rng), dout = randn(p.q_elems(), rng);
    const double nan = std::numeric_limits<double>::quiet_NaN();
    std::vector<double> o(q.size(), nan), lse(static_cast<std::size_t>(p.lse_elems()), nan);
    std::vector<double> dq(q.size(), nan), dk(k.size(), nan), dv(k.size(), nan);
    reference::forward(p, q.data(), k.data(), v.data(), o.data(), lse.data());
    reference::backward(p, q.data(), k.data(), v.data(), dout.data(), dq.data(), dk.data(),
                        dv.data());
    for (const auto* x : {&o, &dq, &dk, &dv}) {
      for (double e : *x) ASSERT_TRUE(std::isfinite(e));
    }
    const int d = p.head_dim, hq = p.heads_q, hkv = p.heads_kv;
    std::int64_t t_q = 0, t_kv = 0;  // the sequence's first tokens, counted here independently
    for (int b = 0; b < p.batch; ++b) {
      const int sq = p.seqlens_q[static_cast<std::size_t>(b)];
      const int skv = p.seqlens_kv[static_cast<std::size_t>(b)];
      EXPECT_EQ(p.q_start(b), t_q);
      EXPECT_EQ(p.kv_start(b), t_kv);
      if (sq > 0 && skv > 0) {
        Problem s = make_problem(1, hq, hkv, sq, skv, d, p.causal);
        s.window_left = p.window_left;
        s.window_right = p.window_right;
        s.softcap = p.softcap;
        const auto sq_in = slice(q, t_q, sq, hq, d), sk = slice(k, t_kv, skv, hkv, d),
                   sv = slice(v, t_kv, skv, hkv, d), sdo = slice(dout, t_q, sq, hq, d);
        std::vector<double> so(sq_in.size()), slse(static_cast<std::size_t>(hq) * sq);
        std::vector<double> sdq(sq_in.size()), sdk(sk.size()), sdv(sk.size());
        reference::forward(s, sq_in.data(), sk.data(), sv.data(), so.data(), slse.data());
        reference::backward(s, sq_in.data(), sk.data(), sv.data(), sdo.data(), sdq.data(),
                            sdk.data(), sdv.data());
        EXPECT_EQ(slice(o, t_q, sq, hq, d), so) << "O of sequence " << b;
        EXPECT_EQ(slice(dq, t_q, sq, hq, d), sdq) << "dQ of sequence " << b;
        EXPECT_EQ(slice(dk, t_kv, skv, hkv, d), sdk) << "dK of sequence " << b;
        EXPECT_EQ(slice(dv, t_kv, skv, hkv, d), sdv) << "dV of sequence " << b;
        for (int h = 0; h < hq; ++h) {  // LSE [heads_q, total_q] against [1, heads_q, sq]
          for (int i = 0; i < sq; ++i) {
            EXPECT_EQ(lse[static_cast<std::size_t>(h * p.total_q() + t_q + i)],
                      slse[static_cast<std::size_t>(h * sq + i)]);
          }
        }
      } else {
        for (double e : slice(o, t_q, sq, hq, d)) EXPECT_EQ(e, 0.0);
        for (double e : slice(dq, t_q, sq, hq, d)) EXPECT_EQ(e, 0.0);
        for (double e : slice(dk, t_kv, skv, hkv, d)) EXPECT_EQ(e, 0.0);
        for (double e : slice(dv, t_kv, skv, hkv, d)) EXPECT_EQ(e, 0.0);
        for (int h = 0; h < hq; ++h) {
          for (int i = 0; i < sq; ++i) {
            EXPECT_EQ(lse[static_cast<std::size_t>(h * p.total_q() + t_q + i)], -kInf);
          }
        }
      }
      t_q += sq;
      t_kv += skv;
    }
    EXPECT_EQ(t_q, p.total_q());
    EXPECT_EQ(t_kv, p.total_kv());
  }
}

// forward_rows and backward_kv_head on a varlen problem: sequence b's own rows and kv head, the
// same values as the full calls.
TEST(VarlenReference, RowsAndKvHeadMatchTheFullCalls) {
  const Problem p = batches()[2];  // GQA 8:2, causal, window
  std::mt19937_64 rng(kSeed);
  const auto q = randn(p.q_elems(), rng), k = randn(p.kv_elems(), rng),
             v = randn(p.kv_elems(), rng), dout = randn(p.q_elems(), rng);
  std::vector<double> o(q.size()), lse(static_cast<std::size_t>(p.lse_elems()));
  std::vector<double> dq(q.size()), dk(k.size()), dv(k.size());
  reference::forward(p, q.data(), k.data(), v.data(), o.data(), lse.data());
  reference::backward(p, q.data(), k.data(), v.data(), dout.data(), dq.data(), dk.data(),
                      dv.data());
  const int b = 2, h = 5, hk = 1, d = p.head_dim, g = p.group();
  const Problem s = p.sequence(b);
  const std::vector<int> rows = {0, 7, s.seq_q - 1};
  std::vector<double> orow(rows.size() * static_cast<std::size_t>(d)), lrow(rows.size());
  reference::forward_rows(p, q.data(), k.data(), v.data(), b, h, rows, orow.data(), lrow.data());
  for (std::size_t r = 0; r < rows.size(); ++r) {
    const std::int64_t t = p.q_start(b) + rows[r];
    EXPECT_EQ(lrow[r], lse[static_cast<std::size_t>(p.lse_start(b, h) + rows[r])]);
    for (int c = 0; c < d; ++c) {
      EXPECT_EQ(orow[r * static_cast<std::size_t>(d) + static_cast<std::size_t>(c)],
                o[static_cast<std::size_t>((t * p.heads_q + h) * d + c)]);
    }
  }
  std::vector<double> dqg(static_cast<std::size_t>(g) * s.seq_q * d),
      dkh(static_cast<std::size_t>(s.seq_kv) * d), dvh(dkh.size());
  reference::backward_kv_head(p, q.data(), k.data(), v.data(), dout.data(), b, hk, dqg.data(),
                              dkh.data(), dvh.data());
  for (int j = 0; j < s.seq_kv; ++j) {
    for (int c = 0; c < d; ++c) {
      const std::size_t at =
          static_cast<std::size_t>(((p.kv_start(b) + j) * p.heads_kv + hk) * d + c);
      EXPECT_EQ(dkh[static_cast<std::size_t>(j * d + c)], dk[at]);
      EXPECT_EQ(dvh[static_cast<std::size_t>(j * d + c)], dv[at]);
    }
  }
  for (int gi = 0; gi < g; ++gi) {
    for (int i = 0; i < s.seq_q; ++i) {
      const std::size_t at =
          static_cast<std::size_t>(((p.q_start(b) + i) * p.heads_q + hk * g + gi) * d);
      EXPECT_EQ(dqg[static_cast<std::size_t>((gi * s.seq_q + i) * d)], dq[at]);
    }
  }
}

// The CPU verification baseline on every batch above, each dtype and pass: the verification rule
// passes, and its relative error stays within the dtype's bound (as for dense problems).
TEST(VarlenNaive, PassesVerificationWithinDtypeBounds) {
  const Implementation* naive = Registry::instance().find("cpu.naive_3pass");
  ASSERT_NE(naive, nullptr);
  EXPECT_TRUE(naive->capabilities().varlen);
  for (DType t : {DType::f32, DType::f16, DType::bf16}) {
    const double bound = t == DType::f32 ? 1e-5 : t == DType::f16 ? 5e-3 : 4e-2;
    for (const Problem& p : batches(t)) {
      for (Pass pass : {Pass::fwd, Pass::bwd}) {
        ASSERT_TRUE(naive->supports(p, pass)) << naive->supports(p, pass).reason;
        const Verdict v = test::check_impl(*naive, p, pass, kSeed);
        EXPECT_TRUE(v.ok) << p.label() << " " << to_string(pass) << ": " << v.failure();
        for (const OutputReport& o : v.outputs) {
          EXPECT_GT(o.checked, 0) << p.label() << " " << o.name;
          EXPECT_LT(o.rel_l2, bound) << p.label() << " " << to_string(pass) << " " << o.name;
        }
      }
    }
  }
}

// cpu.flash_fwd and cpu.flash_bwd on every batch above, f32 and bf16, with their default tiles and
// with tiles small enough that each sequence spans several of them (and the longest sequence
// gives the others tiles past their ends).
TEST(VarlenFlash, ForwardAndBackwardPassVerification) {
  for (const char* name : {"cpu.flash_fwd", "cpu.flash_bwd"}) {
    const Implementation* impl = Registry::instance().find(name);
    ASSERT_NE(impl, nullptr);
    EXPECT_TRUE(impl->capabilities().varlen) << name;
    const Pass pass = impl->capabilities().forward ? Pass::fwd : Pass::bwd;
    for (DType t : {DType::f32, DType::bf16}) {
      for (const Problem& p : batches(t)) {
        for (const Options& o : {Options{}, Options{{"block_r", 16}, {"block_c", 24}}}) {
          const Verdict v = test::check_impl(*impl, p, pass, kSeed, VerifyMode::full, o);
          EXPECT_TRUE(v.ok) << name << " " << p.label() << " block_r "
                            << option_or(&o, "block_r", 0) << ": " << v.failure();
        }
      }
    }
  }
}

// An implementation without the flag SKIPs varlen problems with the reason, and only them.
TEST(VarlenCapability, UndeclaredMeansSkip) {
  const Implementation* online = Registry::instance().find("cpu.online_2pass");
  ASSERT_NE(online, nullptr);
  EXPECT_FALSE(online->capabilities().varlen);
  const Problem p = batches()[0];
  const Support s = online->supports(p, Pass::fwd);
  EXPECT_FALSE(s.ok);
  EXPECT_EQ(s.reason, "variable-length batches not supported");
  EXPECT_TRUE(online->supports(make_problem(4, 2, 2, 17, 40, 32, false), Pass::fwd).ok);
}

TEST(VarlenProblem, SizesLabelAndFlops) {
  const Problem p =
      varlen(make_problem(1, 4, 2, 1, 1, 64, true, DType::bf16), {5, 0, 17}, {9, 3, 17});
  EXPECT_EQ(p.batch, 3);
  EXPECT_EQ(p.seq_q, 17);
  EXPECT_EQ(p.seq_kv, 17);
  EXPECT_EQ(p.total_q(), 22);
  EXPECT_EQ(p.total_kv(), 29);
  EXPECT_EQ(p.q_elems(), 22 * 4 * 64);
  EXPECT_EQ(p.kv_elems(), 29 * 2 * 64);
  EXPECT_EQ(p.lse_elems(), 22 * 4);
  EXPECT_EQ(p.lse_start(2, 1), 1 * 22 + 5);
  EXPECT_EQ(validate(p), "");
  // Label: the dense fields (b = sequences, sq/skv = maxima), then the totals and a hash.
  const std::string l = p.label();
  EXPECT_EQ(l.rfind("b3_hq4_hkv2_sq17_skv17_d64_causal_bf16_varlen_q22_kv29_", 0), 0u) << l;
  EXPECT_EQ(l.size(),
            std::string("b3_hq4_hkv2_sq17_skv17_d64_causal_bf16_varlen_q22_kv29_").size() + 8);
  // Other lengths with the same totals and maxima get another label.
  EXPECT_NE(varlen(p, {0, 5, 17}, {9, 3, 17}).label(), l);
  EXPECT_NE(varlen(p, {5, 0, 17}, {3, 9, 17}).label(), l);
  // FLOPs: each sequence's own count (causal: 5x9 bottom-right sees 5*9 - 5*4/2 pairs... summed
  // here from the per-sequence dense problems, and the causal square by its convention).
  const double fl = make_problem(1, 4, 2, 5, 9, 64, true).flops_fwd() +
                    make_problem(1, 4, 2, 17, 17, 64, true).flops_fwd();  // 0 x 3 has none
  EXPECT_DOUBLE_EQ(p.flops_fwd(), fl);
  EXPECT_EQ(p.visible_pairs(), make_problem(1, 4, 2, 5, 9, 64, true).visible_pairs() +
                                   make_problem(1, 4, 2, 17, 17, 64, true).visible_pairs());
  // A dense problem: unchanged (no suffix, offsets b * seq, LSE [b, h, s]).
  const Problem dense = make_problem(2, 4, 2, 17, 33, 64, true, DType::bf16);
  EXPECT_FALSE(dense.varlen());
  EXPECT_EQ(dense.label(), "b2_hq4_hkv2_sq17_skv33_d64_causal_bf16");
  EXPECT_EQ(dense.q_start(1), 17);
  EXPECT_EQ(dense.kv_start(1), 33);
  EXPECT_EQ(dense.lse_start(1, 3), (1 * 4 + 3) * 17);
}

TEST(VarlenProblem, ValidationNamesTheFieldAndValue) {
  const Problem base = make_problem(1, 2, 2, 1, 1, 32, false);
  auto why = [&](std::vector<int> q, std::vector<int> kv) { return validate(varlen(base, q, kv)); };
  EXPECT_EQ(why({3, 0}, {0, 4}), "");
  EXPECT_EQ(why({3, -1}, {2, 4}), "seqlens_q[1] = -1: a sequence length must be >= 0");
  EXPECT_EQ(why({3, 1}, {2, -7}), "seqlens_kv[1] = -7: a sequence length must be >= 0");
  EXPECT_EQ(why({3, 1}, {2, 4, 5}),
            "seqlens_kv has 3 lengths, seqlens_q 2: one per sequence in each");
  EXPECT_EQ(why({0, 0}, {2, 4}), "seqlens_q: every length is 0 (a batch needs at least one query)");
  EXPECT_EQ(why({1, 0}, {0, 0}), "seqlens_kv: every length is 0 (a batch needs at least one key)");
  Problem one = base;
  one.seqlens_q = {3, 4};
  EXPECT_EQ(validate(one),
            "seqlens_kv = []: a varlen batch needs both lists (seqlens_q has 2 lengths)");
  Problem seq = varlen(base, {3, 4}, {5, 6});
  seq.seq_q = 5;
  EXPECT_EQ(validate(seq),
            "seq_q = 5: a varlen batch's seq_q is its longest sequence, max(seqlens_q) = 4");
  Problem b = varlen(base, {3, 4}, {5, 6});
  b.batch = 3;
  EXPECT_EQ(validate(b), "batch = 3: a varlen batch's is its number of sequences, 2");
  Problem big = varlen(base, {std::numeric_limits<int>::max(), 1}, {1, 1});
  EXPECT_NE(validate(big).find("seqlens_q: 2147483648 tokens in all"), std::string::npos)
      << validate(big);
}

// make_inputs: the packed tensors (totals, not batch * max), the same bytes for the same seed.
TEST(VarlenInputs, PackedAndDeterministic) {
  const Problem p = batches()[2];
  const CaseInputs a = make_inputs(p, kSeed), b = make_inputs(p, kSeed),
                   c = make_inputs(p, kSeed + 1);
  EXPECT_EQ(a.q.numel, p.total_q() * p.heads_q * p.head_dim);
  EXPECT_EQ(a.k.numel, p.total_kv() * p.heads_kv * p.head_dim);
  EXPECT_EQ(a.dout.numel, a.q.numel);
  EXPECT_EQ(a.q.bytes, b.q.bytes);
  EXPECT_EQ(a.v.bytes, b.v.bytes);
  EXPECT_NE(a.q.bytes, c.q.bytes);
  EXPECT_EQ(a.p.seqlens_q, p.seqlens_q);
}

// Results JSON: the lengths only for a varlen problem; the strict reader and the C API's problem
// reader read them back to the same problem.
TEST(VarlenResults, RoundTrip) {
  const Problem p = batches(DType::bf16)[4];
  const auto j = problem_to_json(p);
  ASSERT_TRUE(j.contains("seqlens_q"));
  EXPECT_EQ(j["seqlens_q"].get<std::vector<int>>(), p.seqlens_q);
  EXPECT_EQ(j["seqlens_kv"].get<std::vector<int>>(), p.seqlens_kv);
  const auto dense = problem_to_json(make_problem(2, 4, 2, 17, 33, 64, true));
  EXPECT_FALSE(dense.contains("seqlens_q"));
  EXPECT_FALSE(dense.contains("seqlens_kv"));

  ResultRow r;
  r.problem = p;
  r.case_label = p.label();
  r.impl = "cpu.naive_3pass";
  r.device = "cpu";
  r.status = Status::skip;
  r.reason = "x";
  ResultsFile f;
  f.context["config_hash"] = "0";
  f.rows = {r};
  const auto written = results_to_json(f);
  const ResultsFile back =
      parse_results(nlohmann::ordered_json::parse(written.dump()), "<written>");
  ASSERT_EQ(back.rows.size(), 1u);
  EXPECT_EQ(back.rows[0].problem.seqlens_q, p.seqlens_q);
  EXPECT_EQ(back.rows[0].problem.seqlens_kv, p.seqlens_kv);
  EXPECT_EQ(back.rows[0].problem.batch, p.batch);
  EXPECT_EQ(validate(back.rows[0].problem), "");
  EXPECT_EQ(results_to_json(back), written);

  const Problem c = problem_from_json(nlohmann::json::parse(j.dump()));
  EXPECT_EQ(c.seqlens_q, p.seqlens_q);
  EXPECT_EQ(c.seqlens_kv, p.seqlens_kv);
  EXPECT_EQ(c.seq_kv, p.seq_kv);
  auto refused = [](const std::string& text) {
    try {
      problem_from_json(nlohmann::json::parse(text));
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  const std::string head = R"({"batch": 2, "heads_q": 2, "heads_kv": 2, "seq_q": 5, "seq_kv": 6,
                               "head_dim": 32, "dtype": "f32", )";
  EXPECT_EQ(refused(head + R"("seqlens_q": [5, 0], "seqlens_kv": [6, 1]})"), "");
  EXPECT_EQ(refused(head + R"("seqlens_q": [5, -1], "seqlens_kv": [6, 1]})"),
            "problem.seqlens_q[1] = -1: must be a length >= 0");
  EXPECT_EQ(refused(head + R"("seqlens_q": 5, "seqlens_kv": [6, 1]})"),
            "problem.seqlens_q = 5: must be an array of lengths >= 0");
  EXPECT_EQ(
      refused(head + R"("seqlens_q": [4, 0], "seqlens_kv": [6, 1]})"),
      "problem: seq_q = 5: a varlen batch's seq_q is its longest sequence, max(seqlens_q) = 4");
}

}  // namespace
}  // namespace attnbench
