// cpu.online_2pass: attention with the online softmax of Milakov & Gimelshein (2018), two passes
// over the keys, no N x N matrix.
//
// Algorithm, per query row i (rows are processed in blocks of kRows so that a key tile read
// from memory serves many rows; each row's arithmetic is exactly the per-row algorithm):
//   pass 1: for each key j: s = scale * q_i . k_j;  m' = max(m, s);  l = l * exp(m - m') + exp(s - m')
//           (in tiles of kCols keys: one rescale of l per tile, when the tile raises the max)
//   pass 2: for each key j: recompute s;  o_i += exp(s - m) / l * v_j
//   LSE = m + log(l). A row that sees no key gets O = 0, LSE = -inf.
// Unlike FlashAttention the output is never rescaled (m and l are final before pass 2), at the
// price of computing Q K^T twice: 6 * d flops per (query, key) pair instead of 4 * d.
// Passes over memory: K twice, V once (per row block, mostly from cache), Q and O once.
// Causal: keys past a row's last visible key are never scored; fully masked tiles are skipped.
// Extra memory: m and l for the rows of a block, plus float tiles (Q, K, V, S, O): O(tile) per
// thread, never seq_q x seq_kv.
// Vectorisation: GEMMs are Eigen's kernels; exp/max/sum are Eigen array expressions.
// Parallel over (row block, batch, head). Limits: forward only; head_dim 1..256.
#include <cmath>

#include "cpu_common.hpp"

namespace attnbench::cpu {
namespace {

// Blocks as cpu.flash_fwd's default tiles (measured there); 64 x 128 was ~10% slower here.
constexpr int kRows = 128;  // query rows per block
constexpr int kCols = 256;  // keys per tile

struct Scratch {
  float* q;  // [kRows, d]
  float* k;  // [kCols, d]
  float* v;  // [kCols, d]
  float* s;  // [kRows, kCols]
  float* o;  // [kRows, d]
  float* m;  // [kRows] row max (final after pass 1)
  float* l;  // [kRows] row sum (final after pass 1)
  Scratch(Carver& c, int d)
      : q(c.take<float>(std::int64_t{kRows} * d)),
        k(c.take<float>(std::int64_t{kCols} * d)),
        v(c.take<float>(std::int64_t{kCols} * d)),
        s(c.take<float>(std::int64_t{kRows} * kCols)),
        o(c.take<float>(std::int64_t{kRows} * d)),
        m(c.take<float>(kRows)),
        l(c.take<float>(kRows)) {}
};

std::size_t scratch_bytes(int d) {
  Carver c;
  Scratch s(c, d);
  return c.bytes();
}

// Rows [i0, i0 + kRows) of (batch b, query head h).
// q, o: [B, Sq, Hq, d]; k, v: [B, Skv, Hkv, d]; lse: [B, Hq, Sq].
void forward_rows(const FwdArgs& a, int b, int h, int i0, const Scratch& s) {
  const Problem& p = a.p;
  const int d = p.head_dim;
  const DType dt = p.dtype;
  const int br = std::min(kRows, p.seq_q - i0);
  const std::int64_t q_stride = std::int64_t{p.heads_q} * d, kv_stride = std::int64_t{p.heads_kv} * d;
  const std::int64_t q_first = ((std::int64_t{b} * p.seq_q + i0) * p.heads_q + h) * d;
  const FloatTile q = rows_as_float(a.q, dt, q_first, q_stride, br, d, s.q);
  const float scale = static_cast<float>(p.effective_scale());
  const int kv_end = p.first_invisible_key(i0 + br - 1);
  auto kv_first = [&](int j0) { return ((std::int64_t{b} * p.seq_kv + j0) * p.heads_kv + p.kv_head(h)) * d; };

  // Pass 1: softmax statistics.
  std::fill(s.m, s.m + br, kNegInf);
  std::fill(s.l, s.l + br, 0.0f);
  for (int j0 = 0; j0 < kv_end; j0 += kCols) {
    const int bc = std::min(kCols, kv_end - j0);
    const FloatTile k = rows_as_float(a.k, dt, kv_first(j0), kv_stride, bc, d, s.k);
    gemm(mat(s.s, br, bc, bc), cmat(q, br, d), cmat(k, bc, d).transpose(), false);  // scaled below
    for (int r = 0; r < br; ++r) {
      const int nv = p.visible_in(i0 + r, j0, bc).hi;  // a prefix: no window is declared here
      if (nv == 0) continue;
      auto vis = row_array(s.s, bc, r, nv);
      // Scaled before the max (and in pass 2 before the exp), so that the max score's exponent
      // is exactly 0; see cpu.flash_fwd for why scaling inside the exp overflows at large
      // scales. -inf - -inf and inf - inf are kept out of the rescale as there.
      vis *= scale;
      const float m_new = std::max(s.m[r], vis.maxCoeff());
      const float m_use = m_new == kNegInf ? 0.0f : m_new;
      const float corr = s.m[r] == m_new ? 1.0f : std::exp(s.m[r] - m_use);
      s.l[r] = s.l[r] * corr + (vis - m_use).exp().sum();
      s.m[r] = m_new;
    }
  }

  // Pass 2: normalised probabilities times V.
  MatMap o_acc = mat(s.o, br, d, d);
  o_acc.setZero();
  for (int j0 = 0; j0 < kv_end; j0 += kCols) {
    const int bc = std::min(kCols, kv_end - j0);
    const FloatTile k = rows_as_float(a.k, dt, kv_first(j0), kv_stride, bc, d, s.k);
    const FloatTile v = rows_as_float(a.v, dt, kv_first(j0), kv_stride, bc, d, s.v);
    MatMap sc = mat(s.s, br, bc, bc);
    gemm(sc, cmat(q, br, d), cmat(k, bc, d).transpose(), false);
    for (int r = 0; r < br; ++r) {
      const int nv = p.visible_in(i0 + r, j0, bc).hi;
      auto row = row_array(s.s, bc, r, bc);
      if (nv > 0 && s.l[r] > 0) {  // l = 0: all visible scores were -inf, the row sees nothing
        row.head(nv) *= scale;  // the same scaled scores as pass 1, bit for bit
        row.head(nv) = (row.head(nv) - s.m[r]).exp() / s.l[r];
      }
      row.tail(s.l[r] > 0 ? bc - nv : bc).setZero();
    }
    gemm(o_acc, sc, cmat(v, bc, d), true);
  }

  float* lse = a.lse + (std::int64_t{b} * p.heads_q + h) * p.seq_q + i0;
  for (int r = 0; r < br; ++r) lse[r] = s.l[r] > 0 ? s.m[r] + std::log(s.l[r]) : kNegInf;
  store_rows(s.o, d, br, d, a.o, dt, q_first, q_stride);
}

class OnlineTwoPass final : public Implementation {
 public:
  std::string name() const override { return "cpu.online_2pass"; }
  Device device() const override { return Device::cpu; }
  std::string summary() const override {
    return "online softmax, 2 passes over K (statistics, then output), O(seq) memory";
  }
  Capabilities capabilities() const override { return {}; }
  std::size_t workspace_bytes(const Problem& p, Pass, const Options&) const override {
    return workspace_for(0, scratch_bytes(p.head_dim));
  }

  void forward(const FwdArgs& a) const override {
    const Problem& p = a.p;
    const std::size_t per_thread = scratch_bytes(p.head_dim);
    const int nthreads = threads_for(a.workspace_bytes, 0, per_thread, "cpu.online_2pass");
    const int n_blocks = (p.seq_q + kRows - 1) / kRows;
    const std::int64_t n_bh = std::int64_t{p.batch} * p.heads_q;
    const std::int64_t tasks = n_bh * n_blocks;
#pragma omp parallel num_threads(nthreads)
    {
      Carver c(thread_scratch(a.workspace, 0, per_thread, omp_get_thread_num()));
      const Scratch s(c, p.head_dim);
#pragma omp for schedule(dynamic, 1)
      for (std::int64_t task = 0; task < tasks; ++task) {
        const int blk = heaviest_first(static_cast<int>(task / n_bh), n_blocks, p.causal);
        const int bh = static_cast<int>(task % n_bh);
        forward_rows(a, bh / p.heads_q, bh % p.heads_q, blk * kRows, s);
      }
    }
  }
};

}  // namespace
}  // namespace attnbench::cpu

ATTNBENCH_REGISTER(attnbench::cpu::OnlineTwoPass)
