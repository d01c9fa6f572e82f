// The CPU-checkable arithmetic of cuda.ring_attention (impls/cuda/ring/ring_plan.hpp), against the
// float64 reference: the sequence split (contiguous, zig-zag), the ring schedule, the causal mask
// of each block in the local kernels' terms, and the LSE merge of partial results. The ring is
// simulated on the CPU: every rank's blocks are computed by the reference itself (a sub-problem
// per block, causal where the block is), merged as the CUDA code merges them, and compared with
// the reference of the whole problem. The backward decomposition (each block's gradients from the
// global O and LSE, summed over the ring) is checked the same way. No GPU, no NCCL.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "attnbench/reference.hpp"
#include "ring/ring_plan.hpp"
#include "test_util.hpp"

namespace {

using namespace attnbench;
using attnbench::ring::BlockMask;
using attnbench::ring::Span;

std::vector<double> randn(std::size_t n, unsigned seed) {
  std::mt19937_64 g(seed);
  std::normal_distribution<double> d(0, 1);
  std::vector<double> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

// Rows [s.begin, s.end) of a [b, seq, h, d] tensor, as [b, s.size(), h, d].
std::vector<double> rows_of(const std::vector<double>& t, int b, int seq, int h, int d, Span s) {
  std::vector<double> out;
  out.reserve(static_cast<std::size_t>(b) * s.size() * h * d);
  for (int ib = 0; ib < b; ++ib) {
    const auto first = t.begin() + (static_cast<std::ptrdiff_t>(ib) * seq + s.begin) * h * d;
    out.insert(out.end(), first, first + static_cast<std::ptrdiff_t>(s.size()) * h * d);
  }
  return out;
}

struct RingCase {
  int ranks;
  bool zigzag;
  bool causal;
  int b, hq, hkv, sq, skv, d;
};

// O and LSE of the whole problem, computed as the ring computes them.
void ring_forward(const RingCase& c, const std::vector<double>& q, const std::vector<double>& k,
                  const std::vector<double>& v, std::vector<double>& o, std::vector<double>& lse) {
  const Problem full = test::make_problem(c.b, c.hq, c.hkv, c.sq, c.skv, c.d, c.causal);
  const auto qs = ring::split_sequence(c.sq, c.ranks, c.zigzag);
  const auto ks = ring::split_sequence(c.skv, c.ranks, c.zigzag);
  o.assign(static_cast<std::size_t>(full.q_elems()), 0.0);
  lse.assign(static_cast<std::size_t>(full.lse_elems()), -std::numeric_limits<double>::infinity());
  for (int r = 0; r < c.ranks; ++r) {
    for (const Span& qspan : qs[r]) {
      std::vector<double> qa = rows_of(q, c.b, c.sq, c.hq, c.d, qspan);
      for (int step = 0; step < c.ranks; ++step) {
        const int owner = ring::kv_owner(r, step, c.ranks);
        for (const Span& kspan : ks[owner]) {
          const BlockMask m = ring::block_mask(c.causal, c.sq, c.skv, qspan, kspan);
          if (m.kind == BlockMask::none) continue;
          ASSERT_TRUE(m.local_kernel_can_run(qspan, kspan))
              << "rank " << r << " q [" << qspan.begin << "," << qspan.end << ") k [" << kspan.begin
              << "," << kspan.end << ") offset " << m.offset;
          Problem sub = full;
          sub.seq_q = qspan.size();
          sub.seq_kv = kspan.size();
          sub.causal = m.kind == BlockMask::causal;
          sub.scale = full.effective_scale();
          std::vector<double> kb = rows_of(k, c.b, c.skv, c.hkv, c.d, kspan);
          std::vector<double> vb = rows_of(v, c.b, c.skv, c.hkv, c.d, kspan);
          std::vector<double> op(static_cast<std::size_t>(sub.q_elems()));
          std::vector<double> lp(static_cast<std::size_t>(sub.lse_elems()));
          reference::forward(sub, qa.data(), kb.data(), vb.data(), op.data(), lp.data());
          for (int ib = 0; ib < c.b; ++ib) {
            for (int h = 0; h < c.hq; ++h) {
              for (int i = 0; i < qspan.size(); ++i) {
                const int gi = qspan.begin + i;
                double* orow = &o[((static_cast<std::size_t>(ib) * c.sq + gi) * c.hq + h) * c.d];
                double& l = lse[(static_cast<std::size_t>(ib) * c.hq + h) * c.sq + gi];
                const double* prow = &op[((static_cast<std::size_t>(ib) * qspan.size() + i) * c.hq + h) * c.d];
                const double pl = lp[(static_cast<std::size_t>(ib) * c.hq + h) * qspan.size() + i];
                ring::merge_row(c.d, orow, l, prow, pl);
              }
            }
          }
        }
      }
    }
  }
}

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  EXPECT_EQ(a.size(), b.size());
  double m = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::isinf(a[i]) || std::isinf(b[i])) {
      EXPECT_EQ(a[i], b[i]) << "at " << i;
      continue;
    }
    m = std::max(m, std::abs(a[i] - b[i]));
  }
  return m;
}

class RingForward : public ::testing::TestWithParam<RingCase> {};

TEST_P(RingForward, MergedBlocksEqualTheReference) {
  const RingCase c = GetParam();
  const Problem full = test::make_problem(c.b, c.hq, c.hkv, c.sq, c.skv, c.d, c.causal);
  const auto q = randn(static_cast<std::size_t>(full.q_elems()), 1);
  const auto k = randn(static_cast<std::size_t>(full.kv_elems()), 2);
  const auto v = randn(static_cast<std::size_t>(full.kv_elems()), 3);
  std::vector<double> o_ref(static_cast<std::size_t>(full.q_elems()));
  std::vector<double> lse_ref(static_cast<std::size_t>(full.lse_elems()));
  reference::forward(full, q.data(), k.data(), v.data(), o_ref.data(), lse_ref.data());
  std::vector<double> o, lse;
  ring_forward(c, q, k, v, o, lse);
  EXPECT_LT(max_abs_diff(o, o_ref), 1e-12);
  EXPECT_LT(max_abs_diff(lse, lse_ref), 1e-12);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, RingForward,
    ::testing::Values(RingCase{1, false, false, 1, 2, 2, 16, 16, 8},   // one rank: the local call
                      RingCase{1, true, true, 1, 2, 1, 17, 17, 8},     // one rank, zig-zag causal
                      RingCase{2, false, false, 2, 2, 1, 33, 20, 8},   // seq_q != seq_kv
                      RingCase{2, false, true, 1, 2, 2, 32, 32, 8},    // contiguous causal
                      RingCase{2, true, true, 2, 4, 2, 32, 32, 16},    // zig-zag causal, GQA
                      RingCase{3, true, true, 1, 2, 1, 37, 37, 8},     // uneven chunks
                      RingCase{4, true, false, 1, 1, 1, 50, 50, 4},    // zig-zag, not causal
                      RingCase{4, true, true, 1, 3, 1, 8, 8, 8},       // one row per chunk
                      RingCase{4, true, true, 1, 1, 1, 5, 5, 8}));     // empty chunks

TEST(RingPlan, SplitCoversTheSequenceOnce) {
  for (int seq : {1, 7, 64, 1000}) {
    for (int ranks : {1, 2, 3, 8}) {
      for (bool zz : {false, true}) {
        std::vector<int> seen(static_cast<std::size_t>(seq), 0);
        for (const auto& spans : ring::split_sequence(seq, ranks, zz)) {
          ASSERT_EQ(spans.size(), zz ? 2u : 1u);
          for (const Span& s : spans) {
            for (int i = s.begin; i < s.end; ++i) ++seen[i];
          }
        }
        for (int i = 0; i < seq; ++i) ASSERT_EQ(seen[i], 1) << seq << " " << ranks << " " << zz;
      }
    }
  }
  EXPECT_THROW(ring::split_sequence(8, 0, true), std::invalid_argument);
}

TEST(RingPlan, ZigZagBalancesCausalWork) {
  const int seq = 4096;
  for (int ranks : {2, 4, 8}) {
    for (bool zz : {false, true}) {
      const auto spans = ring::split_sequence(seq, ranks, zz);
      std::vector<long long> work(static_cast<std::size_t>(ranks), 0);
      long long total = 0;
      for (int r = 0; r < ranks; ++r) {
        for (const Span& qs : spans[r]) {
          for (int o = 0; o < ranks; ++o) {
            for (const Span& ks : spans[o]) {
              work[r] += ring::block_pairs(ring::block_mask(true, seq, seq, qs, ks), qs, ks);
            }
          }
        }
        total += work[r];
      }
      EXPECT_EQ(total, static_cast<long long>(seq) * (seq + 1) / 2);
      const auto [lo, hi] = std::minmax_element(work.begin(), work.end());
      if (zz) {
        EXPECT_EQ(*lo, *hi) << ranks << " ranks";  // 4096 divides into 2N equal chunks
      } else {
        EXPECT_GT(*hi, 2 * *lo) << ranks << " ranks";  // the last rank has most of the work
      }
    }
  }
}

TEST(RingPlan, ScheduleVisitsEveryOwnerOnce) {
  for (int ranks : {1, 2, 5}) {
    for (int r = 0; r < ranks; ++r) {
      std::vector<int> seen(static_cast<std::size_t>(ranks), 0);
      for (int s = 0; s < ranks; ++s) {
        ++seen[ring::kv_owner(r, s, ranks)];
        if (s + 1 < ranks) {
          // What r holds at s+1 is what its receive peer held at s.
          EXPECT_EQ(ring::kv_owner(r, s + 1, ranks), ring::kv_owner(ring::recv_peer(r, ranks), s, ranks));
        }
      }
      for (int o = 0; o < ranks; ++o) EXPECT_EQ(seen[o], 1);
      EXPECT_EQ(ring::kv_owner(r, 0, ranks), r);
      EXPECT_EQ(ring::recv_peer(ring::send_peer(r, ranks), ranks), r);
    }
  }
}

TEST(RingPlan, BlockMaskKinds) {
  // seq 8 split in 4 chunks of 2: q chunk 2 = [4,6).
  const Span q{4, 6};
  EXPECT_EQ(ring::block_mask(true, 8, 8, q, Span{0, 2}).kind, BlockMask::full);
  EXPECT_EQ(ring::block_mask(true, 8, 8, q, Span{6, 8}).kind, BlockMask::none);
  const BlockMask diag = ring::block_mask(true, 8, 8, q, q);
  EXPECT_EQ(diag.kind, BlockMask::causal);
  EXPECT_EQ(diag.offset, 0);
  EXPECT_TRUE(diag.local_kernel_can_run(q, q));
  EXPECT_EQ(ring::block_pairs(diag, q, q), 3);
  // A block cut across the diagonal unevenly: not a bottom-right mask.
  const BlockMask odd = ring::block_mask(true, 8, 8, Span{4, 6}, Span{3, 8});
  EXPECT_EQ(odd.kind, BlockMask::causal);
  EXPECT_FALSE(odd.local_kernel_can_run(Span{4, 6}, Span{3, 8}));
  EXPECT_EQ(ring::block_mask(false, 8, 8, q, Span{6, 8}).kind, BlockMask::full);
  EXPECT_EQ(ring::block_mask(true, 8, 8, q, Span{2, 2}).kind, BlockMask::none);  // empty chunk
}

TEST(RingPlan, LseMergeEdgeCases) {
  const double ninf = -std::numeric_limits<double>::infinity();
  auto w = ring::lse_merge(ninf, ninf);
  EXPECT_EQ(w.lse, ninf);
  EXPECT_EQ(w.a, 0);
  EXPECT_EQ(w.b, 0);
  w = ring::lse_merge(ninf, 2.0);
  EXPECT_EQ(w.lse, 2.0);
  EXPECT_EQ(w.b, 1);
  w = ring::lse_merge(3.0, ninf);
  EXPECT_EQ(w.a, 1);
  // Large LSEs (outlier inputs): no overflow, weights sum to one.
  w = ring::lse_merge(800.0, 801.0);
  EXPECT_NEAR(w.lse, 801.0 + std::log1p(std::exp(-1.0)), 1e-12);
  EXPECT_NEAR(w.a + w.b, 1.0, 1e-15);
  const auto wf = ring::lse_merge(80.0f, 95.0f);
  EXPECT_NEAR(wf.a + wf.b, 1.0f, 1e-6f);
}

// ---- Backward: each block's gradients from the global O and LSE -----------------------------------
// What the local backward kernels compute for one block when given the full problem's O and LSE
// (P = exp(scale S - LSE), D = rowsum(dO * O)): written out here in float64, the same formulas.
void block_backward(const Problem& full, const std::vector<double>& q, const std::vector<double>& k,
                    const std::vector<double>& v, const std::vector<double>& o,
                    const std::vector<double>& lse, const std::vector<double>& dout, Span qs, Span ks,
                    const BlockMask& m, std::vector<double>& dq, std::vector<double>& dk,
                    std::vector<double>& dv) {
  const int d = full.head_dim, hq = full.heads_q, hkv = full.heads_kv;
  const double scale = full.effective_scale();
  for (int b = 0; b < full.batch; ++b) {
    for (int h = 0; h < hq; ++h) {
      const int hk = full.kv_head(h);
      for (int i = 0; i < qs.size(); ++i) {
        const int gi = qs.begin + i;
        const std::size_t qo = ((static_cast<std::size_t>(b) * full.seq_q + gi) * hq + h) * d;
        const double l = lse[(static_cast<std::size_t>(b) * hq + h) * full.seq_q + gi];
        double D = 0;
        for (int c = 0; c < d; ++c) D += dout[qo + c] * o[qo + c];
        for (int j = 0; j < ks.size(); ++j) {
          if (m.kind == BlockMask::causal && j > i + m.offset) continue;
          const int gj = ks.begin + j;
          const std::size_t ko = ((static_cast<std::size_t>(b) * full.seq_kv + gj) * hkv + hk) * d;
          double s = 0, dp = 0;
          for (int c = 0; c < d; ++c) {
            s += q[qo + c] * k[ko + c];
            dp += dout[qo + c] * v[ko + c];
          }
          const double p = std::exp(scale * s - l);
          const double ds = p * (dp - D);
          for (int c = 0; c < d; ++c) {
            dv[ko + c] += p * dout[qo + c];
            dq[qo + c] += scale * ds * k[ko + c];
            dk[ko + c] += scale * ds * q[qo + c];
          }
        }
      }
    }
  }
}

TEST(RingBackward, BlockGradientsSumToTheReference) {
  for (const RingCase& c : {RingCase{1, true, true, 1, 2, 1, 12, 12, 8}, RingCase{3, true, true, 1, 4, 2, 30, 30, 8},
                            RingCase{2, false, false, 2, 2, 2, 17, 9, 8}, RingCase{4, true, true, 1, 2, 2, 19, 19, 8}}) {
    const Problem full = test::make_problem(c.b, c.hq, c.hkv, c.sq, c.skv, c.d, c.causal);
    const auto q = randn(static_cast<std::size_t>(full.q_elems()), 11);
    const auto k = randn(static_cast<std::size_t>(full.kv_elems()), 12);
    const auto v = randn(static_cast<std::size_t>(full.kv_elems()), 13);
    const auto dout = randn(static_cast<std::size_t>(full.q_elems()), 14);
    std::vector<double> o, lse;
    ring_forward(c, q, k, v, o, lse);
    std::vector<double> dq(q.size(), 0), dk(k.size(), 0), dv(v.size(), 0);
    const auto qsp = ring::split_sequence(c.sq, c.ranks, c.zigzag);
    const auto ksp = ring::split_sequence(c.skv, c.ranks, c.zigzag);
    for (int r = 0; r < c.ranks; ++r) {
      for (int step = 0; step < c.ranks; ++step) {
        for (const Span& qs : qsp[r]) {
          for (const Span& ks : ksp[ring::kv_owner(r, step, c.ranks)]) {
            const BlockMask m = ring::block_mask(c.causal, c.sq, c.skv, qs, ks);
            if (m.kind != BlockMask::none) block_backward(full, q, k, v, o, lse, dout, qs, ks, m, dq, dk, dv);
          }
        }
      }
    }
    std::vector<double> rdq(q.size()), rdk(k.size()), rdv(v.size());
    reference::backward(full, q.data(), k.data(), v.data(), dout.data(), rdq.data(), rdk.data(), rdv.data());
    EXPECT_LT(max_abs_diff(dq, rdq), 1e-10) << c.ranks << " ranks";
    EXPECT_LT(max_abs_diff(dk, rdk), 1e-10) << c.ranks << " ranks";
    EXPECT_LT(max_abs_diff(dv, rdv), 1e-10) << c.ranks << " ranks";
  }
}

}  // namespace
