// cpu.flash_fwd: the FlashAttention forward (Dao et al. 2022, Algorithm 1, with FlashAttention-2's
// loop order: query tiles outside, key/value tiles inside) on the CPU.
//
// Algorithm. Each task owns one query tile of Br rows of one (batch, head). It keeps a float
// accumulator O~ [Br, d], a running max m and a running sum l per row, and walks the key/value
// tiles of Bc keys once:
//   S = scale * Q_i K_j^T                    (Eigen GEMM on float tiles; scale applied in the exp pass)
//   m' = max(m, rowmax(S));  P = exp(S - m');  l = l * exp(m - m') + rowsum(P)
//   O~ = O~ * exp(m - m') + P V_j            (rescale in place, Eigen GEMM)
// and finally writes O = O~ / l and LSE = m + log(l). A row that sees no key keeps l = 0 and
// gets O = 0, LSE = -inf.
// Passes over memory: Q, O and LSE once; K and V once per query tile (seq_q / Br times), which
// for the sizes benchmarked mostly hits L2/L3 rather than DRAM.
// Causal and sliding window: key tiles that no row of the query tile sees are skipped (the walk
// starts at the first row's first visible key and stops after the last row's last); within a
// tile each row's visible keys are a contiguous range, so masked scores are never exponentiated.
// Soft-capping: softcap * tanh(S / softcap) on the visible scores before the max.
// Varlen (packed THD): the tiles of each sequence, as tasks over the longest one's tiles (those
// past a sequence's end return at once); a sequence without keys gets O = 0, LSE = -inf.
// Paged KV cache: each K/V tile's rows are gathered through the block table (kv_rows_as_float,
// into the tile's float scratch, also for f32); tiles may cross pages.
// Extra memory: O(tile) per thread: Q, K, V tiles as float (f16/bf16 only; f32 is read in
// place), S [Br, Bc], O~ [Br, d], m and l; nothing grows with the sequence.
// Vectorisation: GEMMs are Eigen's SIMD kernels (AVX-512 with -march=native on the Xeons used);
// exp, max, sum and rescaling are Eigen array expressions (vectorised pexp); dtype conversion
// once per tile (cpu_common.hpp).
// Parallel over (query tile, batch, head), heaviest tiles first for causal problems.
// Tiles: run-time options block_r (Br) and block_c (Bc), 1..1024; defaults below.
// Limits: forward only (the backward is cpu.flash_bwd); head_dim 1..256.
#include <cmath>

#include "cpu_common.hpp"

namespace attnbench::cpu {
namespace {

// Default tiles. Measured on a Xeon (Sapphire Rapids, AVX-512, 2 MiB L2 per core), f32, seq 2048,
// one thread, best of 3, GFLOP/s from process CPU time (the machine was shared; Eigen GEMM
// 1024^3 gave 128-134 the same way):
//   Br x Bc    32x64  64x64  64x128  96x128  128x128  96x256  128x256  192x128  192x256
//   d = 64       67     73     87      87      93       93      96       93       96
//   d = 128      72     88     95     106     108      107     111      116      105
// Larger tiles amortise Eigen's operand packing (both operands are packed on every call) and
// the per-row softmax bookkeeping; beyond 128 x 256 the gain is within noise while causal
// diagonal tiles waste more work and small problems get fewer parallel tasks. The working set
// (Q, K, V, S, O~ tiles: ~0.7 MiB at d = 256) stays within L2.
constexpr int kDefaultBlockR = 128;
constexpr int kDefaultBlockC = 256;

Tiles tiles_of(const Options& opts) {
  return tiles_from(opts, kDefaultBlockR, kDefaultBlockC, "cpu.flash_fwd");
}

// One thread's scratch.
struct Scratch {
  float* q;  // [Br, d]  query tile as float (f16/bf16)
  float* k;  // [Bc, d]
  float* v;  // [Bc, d]
  float* s;  // [Br, Bc] scores, then probabilities
  float* o;  // [Br, d]  unnormalised output accumulator
  float* m;  // [Br]     running max
  float* l;  // [Br]     running sum
  Scratch(Carver& c, Tiles t, int d)
      : q(c.take<float>(std::int64_t{t.br} * d)),
        k(c.take<float>(std::int64_t{t.bc} * d)),
        v(c.take<float>(std::int64_t{t.bc} * d)),
        s(c.take<float>(std::int64_t{t.br} * t.bc)),
        o(c.take<float>(std::int64_t{t.br} * d)),
        m(c.take<float>(t.br)),
        l(c.take<float>(t.br)) {}
};

std::size_t scratch_bytes(Tiles t, int d) {
  Carver c;
  Scratch s(c, t, d);
  return c.bytes();
}

// One query tile: rows [i0, i0 + Br) of (batch or sequence b, query head h).
// q, o: [B, Sq, Hq, d]; k, v: [B, Skv, Hkv, d]; lse: [B, Hq, Sq] (varlen: [total, H, d] and
// [Hq, total_q]).
void forward_tile(const FwdArgs& a, Tiles t, int b, int h, int i0, const Scratch& s) {
  Problem seq;
  const Problem& p = problem_of(a.p, b, seq);
  if (i0 >= p.seq_q) return;  // varlen: a tile past this sequence's rows
  const int d = p.head_dim;
  const DType dt = p.dtype;
  const int br = std::min(t.br, p.seq_q - i0);
  const std::int64_t q_stride = std::int64_t{p.heads_q} * d;
  const std::int64_t q_first = ((a.p.q_start(b) + i0) * p.heads_q + h) * d;
  const FloatTile q = rows_as_float(a.q, dt, q_first, q_stride, br, d, s.q);
  const float scale = static_cast<float>(p.effective_scale());

  std::fill(s.m, s.m + br, kNegInf);
  std::fill(s.l, s.l + br, 0.0f);
  std::fill(s.o, s.o + std::int64_t{br} * d, 0.0f);
  MatMap o_acc = mat(s.o, br, d, d);

  // Keys [kv_begin, kv_end) are seen by some row of the tile: the first row's window starts
  // first, the last row sees up to the furthest key.
  const int kv_begin = p.first_visible_key(i0);
  const int kv_end = p.first_invisible_key(i0 + br - 1);
  const float cap = static_cast<float>(p.softcap);
  for (int j0 = kv_begin; j0 < kv_end; j0 += t.bc) {
    const int bc = std::min(t.bc, kv_end - j0);
    const FloatTile k = kv_rows_as_float(a.p, a.k, b, p.kv_head(h), j0, bc, s.k);
    const FloatTile v = kv_rows_as_float(a.p, a.v, b, p.kv_head(h), j0, bc, s.v);

    MatMap sc = mat(s.s, br, bc, bc);
    gemm(sc, cmat(q, br, d), cmat(k, bc, d).transpose(), false);  // unscaled: scale is applied below

    for (int r = 0; r < br; ++r) {
      const TileRange seen = p.visible_in(i0 + r, j0, bc);
      auto row = row_array(s.s, bc, r, bc);
      if (seen.hi == seen.lo) {  // contributes nothing; m, l and O~ stay as they are
        row.setZero();
        continue;
      }
      auto vis = row.segment(seen.lo, seen.hi - seen.lo);
      // Scaled scores are stored before the max is taken, so the max is one of them and its
      // exp(s - m) is exp(0) = 1. Scaling inside the exp (s * scale - m) may be contracted to
      // an FMA, whose residual at the max is up to half an ulp of s * scale: at |s * scale| ~
      // 1e9 (--scale 1e8) exp of that overflows, and O became inf / inf = NaN.
      vis *= scale;
      if (cap != 0) vis = (vis / cap).tanh() * cap;  // soft-capping
      const float m_new = std::max(s.m[r], vis.maxCoeff());
      // m_new = -inf: every visible score so far is -inf; exponents then use 0 instead of
      // m_new, as -inf - -inf is NaN. Equal maxima need no rescale (inf - inf would be NaN).
      const float m_use = m_new == kNegInf ? 0.0f : m_new;
      const float corr = s.m[r] == m_new ? 1.0f : std::exp(s.m[r] - m_use);  // 0 on the first tile
      vis = (vis - m_use).exp();
      row.head(seen.lo).setZero();
      row.tail(bc - seen.hi).setZero();
      s.l[r] = s.l[r] * corr + vis.sum();
      if (corr != 1.0f) o_acc.row(r) *= corr;
      s.m[r] = m_new;
    }
    gemm(o_acc, sc, cmat(v, bc, d), true);
  }

  float* lse = a.lse + a.p.lse_start(b, h) + i0;
  for (int r = 0; r < br; ++r) {
    if (s.l[r] > 0) {
      o_acc.row(r) /= s.l[r];
      lse[r] = s.m[r] + std::log(s.l[r]);
    } else {
      o_acc.row(r).setZero();
      lse[r] = kNegInf;
    }
  }
  store_rows(s.o, d, br, d, a.o, dt, q_first, q_stride);
}

class FlashForward final : public Implementation {
 public:
  std::string name() const override { return "cpu.flash_fwd"; }
  Device device() const override { return Device::cpu; }
  std::string summary() const override {
    return "FlashAttention forward: tiled, online softmax, one pass over K/V, O(tile) memory";
  }
  Capabilities capabilities() const override {
    Capabilities c;
    c.window = true;
    c.softcap = true;
    c.varlen = true;
    c.paged = true;
    c.options = {"block_r", "block_c"};
    return c;
  }
  std::size_t workspace_bytes(const Problem& p, Pass, const Options& opts) const override {
    return workspace_for(0, scratch_bytes(tiles_of(opts), p.head_dim));
  }

  void forward(const FwdArgs& a) const override {
    const Problem& p = a.p;
    const Tiles t = tiles_of(a.options ? *a.options : Options{});
    const std::size_t per_thread = scratch_bytes(t, p.head_dim);
    const int nthreads = threads_for(a.workspace_bytes, 0, per_thread, "cpu.flash_fwd");
    const int n_qt = (p.seq_q + t.br - 1) / t.br;
    const std::int64_t n_bh = std::int64_t{p.batch} * p.heads_q;
    const std::int64_t tasks = n_bh * n_qt;
#pragma omp parallel num_threads(nthreads)
    {
      Carver c(thread_scratch(a.workspace, 0, per_thread, omp_get_thread_num()));
      const Scratch s(c, t, p.head_dim);
#pragma omp for schedule(dynamic, 1)
      for (std::int64_t task = 0; task < tasks; ++task) {
        const int qt = heaviest_first(static_cast<int>(task / n_bh), n_qt, p.causal);
        const int bh = static_cast<int>(task % n_bh);
        forward_tile(a, t, bh / p.heads_q, bh % p.heads_q, qt * t.br, s);
      }
    }
  }
};

}  // namespace
}  // namespace attnbench::cpu

ATTNBENCH_REGISTER(attnbench::cpu::FlashForward)
// Its name until the naming scheme of docs/architecture.md ("Names"): configs, --impl and
// results files that use it still work.
ATTNBENCH_FORMER_NAME("cpu.flash_1pass", "cpu.flash_fwd")
