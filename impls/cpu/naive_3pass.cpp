// cpu.naive_3pass: textbook attention with the N x N matrices materialised, forward and backward.
// It is the verification baseline of the CPU (docs/architecture.md: "X_naive"), so it rounds every
// intermediate matrix to the problem's dtype, as a framework's unfused attention would.
//
// Forward, per (batch, query head):
//   pass 1: S = scale * Q K^T (soft-capped: softcap * tanh(S / softcap), the tanh kept, rounded,
//           for the backward), rounded to the dtype; masked entries -inf        -> S [Sq, Skv]
//   pass 2: P = softmax(S) row by row (max, sum of exp, divide), rounded;       -> P [Sq, Skv]
//           LSE = max + log(sum), float32, from S
//   pass 3: O = P V, float32 accumulation, rounded once to the dtype.
// Backward, per (batch, kv head), looping over the query heads of its GQA group so that dK and dV
// are summed by one thread (no atomics): recompute S and P as in the forward, then
//   D = rowsum(dO o O) (from the O input), dV += P^T dO, dP = dO V^T (rounded; overwrites S),
//   dS = P o (dP - D) (soft-capped: times 1 - tanh^2; rounded; overwrites dP),
//   dQ = scale * dS K, dK += scale * dS^T Q.
// Masks: causal and the sliding window (Problem::first_visible_key, first_invisible_key).
// Varlen (packed THD): each sequence is its own problem (Problem::sequence), its rows and keys
// found through q_start / kv_start and its LSE rows through lse_start; the loops below run over
// that sequence's lengths, so a zero-length sequence does no work (no rows, or rows that see no
// key: O = 0, LSE = -inf, dQ = 0) and writes exactly its own elements.
// Paged KV cache (forward only): K and V of the head are gathered through the block table into
// the float copies it makes anyway (kv_rows_as_float); the rest is the same.
// Passes over memory: each N x N matrix is written once and read once or twice per pass above.
// Extra memory per thread: S and P as seq_q x seq_kv in the dtype (the N^2 memory FlashAttention
// removes), K and V of one head as float, float row blocks of kRowBlock rows (and dK, dV float
// accumulators in the backward). Masked keys are skipped only where softmax would exponentiate
// them; the GEMMs run over the full matrices.
// Vectorisation: the GEMMs are Eigen's kernels on float row blocks (rows of S/P/dS converted
// from the dtype); softmax uses Eigen array expressions.
// Parallel over (batch, query head) forward and (batch, kv head) backward.
// Limits: none beyond the interface's (head_dim 1..256); memory grows as seq_q * seq_kv.
#include <cmath>

#include "cpu_common.hpp"

namespace attnbench::cpu {
namespace {

constexpr int kRowBlock = 64;  // query rows per GEMM block

struct Scratch {
  std::uint8_t* s;   // [Sq, Skv] dtype: S, then dP, then dS
  std::uint8_t* pr;  // [Sq, Skv] dtype: P
  std::uint8_t* t;   // [Sq, Skv] dtype: tanh(S / softcap) (soft-capping only)
  float* k;          // [Skv, d] K of the head as float (f16/bf16)
  float* v;          // [Skv, d]
  float* blk;        // [kRowBlock, Skv] float rows of S, P or dS
  float* blk2;       // [kRowBlock, Skv] float rows of dP
  float* qb;         // [kRowBlock, d]
  float* ob;         // [kRowBlock, d]
  float* dob;        // [kRowBlock, d]
  float* dk;         // [Skv, d] backward accumulators
  float* dv;         // [Skv, d]
  float* dsum;       // [Sq] D = rowsum(dO o O)
  Scratch(Carver& c, const Problem& p, bool backward) {
    const std::int64_t nn = std::int64_t{p.seq_q} * p.seq_kv * static_cast<std::int64_t>(dtype_size(p.dtype));
    const std::int64_t kvd = std::int64_t{p.seq_kv} * p.head_dim;
    const std::int64_t bd = std::int64_t{kRowBlock} * p.head_dim;
    const std::int64_t bn = std::int64_t{kRowBlock} * p.seq_kv;
    s = c.take<std::uint8_t>(nn);
    pr = c.take<std::uint8_t>(nn);
    t = p.softcap != 0 ? c.take<std::uint8_t>(nn) : nullptr;
    k = c.take<float>(kvd);
    v = c.take<float>(kvd);
    blk = c.take<float>(bn);
    qb = c.take<float>(bd);
    ob = c.take<float>(bd);
    blk2 = backward ? c.take<float>(bn) : nullptr;
    dob = backward ? c.take<float>(bd) : nullptr;
    dk = backward ? c.take<float>(kvd) : nullptr;
    dv = backward ? c.take<float>(kvd) : nullptr;
    dsum = backward ? c.take<float>(p.seq_q) : nullptr;
  }
};

std::size_t scratch_bytes(const Problem& p, bool backward) {
  Carver c;
  Scratch s(c, p, backward);
  return c.bytes();
}

// Element (i, 0) of an [Sq, Skv] dtype matrix in scratch.
void* nn_row(std::uint8_t* m, const Problem& p, int i) {
  return m + std::int64_t{i} * p.seq_kv * static_cast<std::int64_t>(dtype_size(p.dtype));
}

// Passes 1 and 2 for (sequence problem p, query head h), its first query token q0 in q: S and P
// in the dtype into s.s and s.pr; lse (nullable) gets the row's log-sum-exp.
// q: [tokens, Hq, d]; k: [Skv, d] float of kv head h/group.
void scores_and_probs(const Problem& p, const void* q, FloatTile k, std::int64_t q0, int h,
                      const Scratch& s, float* lse) {
  const int d = p.head_dim, n = p.seq_kv;
  const DType dt = p.dtype;
  const std::int64_t q_stride = std::int64_t{p.heads_q} * d;
  const float scale = static_cast<float>(p.effective_scale());

  const float cap = static_cast<float>(p.softcap);
  // Row i sees keys [lo, hi) of the whole row (empty when hi == lo).
  auto seen = [&](int i) { return p.visible_in(i, 0, n); };

  // Pass 1: S = scale * Q K^T (soft-capped), masked entries -inf.
  for (int i0 = 0; i0 < p.seq_q; i0 += kRowBlock) {
    const int rb = std::min(kRowBlock, p.seq_q - i0);
    const FloatTile qb =
        rows_as_float(q, dt, ((q0 + i0) * p.heads_q + h) * d, q_stride, rb, d, s.qb);
    gemm(mat(s.blk, rb, n, n), cmat(qb, rb, d), cmat(k, n, d).transpose(), false);
    for (int r = 0; r < rb; ++r) {
      const auto [lo, hi] = seen(i0 + r);
      auto x = row_array(s.blk, n, r, n);
      x *= scale;
      if (cap != 0) {
        x = (x / cap).tanh();
        from_float(s.blk + std::int64_t{r} * n, n, dt, nn_row(s.t, p, i0 + r));
        x *= cap;
      }
      x.head(lo).setConstant(kNegInf);
      x.tail(n - hi).setConstant(kNegInf);
      from_float(s.blk + std::int64_t{r} * n, n, dt, nn_row(s.s, p, i0 + r));
    }
  }

  // Pass 2: safe softmax of each row of S.
  auto row = row_array(s.blk, n, 0, n);
  for (int i = 0; i < p.seq_q; ++i) {
    to_float(nn_row(s.s, p, i), n, dt, s.blk);
    const auto [lo, hi] = seen(i);  // S[i, :lo] and S[i, hi:] are -inf
    float lse_i = kNegInf;
    if (hi > lo) {
      auto vis = row.segment(lo, hi - lo);
      const float mx = vis.maxCoeff();
      vis = (vis - mx).exp();
      const float sum = vis.sum();
      vis /= sum;
      lse_i = mx + std::log(sum);
    }
    row.head(lo).setZero();
    row.tail(n - hi).setZero();
    from_float(s.blk, n, dt, nn_row(s.pr, p, i));
    if (lse) lse[i] = lse_i;
  }
}

// Forward of (batch or sequence b, query head h). q, o: [B, Sq, Hq, d]; k, v: [B, Skv, Hkv, d]
// (varlen: [total, H, d]).
void forward_head(const FwdArgs& a, int b, int h, const Scratch& s) {
  Problem seq;
  const Problem& p = problem_of(a.p, b, seq);  // its lengths and masks; offsets from a.p
  const std::int64_t q0 = a.p.q_start(b);
  const int d = p.head_dim, n = p.seq_kv;
  const DType dt = p.dtype;
  const std::int64_t q_stride = std::int64_t{p.heads_q} * d;
  const FloatTile k = kv_rows_as_float(a.p, a.k, b, p.kv_head(h), 0, n, s.k);
  const FloatTile v = kv_rows_as_float(a.p, a.v, b, p.kv_head(h), 0, n, s.v);

  scores_and_probs(p, a.q, k, q0, h, s, a.lse + a.p.lse_start(b, h));

  // Pass 3: O = P V.
  for (int i0 = 0; i0 < p.seq_q; i0 += kRowBlock) {
    const int rb = std::min(kRowBlock, p.seq_q - i0);
    for (int r = 0; r < rb; ++r) to_float(nn_row(s.pr, p, i0 + r), n, dt, s.blk + std::int64_t{r} * n);
    gemm(mat(s.ob, rb, d, d), cmat(s.blk, rb, n, n), cmat(v, n, d), false);
    store_rows(s.ob, d, rb, d, a.o, dt, ((q0 + i0) * p.heads_q + h) * d, q_stride);
  }
}

// Backward of (batch or sequence b, kv head hk) and the query heads of its group.
// q, o, dout, dq: [B, Sq, Hq, d]; k, v, dk, dv: [B, Skv, Hkv, d] (varlen: [total, H, d]).
void backward_kv_head(const BwdArgs& a, int b, int hk, const Scratch& s) {
  Problem seq;
  const Problem& p = problem_of(a.p, b, seq);  // its lengths and masks; offsets from a.p
  const std::int64_t q0 = a.p.q_start(b);
  const int d = p.head_dim, n = p.seq_kv;
  const DType dt = p.dtype;
  const std::int64_t q_stride = std::int64_t{p.heads_q} * d, kv_stride = std::int64_t{p.heads_kv} * d;
  const std::int64_t kv_first = (a.p.kv_start(b) * p.heads_kv + hk) * d;
  const FloatTile k = rows_as_float(a.k, dt, kv_first, kv_stride, n, d, s.k);
  const FloatTile v = rows_as_float(a.v, dt, kv_first, kv_stride, n, d, s.v);
  const float scale = static_cast<float>(p.effective_scale());
  MatMap dk = mat(s.dk, n, d, d), dv = mat(s.dv, n, d, d);
  dk.setZero();
  dv.setZero();

  for (int h = hk * p.group(); h < (hk + 1) * p.group(); ++h) {
    auto q_first = [&](int i0) { return ((q0 + i0) * p.heads_q + h) * d; };
    scores_and_probs(p, a.q, k, q0, h, s, nullptr);

    // D = rowsum(dO o O).
    for (int i0 = 0; i0 < p.seq_q; i0 += kRowBlock) {
      const int rb = std::min(kRowBlock, p.seq_q - i0);
      const FloatTile dob = rows_as_float(a.dout, dt, q_first(i0), q_stride, rb, d, s.dob);
      const FloatTile ob = rows_as_float(a.o, dt, q_first(i0), q_stride, rb, d, s.ob);
      for (int r = 0; r < rb; ++r) {
        s.dsum[i0 + r] = cmat(dob, rb, d).row(r).dot(cmat(ob, rb, d).row(r));
      }
    }

    // dV += P^T dO;  dP = dO V^T (rounded, into the S buffer).
    for (int i0 = 0; i0 < p.seq_q; i0 += kRowBlock) {
      const int rb = std::min(kRowBlock, p.seq_q - i0);
      for (int r = 0; r < rb; ++r) to_float(nn_row(s.pr, p, i0 + r), n, dt, s.blk + std::int64_t{r} * n);
      const FloatTile dob = rows_as_float(a.dout, dt, q_first(i0), q_stride, rb, d, s.dob);
      gemm(dv, cmat(s.blk, rb, n, n).transpose(), cmat(dob, rb, d), true);
      gemm(mat(s.blk2, rb, n, n), cmat(dob, rb, d), cmat(v, n, d).transpose(), false);
      for (int r = 0; r < rb; ++r) from_float(s.blk2 + std::int64_t{r} * n, n, dt, nn_row(s.s, p, i0 + r));
    }

    // dS = P o (dP - D) (soft-capped: times 1 - tanh^2), rounded, over dP.
    for (int i = 0; i < p.seq_q; ++i) {
      to_float(nn_row(s.pr, p, i), n, dt, s.blk);
      to_float(nn_row(s.s, p, i), n, dt, s.blk2);
      row_array(s.blk2, n, 0, n) = row_array(s.blk, n, 0, n) * (row_array(s.blk2, n, 0, n) - s.dsum[i]);
      if (s.t) {
        to_float(nn_row(s.t, p, i), n, dt, s.blk);
        row_array(s.blk2, n, 0, n) *= 1.0f - row_array(s.blk, n, 0, n).square();
      }
      from_float(s.blk2, n, dt, nn_row(s.s, p, i));
    }

    // dQ = scale * dS K;  dK += scale * dS^T Q.
    for (int i0 = 0; i0 < p.seq_q; i0 += kRowBlock) {
      const int rb = std::min(kRowBlock, p.seq_q - i0);
      for (int r = 0; r < rb; ++r) to_float(nn_row(s.s, p, i0 + r), n, dt, s.blk + std::int64_t{r} * n);
      MatMap dq = mat(s.ob, rb, d, d);
      gemm(dq, cmat(s.blk, rb, n, n), cmat(k, n, d), false);
      dq *= scale;
      store_rows(s.ob, d, rb, d, a.dq, dt, q_first(i0), q_stride);
      const FloatTile qb = rows_as_float(a.q, dt, q_first(i0), q_stride, rb, d, s.qb);
      gemm(dk, cmat(s.blk, rb, n, n).transpose(), cmat(qb, rb, d), true);
    }
  }
  dk *= scale;  // dK = scale * sum over the group of dS^T Q
  store_rows(s.dk, d, n, d, a.dk, dt, kv_first, kv_stride);
  store_rows(s.dv, d, n, d, a.dv, dt, kv_first, kv_stride);
}

class NaiveThreePass final : public Implementation {
 public:
  std::string name() const override { return "cpu.naive_3pass"; }
  Device device() const override { return Device::cpu; }
  std::string summary() const override {
    return "textbook attention: S, P materialised in the dtype (N^2 memory); forward and backward";
  }
  Capabilities capabilities() const override {
    Capabilities c;
    c.backward = true;
    c.window = true;
    c.softcap = true;
    c.varlen = true;
    c.paged = true;  // forward
    c.scores_in_dtype = true;  // S and P in the dtype
    return c;
  }
  std::size_t workspace_bytes(const Problem& p, Pass pass, const Options&) const override {
    return workspace_for(0, scratch_bytes(p, pass != Pass::fwd));
  }

  void forward(const FwdArgs& a) const override {
    const Problem& p = a.p;
    const std::size_t per_thread = scratch_bytes(p, false);
    const int nthreads = threads_for(a.workspace_bytes, 0, per_thread, "cpu.naive_3pass");
    const int tasks = p.batch * p.heads_q;
#pragma omp parallel num_threads(nthreads)
    {
      Carver c(thread_scratch(a.workspace, 0, per_thread, omp_get_thread_num()));
      const Scratch s(c, p, false);
#pragma omp for schedule(dynamic, 1)
      for (int t = 0; t < tasks; ++t) forward_head(a, t / p.heads_q, t % p.heads_q, s);
    }
  }

  void backward(const BwdArgs& a) const override {
    const Problem& p = a.p;
    const std::size_t per_thread = scratch_bytes(p, true);
    const int nthreads = threads_for(a.workspace_bytes, 0, per_thread, "cpu.naive_3pass");
    const int tasks = p.batch * p.heads_kv;
#pragma omp parallel num_threads(nthreads)
    {
      Carver c(thread_scratch(a.workspace, 0, per_thread, omp_get_thread_num()));
      const Scratch s(c, p, true);
#pragma omp for schedule(dynamic, 1)
      for (int t = 0; t < tasks; ++t) backward_kv_head(a, t / p.heads_kv, t % p.heads_kv, s);
    }
  }
};

}  // namespace
}  // namespace attnbench::cpu

ATTNBENCH_REGISTER(attnbench::cpu::NaiveThreePass)
