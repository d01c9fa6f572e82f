// cpu.flash_bwd: the FlashAttention backward (Dao et al. 2022, Algorithm 4; FlashAttention-2's
// D = rowsum(dO o O) preprocessing) on the CPU. P is recomputed tile by tile from Q, K and the
// saved LSE (P = exp(scale * Q K^T - LSE)) and never stored.
//
// Passes:
//   0. D = rowsum(dO o O) for every query row, float32, into the workspace [B, Hq, Sq].
//   1. dK, dV: one task per (batch, kv head, key tile of Bc keys). For each query head of the GQA
//      group and each query tile (Br rows) that sees the key tile:
//        S = scale Q K^T;  P = exp(S - LSE);  dV += P^T dO;  dP = dO V^T;  dS = P o (dP - D);
//        dK += scale * dS^T Q
//      The task owns its dK/dV rows and sums the group in a fixed order, then rounds once.
//   2. dQ: one task per (batch, query head, query tile). For each key tile it sees:
//        recompute S, P, dP, dS as above;  dQ += scale * dS K;  round once at the end.
// Why two passes: dQ sums over key tiles while dK/dV sum over query tiles, so any single loop
// order leaves one of them accumulated by several tasks at once. FlashAttention on GPUs resolves
// that with float atomics on dQ, whose summation order (and bits) change from run to run. Here
// every output element is summed by exactly one task in a fixed order, so the result has the
// same bits on every run and for any thread count, and no task waits on another. The price is
// recomputing S, P, dP and dS in pass 2: 7 tile GEMMs per tile pair instead of 5 (1.4x the
// flops of the one-pass schedule; the reported FLOP/s use the 2.5x-forward convention).
// Passes over memory: Q, dO, LSE, D once per key tile in pass 1 and K, V once per query tile in
// pass 2 (mostly from cache); dQ, dK, dV written once.
// Causal and sliding window: tile pairs where no query sees any key are skipped; each row's keys
// in a tile are a contiguous range. Soft-capping: S = softcap * tanh(scale Q K^T / softcap) in P,
// and dS carries the factor 1 - tanh^2 (the tanh tile kept in scratch).
// Extra memory: D (4 bytes per query row and head) plus O(tile) float scratch per thread;
// nothing grows with seq_q x seq_kv. Rows with LSE = -inf (no visible key) get P = 0, so they
// contribute no gradient.
// Varlen (packed THD): each sequence's own tiles, as tasks over the longest one's (those past a
// sequence's end return at once); offsets through Problem::q_start / kv_start / lse_start.
// Vectorisation: Eigen GEMMs on float tiles; exp and the dS update are Eigen array expressions.
// Tiles: options block_r (Br) and block_c (Bc), 1..1024, default 128 x 128 (measured below).
// Limits: backward only; its forward partner is cpu.flash_fwd (whose LSE it reads).
#include <cmath>

#include "cpu_common.hpp"

namespace attnbench::cpu {
namespace {

// Default tiles, measured like cpu.flash_fwd's (f32, seq 2048, one thread, GFLOP/s by the
// 2.5x-forward convention from process CPU time; cpu.naive_3pass backward: 51 / 63):
//   Br x Bc    32x64  64x64  64x128  128x64  96x96  128x128  128x256  256x128
//   d = 64       58     60     62      64      66      66       69       67
//   d = 128      57     62     65      67      68      74       77       76
// 128 x 128 is within noise of the larger tiles and keeps twice as many dK/dV tasks.
constexpr int kDefaultBlockR = 128;
constexpr int kDefaultBlockC = 128;

Tiles tiles_of(const Options& opts) {
  return tiles_from(opts, kDefaultBlockR, kDefaultBlockC, "cpu.flash_bwd");
}

struct Scratch {
  float* q;    // [Br, d] query tile (f16/bf16 as float)
  float* dout; // [Br, d]
  float* k;    // [Bc, d]
  float* v;    // [Bc, d]
  float* p;    // [Br, Bc] P, then dS
  float* dp;   // [Br, Bc] dP
  float* acc1; // [max(Br, Bc), d]: dK (pass 1) or dQ (pass 2) accumulator, O rows (pass 0)
  float* acc2; // [Bc, d]: dV accumulator
  float* t;    // [Br, Bc] tanh(S / softcap), soft-capping only
  Scratch(Carver& c, Tiles t, int d, bool softcap)
      : q(c.take<float>(std::int64_t{t.br} * d)),
        dout(c.take<float>(std::int64_t{t.br} * d)),
        k(c.take<float>(std::int64_t{t.bc} * d)),
        v(c.take<float>(std::int64_t{t.bc} * d)),
        p(c.take<float>(std::int64_t{t.br} * t.bc)),
        dp(c.take<float>(std::int64_t{t.br} * t.bc)),
        acc1(c.take<float>(std::int64_t{std::max(t.br, t.bc)} * d)),
        acc2(c.take<float>(std::int64_t{t.bc} * d)),
        t(softcap ? c.take<float>(std::int64_t{t.br} * t.bc) : nullptr) {}
};

std::size_t scratch_bytes(Tiles t, int d, bool softcap) {
  Carver c;
  Scratch s(c, t, d, softcap);
  return c.bytes();
}

std::size_t shared_bytes(const Problem& p) {
  Carver c;
  c.take<float>(p.lse_elems());  // D
  return c.bytes();
}

// Index helpers for BSHD (varlen: packed THD) tensors: element of (b, row, head, 0). p is the
// whole problem (the batch's offsets), not a sequence's.
struct Layout {
  const Problem& p;
  std::int64_t q(int b, int i, int h) const {
    return ((p.q_start(b) + i) * p.heads_q + h) * p.head_dim;
  }
  std::int64_t kv(int b, int j, int hk) const {
    return ((p.kv_start(b) + j) * p.heads_kv + hk) * p.head_dim;
  }
  std::int64_t q_stride() const { return std::int64_t{p.heads_q} * p.head_dim; }
  std::int64_t kv_stride() const { return std::int64_t{p.heads_kv} * p.head_dim; }
  std::int64_t row(int b, int h, int i) const { return p.lse_start(b, h) + i; }  // lse, D
};

// The tile pair (query rows [i0, i0+br), keys [j0, j0+bc)) of (b, h): P into s.p and
// dS = P o (dP - D) over it (s.p), with dP = dO V^T in s.dp. q, dout: float tiles [br, d];
// k, v: float tiles [bc, d]. When dv is given, dV += P^T dO is applied before P is overwritten.
void tile_ds(const BwdArgs& a, const float* dsum, int b, int h, int i0, int br, int j0, int bc,
             FloatTile q, FloatTile dout, FloatTile k, FloatTile v, const Scratch& s, MatMap* dv) {
  Problem seq;
  const Problem& p = problem_of(a.p, b, seq);
  const int d = p.head_dim;
  const Layout L{a.p};
  const float scale = static_cast<float>(p.effective_scale());
  MatMap pm = mat(s.p, br, bc, bc);
  gemm(pm, cmat(q, br, d), cmat(k, bc, d).transpose(), false);  // scaled in the exp
  const float* lse = a.lse + L.row(b, h, i0);
  const float cap = static_cast<float>(p.softcap);
  for (int r = 0; r < br; ++r) {
    const TileRange seen = std::isinf(lse[r]) ? TileRange{0, 0} : p.visible_in(i0 + r, j0, bc);
    auto row = row_array(s.p, bc, r, bc);
    auto vis = row.segment(seen.lo, seen.hi - seen.lo);
    // P = exp(S - LSE) <= 1. The exponent is clamped at 0: an FMA of s * scale - LSE, or an
    // LSE rounded to float32, can put it above 0 by up to an ulp of LSE, which at |LSE| ~ 1e9
    // (--scale 1e8) overflows exp; the clamp keeps P finite (and exact wherever it was <= 1).
    if (cap == 0) {
      vis = (vis * scale - lse[r]).min(0.0f).exp();
    } else {
      auto th = row_array(s.t, bc, r, bc);
      th.segment(seen.lo, seen.hi - seen.lo) = (vis * scale / cap).tanh();
      vis = (th.segment(seen.lo, seen.hi - seen.lo) * cap - lse[r]).min(0.0f).exp();
      th.head(seen.lo).setZero();
      th.tail(bc - seen.hi).setZero();
    }
    row.head(seen.lo).setZero();
    row.tail(bc - seen.hi).setZero();
  }
  if (dv) gemm(*dv, pm.transpose(), cmat(dout, br, d), true);
  MatMap dpm = mat(s.dp, br, bc, bc);
  gemm(dpm, cmat(dout, br, d), cmat(v, bc, d).transpose(), false);
  for (int r = 0; r < br; ++r) {
    row_array(s.p, bc, r, bc) *= row_array(s.dp, bc, r, bc) - dsum[r];
    if (cap != 0) row_array(s.p, bc, r, bc) *= 1.0f - row_array(s.t, bc, r, bc).square();
  }
}

// Pass 0 for rows [i0, i0+br) of (b, h), cut at the end of its rows: D = rowsum(dO o O).
void rowsum_tile(const BwdArgs& a, float* dsum_all, int b, int h, int i0, int br, const Scratch& s) {
  Problem seq;
  const Problem& p = problem_of(a.p, b, seq);
  if (i0 >= p.seq_q) return;  // varlen: a tile past this sequence's rows
  br = std::min(br, p.seq_q - i0);
  const int d = p.head_dim;
  const Layout L{a.p};
  const FloatTile o = rows_as_float(a.o, p.dtype, L.q(b, i0, h), L.q_stride(), br, d, s.acc1);
  const FloatTile dout = rows_as_float(a.dout, p.dtype, L.q(b, i0, h), L.q_stride(), br, d, s.dout);
  float* dsum = dsum_all + L.row(b, h, i0);
  for (int r = 0; r < br; ++r) dsum[r] = cmat(o, br, d).row(r).dot(cmat(dout, br, d).row(r));
}

// Pass 1: dK, dV for keys [j0, j0+Bc) of (b, hk).
void dkdv_tile(const BwdArgs& a, const float* dsum_all, Tiles t, int b, int hk, int j0, const Scratch& s) {
  Problem seq;
  const Problem& p = problem_of(a.p, b, seq);
  if (j0 >= p.seq_kv) return;  // varlen: a tile past this sequence's keys
  const int d = p.head_dim;
  const DType dt = p.dtype;
  const Layout L{a.p};
  const int bc = std::min(t.bc, p.seq_kv - j0);
  const FloatTile k = rows_as_float(a.k, dt, L.kv(b, j0, hk), L.kv_stride(), bc, d, s.k);
  const FloatTile v = rows_as_float(a.v, dt, L.kv(b, j0, hk), L.kv_stride(), bc, d, s.v);
  const float scale = static_cast<float>(p.effective_scale());
  MatMap dk = mat(s.acc1, bc, d, d), dv = mat(s.acc2, bc, d, d);
  dk.setZero();
  dv.setZero();

  // The query rows that see a key of the tile, [i_first, i_end): both ends of a row's visible
  // keys only grow with the row.
  int i_first = 0;
  while (i_first < p.seq_q && p.first_invisible_key(i_first) <= j0) ++i_first;
  int i_end = i_first;
  while (i_end < p.seq_q && p.first_visible_key(i_end) < j0 + bc) ++i_end;
  for (int h = hk * p.group(); h < (hk + 1) * p.group(); ++h) {
    for (int i0 = i_first; i0 < i_end; i0 += t.br) {
      const int br = std::min(t.br, i_end - i0);
      const FloatTile q = rows_as_float(a.q, dt, L.q(b, i0, h), L.q_stride(), br, d, s.q);
      const FloatTile dout = rows_as_float(a.dout, dt, L.q(b, i0, h), L.q_stride(), br, d, s.dout);
      tile_ds(a, dsum_all + L.row(b, h, i0), b, h, i0, br, j0, bc, q, dout, k, v, s, &dv);
      gemm(dk, cmat(s.p, br, bc, bc).transpose(), cmat(q, br, d), true);
    }
  }
  dk *= scale;  // dK = scale * sum dS^T Q, scaled once
  store_rows(s.acc1, d, bc, d, a.dk, dt, L.kv(b, j0, hk), L.kv_stride());
  store_rows(s.acc2, d, bc, d, a.dv, dt, L.kv(b, j0, hk), L.kv_stride());
}

// Pass 2: dQ for rows [i0, i0+Br) of (b, h).
void dq_tile(const BwdArgs& a, const float* dsum_all, Tiles t, int b, int h, int i0, const Scratch& s) {
  Problem seq;
  const Problem& p = problem_of(a.p, b, seq);
  if (i0 >= p.seq_q) return;  // varlen: a tile past this sequence's rows
  const int d = p.head_dim;
  const DType dt = p.dtype;
  const Layout L{a.p};
  const int br = std::min(t.br, p.seq_q - i0);
  const int hk = p.kv_head(h);
  const FloatTile q = rows_as_float(a.q, dt, L.q(b, i0, h), L.q_stride(), br, d, s.q);
  const FloatTile dout = rows_as_float(a.dout, dt, L.q(b, i0, h), L.q_stride(), br, d, s.dout);
  const float scale = static_cast<float>(p.effective_scale());
  MatMap dq = mat(s.acc1, br, d, d);
  dq.setZero();
  const int kv_end = p.first_invisible_key(i0 + br - 1);
  for (int j0 = p.first_visible_key(i0); j0 < kv_end; j0 += t.bc) {
    const int bc = std::min(t.bc, kv_end - j0);
    const FloatTile k = rows_as_float(a.k, dt, L.kv(b, j0, hk), L.kv_stride(), bc, d, s.k);
    const FloatTile v = rows_as_float(a.v, dt, L.kv(b, j0, hk), L.kv_stride(), bc, d, s.v);
    tile_ds(a, dsum_all + L.row(b, h, i0), b, h, i0, br, j0, bc, q, dout, k, v, s, nullptr);
    gemm(dq, cmat(s.p, br, bc, bc), cmat(k, bc, d), true);
  }
  dq *= scale;
  store_rows(s.acc1, d, br, d, a.dq, dt, L.q(b, i0, h), L.q_stride());
}

class FlashBackward final : public Implementation {
 public:
  std::string name() const override { return "cpu.flash_bwd"; }
  Device device() const override { return Device::cpu; }
  std::string summary() const override {
    return "FlashAttention backward: P recomputed per tile from LSE, deterministic dK/dV and dQ passes";
  }
  Capabilities capabilities() const override {
    Capabilities c;
    c.forward = false;
    c.backward = true;
    c.fwd_partner = "cpu.flash_fwd";
    c.window = true;
    c.softcap = true;
    c.varlen = true;
    c.options = {"block_r", "block_c"};
    return c;
  }
  std::size_t workspace_bytes(const Problem& p, Pass pass, const Options& opts) const override {
    if (pass == Pass::fwd) return 0;
    return workspace_for(shared_bytes(p), scratch_bytes(tiles_of(opts), p.head_dim, p.softcap != 0));
  }

  void backward(const BwdArgs& a) const override {
    const Problem& p = a.p;
    const Tiles t = tiles_of(a.options ? *a.options : Options{});
    const std::size_t shared = shared_bytes(p), per_thread = scratch_bytes(t, p.head_dim, p.softcap != 0);
    const int nthreads = threads_for(a.workspace_bytes, shared, per_thread, "cpu.flash_bwd");
    float* dsum = Carver(a.workspace).take<float>(p.lse_elems());
    const int n_qt = (p.seq_q + t.br - 1) / t.br, n_kt = (p.seq_kv + t.bc - 1) / t.bc;
    const std::int64_t n_bh = std::int64_t{p.batch} * p.heads_q;
    const std::int64_t n_bhk = std::int64_t{p.batch} * p.heads_kv;
    const std::int64_t q_tasks = n_bh * n_qt, kv_tasks = n_bhk * n_kt;
#pragma omp parallel num_threads(nthreads)
    {
      Carver c(thread_scratch(a.workspace, shared, per_thread, omp_get_thread_num()));
      const Scratch s(c, t, p.head_dim, p.softcap != 0);
#pragma omp for schedule(static)
      for (std::int64_t task = 0; task < q_tasks; ++task) {
        const int bh = static_cast<int>(task / n_qt), qt = static_cast<int>(task % n_qt);
        rowsum_tile(a, dsum, bh / p.heads_q, bh % p.heads_q, qt * t.br, t.br, s);
      }
      // (implicit barrier: D is complete)
#pragma omp for schedule(dynamic, 1)
      for (std::int64_t task = 0; task < kv_tasks; ++task) {
        // Causal: the first key tiles are seen by the most rows, so they go first.
        const int kt = static_cast<int>(task / n_bhk), bhk = static_cast<int>(task % n_bhk);
        dkdv_tile(a, dsum, t, bhk / p.heads_kv, bhk % p.heads_kv, kt * t.bc, s);
      }
#pragma omp for schedule(dynamic, 1)
      for (std::int64_t task = 0; task < q_tasks; ++task) {
        const int qt = heaviest_first(static_cast<int>(task / n_bh), n_qt, p.causal);
        const int bh = static_cast<int>(task % n_bh);
        dq_tile(a, dsum, t, bh / p.heads_q, bh % p.heads_q, qt * t.br, s);
      }
    }
  }
};

}  // namespace
}  // namespace attnbench::cpu

ATTNBENCH_REGISTER(attnbench::cpu::FlashBackward)
// Its name until the naming scheme of docs/architecture.md ("Names"): configs, --impl and
// results files that use it still work.
ATTNBENCH_FORMER_NAME("cpu.flash_backward", "cpu.flash_bwd")
