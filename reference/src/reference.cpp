// The float64 reference: exact attention forward (O, LSE) and backward (dQ, dK, dV) in double
// precision, the single source of truth every implementation is verified against.
//
// Algorithm: per (batch, query head), query rows are processed in fixed blocks of kRowBlock rows.
// A block computes its score rows S = scale * Qb K^T over the keys any of its rows can see
// (keys [first_visible_key(first row), first_invisible_key(last row)): both bounds only grow with
// the row index), soft-caps them (S = softcap * tanh(S / softcap)) when asked, then a safe
// softmax row by row over that row's own visible keys (subtract the row max, exp, sum,
// LSE = max + log(sum); the others get P = 0), and O = P V. The backward recomputes P the same
// way and applies
//   dV += P^T dO,  dP = dO V^T,  D = rowsum(P o dP) (= rowsum(dO o O)),  dS = P o (dP - D),
//   soft-capped: dS *= 1 - tanh^2,  dQ = scale * dS K,  dK += scale * dS^T Q.
// Passes over memory: each (b, head) slice of the BSHD inputs is copied once into a contiguous
// Eigen matrix; K and V are then read once per row block (Eigen GEMMs).
// Writes: o, lse (forward); dq, dk, dv (backward), every element.
// Extra memory: per (b, head) in flight, copies of its Q, K, V ([seq, head_dim] each) and one
// [kRowBlock, seq_kv] score block per thread; the backward adds dO, a second score block, the
// group's dQ [group, seq_q, head_dim] and, per kv group, accumulated dK/dV plus one partial
// dK/dV pair ([seq_kv, head_dim]) per concurrently running work unit.
// Limits: none beyond validate(); cost is O(seq_q * seq_kv * head_dim) per head, in double.
//
// Determinism: results do not depend on the thread count, and forward_rows / backward_kv_head are
// bitwise equal to the matching slices of forward / backward, because
//   - every row is computed inside the same fixed row block with the same key range, by the same
//     code (GEMM results for a row depend on its position within the block);
//   - the softmax uses scalar std::exp in a fixed order (no alignment-dependent vector paths);
//   - dK/dV are summed from per-unit partials (unit = one query head x kRowChunk rows) in unit
//     order, whichever thread computed each unit;
//   - Eigen's own GEMM threading is off (EIGEN_DONT_PARALLELIZE): its k-blocking depends on the
//     thread count. Parallelism is ours, with OpenMP, over heads and row blocks.
#define EIGEN_DONT_PARALLELIZE
#include "attnbench/reference.hpp"

#include <omp.h>

// GCC 12 reports a false maybe-uninitialized inside its own AVX-512 intrinsics (the
// `__m512d __Y = __Y;` idiom of _mm512_undefined_pd, GCC bug 105593) when Eigen inlines them.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <Eigen/Core>
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

namespace attnbench::reference {
namespace {

using Mat = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
// Any row-major block of rows (outer stride = head_dim) binds here without a copy.
using ConstRows = Eigen::Ref<const Mat>;

constexpr int kRowBlock = 64;   // query rows per score block: GEMM-efficient, S stays small
constexpr int kRowChunk = 512;  // query rows per backward work unit (a multiple of kRowBlock)
static_assert(kRowChunk % kRowBlock == 0);

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// Below this many score multiply-adds (b * hq * seq_q * seq_kv * d) a call runs on one thread: an
// OpenMP region costs more than the work, badly so on a loaded machine (finite-difference tests
// make thousands of tiny calls). Results do not depend on it.
constexpr double kMinThreadedWork = 1 << 20;
bool worth_threads(const Problem& p) {
  return static_cast<double>(p.batch) * p.heads_q * p.seq_q * p.seq_kv * p.head_dim >=
         kMinThreadedWork;
}

void check_problem(const Problem& p) {
  const std::string why = validate(p);
  if (!why.empty()) throw std::invalid_argument("attnbench::reference: " + why);
}

std::int64_t row_offset(int b, int s, int seq, int heads, int h, int d) {
  return ((static_cast<std::int64_t>(b) * seq + s) * heads + h) * d;
}

// x: [batch, seq, heads, d] -> rows [row0, row0 + nrows) of head (b, h): [nrows, d]
Mat gather(const double* x, int b, int seq, int heads, int h, int d, int row0, int nrows) {
  Mat m(nrows, d);
  for (int r = 0; r < nrows; ++r) {
    const double* src = x + row_offset(b, row0 + r, seq, heads, h, d);
    std::copy(src, src + d, m.row(r).data());
  }
  return m;
}
Mat gather(const double* x, int b, int seq, int heads, int h, int d) {
  return gather(x, b, seq, heads, h, d, 0, seq);
}

// m: [seq, d] -> head (b, h) of x: [batch, seq, heads, d]
void scatter(const double* m, double* x, int b, int seq, int heads, int h, int d) {
  for (int r = 0; r < seq; ++r) {
    std::copy(m + static_cast<std::int64_t>(r) * d, m + static_cast<std::int64_t>(r + 1) * d,
              x + row_offset(b, r, seq, heads, h, d));
  }
}

// Keys [begin, end) cover every key visible to rows [row0, row0 + nrows): both visibility bounds
// are non-decreasing in the row index. Empty (end <= begin) when no row of the block sees a key.
struct KeyRange {
  int begin, end;
  int size() const { return std::max(0, end - begin); }
};
KeyRange block_keys(const Problem& p, int row0, int nrows) {
  return {p.first_visible_key(row0), p.first_invisible_key(row0 + nrows - 1)};
}

// The scaled scores of a block, soft-capped when the problem asks: s <- softcap * tanh(s /
// softcap). Keeps tanh(s / softcap) in t for the backward (t is left empty without soft-capping).
void cap_scores(const Problem& p, Mat& s, Mat* t) {
  if (p.softcap == 0) return;
  const double c = p.softcap;
  s = (s.array() / c).tanh().matrix();
  if (t) *t = s;
  s *= c;
}

// s: [nrows, keys.size()] scores of rows row0.. over keys [keys.begin, keys.end) -> P (entries
// a row cannot see are 0); lse: [nrows]. A row that sees no key gets P = 0 and LSE = -inf.
void softmax_rows(const Problem& p, int row0, KeyRange keys, Mat& s, double* lse) {
  const Eigen::Index cols = s.cols();
  for (Eigen::Index r = 0; r < s.rows(); ++r) {
    double* row = s.row(r).data();
    const int i = static_cast<int>(row0 + r);
    const Problem::KeySpan seen = p.visible_in(i, keys.begin, static_cast<int>(cols));
    const Eigen::Index lo = seen.lo, hi = seen.hi;
    if (hi == lo) {
      std::fill(row, row + cols, 0.0);
      lse[r] = kNegInf;
      continue;
    }
    double m = row[lo];
    for (Eigen::Index j = lo + 1; j < hi; ++j) m = std::max(m, row[j]);
    double sum = 0;
    for (Eigen::Index j = lo; j < hi; ++j) {
      row[j] = std::exp(row[j] - m);
      sum += row[j];
    }
    for (Eigen::Index j = lo; j < hi; ++j) row[j] /= sum;
    std::fill(row, row + lo, 0.0);
    std::fill(row + hi, row + cols, 0.0);
    lse[r] = m + std::log(sum);
  }
}

// One row block of the forward. qb: [nrows, d] rows row0.. of one query head; k, v: [seq_kv, d]
// of its kv head. Writes ob: [nrows, d] and lse: [nrows]; s is scratch.
void forward_block(const Problem& p, const ConstRows& qb, int row0, const Mat& k, const Mat& v,
                   Mat& s, Mat& ob, double* lse) {
  const int nrows = static_cast<int>(qb.rows());
  const KeyRange keys = block_keys(p, row0, nrows);
  ob.resize(nrows, p.head_dim);
  if (keys.size() == 0) {
    ob.setZero();
    std::fill(lse, lse + nrows, kNegInf);
    return;
  }
  s.resize(nrows, keys.size());
  s.noalias() = qb * k.middleRows(keys.begin, keys.size()).transpose();
  s *= p.effective_scale();
  cap_scores(p, s, nullptr);
  softmax_rows(p, row0, keys, s, lse);
  ob.noalias() = s * v.middleRows(keys.begin, keys.size());
}

struct Inputs {
  const double* q;
  const double* k;
  const double* v;
  const double* dout;
};

// One backward work unit: query head h, rows [row0, row0 + nrows) (whole row blocks).
// kh, vh: [seq_kv, d] of h's kv head. Writes dq_rows: [nrows, d] (contiguous) and overwrites
// dk_part, dv_part: [seq_kv, d] with this unit's contribution.
void backward_unit(const Problem& p, const Inputs& in, int b, int h, int row0, int nrows,
                   const Mat& kh, const Mat& vh, double* dq_rows, Mat& dk_part, Mat& dv_part) {
  const int d = p.head_dim;
  const double scale = p.effective_scale();
  dk_part.setZero(p.seq_kv, d);
  dv_part.setZero(p.seq_kv, d);
  const Mat qh = gather(in.q, b, p.seq_q, p.heads_q, h, d, row0, nrows);
  const Mat doh = gather(in.dout, b, p.seq_q, p.heads_q, h, d, row0, nrows);
  Eigen::Map<Mat> dq(dq_rows, nrows, d);
  Mat s, dp, t;
  std::vector<double> lse(kRowBlock);
  for (int r = 0; r < nrows; r += kRowBlock) {
    const int n = std::min(kRowBlock, nrows - r);
    const KeyRange keys = block_keys(p, row0 + r, n);
    if (keys.size() == 0) {  // no row of the block sees a key: no gradient flows
      dq.middleRows(r, n).setZero();
      continue;
    }
    const auto qb = qh.middleRows(r, n);
    const auto dob = doh.middleRows(r, n);
    const auto kk = kh.middleRows(keys.begin, keys.size());
    s.resize(n, keys.size());
    s.noalias() = qb * kk.transpose();
    s *= scale;
    cap_scores(p, s, &t);
    softmax_rows(p, row0 + r, keys, s, lse.data());  // s now holds P
    dv_part.middleRows(keys.begin, keys.size()).noalias() += s.transpose() * dob;
    dp.resize(n, keys.size());
    dp.noalias() = dob * vh.middleRows(keys.begin, keys.size()).transpose();
    for (int i = 0; i < n; ++i) {  // dp <- dS = P o (dP - D)
      const double di = s.row(i).dot(dp.row(i));
      dp.row(i).array() = s.row(i).array() * (dp.row(i).array() - di);
    }
    // Soft-capped: d(softcap * tanh(x / softcap)) / dx = 1 - tanh^2.
    if (p.softcap != 0) dp.array() *= 1.0 - t.array().square();
    dq.middleRows(r, n).noalias() = scale * (dp * kk);
    dk_part.middleRows(keys.begin, keys.size()).noalias() += scale * (dp.transpose() * qb);
  }
}

// Backward of one kv group (b, hk). dq_group: [group, seq_q, d]; dk, dv: [seq_kv, d] (resized).
// Units (query head gi, row chunk c) in order gi-major; dK/dV are the in-order sum of the units'
// partials. parallel: run units concurrently (waves of one unit per thread) instead of in turn.
void backward_group(const Problem& p, const Inputs& in, int b, int hk, double* dq_group, Mat& dk,
                    Mat& dv, bool parallel) {
  const int d = p.head_dim;
  const int g = p.group();
  const int chunks = (p.seq_q + kRowChunk - 1) / kRowChunk;
  const int units = g * chunks;
  const Mat kh = gather(in.k, b, p.seq_kv, p.heads_kv, hk, d);
  const Mat vh = gather(in.v, b, p.seq_kv, p.heads_kv, hk, d);
  dk.setZero(p.seq_kv, d);
  dv.setZero(p.seq_kv, d);
  auto run_unit = [&](int u, Mat& dk_part, Mat& dv_part) {
    const int gi = u / chunks;
    const int row0 = (u % chunks) * kRowChunk;
    const int nrows = std::min(kRowChunk, p.seq_q - row0);
    double* dq_rows = dq_group + (static_cast<std::int64_t>(gi) * p.seq_q + row0) * d;
    backward_unit(p, in, b, hk * g + gi, row0, nrows, kh, vh, dq_rows, dk_part, dv_part);
  };
  const int wave = parallel ? std::min(units, omp_get_max_threads()) : 1;
  std::vector<Mat> dk_parts(wave), dv_parts(wave);
  for (int u0 = 0; u0 < units; u0 += wave) {
    const int n = std::min(wave, units - u0);
#pragma omp parallel for schedule(dynamic) if (n > 1)
    for (int i = 0; i < n; ++i) run_unit(u0 + i, dk_parts[i], dv_parts[i]);
    for (int i = 0; i < n; ++i) {
      dk += dk_parts[i];
      dv += dv_parts[i];
    }
  }
}

}  // namespace

namespace {

// Varlen: each sequence is its own dense problem of batch 1 on the slices of the packed tensors
// (THD from q_start / kv_start is BSHD with batch 1), so the varlen results are those of the
// dense code bit for bit. Sequences are computed in turn, each threaded inside.
template <class F>
void for_each_sequence(const Problem& p, F&& f) {
  for (int b = 0; b < p.batch; ++b) {
    const Problem sp = p.sequence(b);
    if (sp.seq_q == 0 && sp.seq_kv == 0) continue;
    f(b, sp, p.q_start(b) * p.heads_q * p.head_dim, p.kv_start(b) * p.heads_kv * p.head_dim);
  }
}

void forward_varlen(const Problem& p, const double* q, const double* k, const double* v, double* o,
                    double* lse) {
  const std::int64_t total_q = p.total_q();
  for_each_sequence(p, [&](int b, const Problem& sp, std::int64_t qo, std::int64_t ko) {
    if (sp.seq_q == 0) return;  // no rows
    std::vector<double> lse_b(static_cast<std::size_t>(sp.heads_q) * sp.seq_q, kNegInf);
    if (sp.seq_kv == 0) {  // rows that see no key: O = 0, LSE = -inf
      std::fill(o + qo, o + qo + static_cast<std::int64_t>(sp.seq_q) * sp.heads_q * sp.head_dim,
                0.0);
    } else {
      forward(sp, q + qo, k + ko, v + ko, o + qo, lse_b.data());
    }
    // [1, Hq, Sq_b] -> rows of [Hq, total_q]
    for (int h = 0; h < sp.heads_q; ++h) {
      std::copy(lse_b.begin() + static_cast<std::ptrdiff_t>(h) * sp.seq_q,
                lse_b.begin() + static_cast<std::ptrdiff_t>(h + 1) * sp.seq_q,
                lse + h * total_q + p.q_start(b));
    }
  });
}

void backward_varlen(const Problem& p, const double* q, const double* k, const double* v,
                     const double* dout, double* dq, double* dk, double* dv) {
  for_each_sequence(p, [&](int, const Problem& sp, std::int64_t qo, std::int64_t ko) {
    if (sp.seq_q == 0 || sp.seq_kv == 0) {  // no visible pair: no gradient
      const std::int64_t nq = static_cast<std::int64_t>(sp.seq_q) * sp.heads_q * sp.head_dim;
      const std::int64_t nk = static_cast<std::int64_t>(sp.seq_kv) * sp.heads_kv * sp.head_dim;
      std::fill(dq + qo, dq + qo + nq, 0.0);
      std::fill(dk + ko, dk + ko + nk, 0.0);
      std::fill(dv + ko, dv + ko + nk, 0.0);
      return;
    }
    backward(sp, q + qo, k + ko, v + ko, dout + qo, dq + qo, dk + ko, dv + ko);
  });
}

// Paged KV cache: each (sequence b, kv head hk) is a dense problem of batch 1 with one kv head
// and the group's query heads, on copies gathered through the block table (kv_row). Its rows are
// computed by the same code in the same row blocks over the same keys as the contiguous problem
// computes them (a head's rows depend on its own Q, K, V only), so the paged results are those of
// the same data laid out contiguously, bit for bit. Only the pages a sequence uses are read.
struct PagedSlice {
  Problem sp;                     // batch 1, heads_kv 1, heads_q = the heads taken
  std::vector<double> q, k, v;    // [Sq_b, heads, D], [Skv_b, 1, D] x 2
};

// Sequence b's keys of kv head hk, and the query heads [h0, h0 + nh) of its group.
PagedSlice paged_slice(const Problem& p, const double* q, const double* k, const double* v, int b,
                       int hk, int h0, int nh) {
  PagedSlice s;
  s.sp = p.sequence(b);
  s.sp.heads_q = nh;
  s.sp.heads_kv = 1;
  const int d = p.head_dim;
  const int sq = s.sp.seq_q, skv = s.sp.seq_kv;
  s.q.resize(static_cast<std::size_t>(sq) * nh * d);
  for (int i = 0; i < sq; ++i) {
    for (int g = 0; g < nh; ++g) {
      const double* src = q + ((p.q_start(b) + i) * p.heads_q + h0 + g) * d;
      std::copy(src, src + d, s.q.begin() + (static_cast<std::ptrdiff_t>(i) * nh + g) * d);
    }
  }
  s.k.resize(static_cast<std::size_t>(skv) * d);
  s.v.resize(s.k.size());
  for (int j = 0; j < skv; ++j) {
    const std::int64_t at = (p.kv_row(b, j) * p.heads_kv + hk) * d;
    std::copy(k + at, k + at + d, s.k.begin() + static_cast<std::ptrdiff_t>(j) * d);
    std::copy(v + at, v + at + d, s.v.begin() + static_cast<std::ptrdiff_t>(j) * d);
  }
  return s;
}

void forward_paged(const Problem& p, const double* q, const double* k, const double* v, double* o,
                   double* lse) {
  const int d = p.head_dim, g = p.group();
  const std::int64_t units = std::int64_t{p.batch} * p.heads_kv;
  // Over the units when each is too small to thread inside (decode: one row per head); results
  // do not depend on it.
  const double unit_work = static_cast<double>(g) * p.seq_q * p.seq_kv * d;
  const bool outer = units > 1 && unit_work < kMinThreadedWork &&
                     static_cast<double>(units) * unit_work >= kMinThreadedWork;
#pragma omp parallel for schedule(dynamic) if (outer)
  for (std::int64_t t = 0; t < units; ++t) {
    const int b = static_cast<int>(t / p.heads_kv), hk = static_cast<int>(t % p.heads_kv);
    const int sq = p.seq_q_of(b);
    if (sq == 0) continue;  // no rows
    const PagedSlice s = paged_slice(p, q, k, v, b, hk, hk * g, g);
    std::vector<double> os(s.q.size(), 0.0), ls(static_cast<std::size_t>(g) * sq, kNegInf);
    if (s.sp.seq_kv > 0) forward(s.sp, s.q.data(), s.k.data(), s.v.data(), os.data(), ls.data());
    for (int gi = 0; gi < g; ++gi) {
      const int h = hk * g + gi;
      for (int i = 0; i < sq; ++i) {
        std::copy(os.begin() + (static_cast<std::ptrdiff_t>(i) * g + gi) * d,
                  os.begin() + (static_cast<std::ptrdiff_t>(i) * g + gi + 1) * d,
                  o + ((p.q_start(b) + i) * p.heads_q + h) * d);
        lse[p.lse_start(b, h) + i] = ls[static_cast<std::size_t>(gi) * sq + i];
      }
    }
  }
}

[[noreturn]] void no_paged_backward() {
  throw std::invalid_argument(
      "attnbench::reference: a paged KV cache is forward-only (inference): no backward");
}

}  // namespace

// q: [B, Sq, Hq, D], k, v: [B, Skv, Hkv, D] -> o: [B, Sq, Hq, D], lse: [B, Hq, Sq]
// (varlen: q, o: [total_q, Hq, D], k, v: [total_kv, Hkv, D], lse: [Hq, total_q];
// paged: k, v: [num_pages, page_size, Hkv, D], q, o, lse as dense or varlen)
void forward(const Problem& p, const double* q, const double* k, const double* v, double* o,
             double* lse) {
  check_problem(p);
  if (p.paged()) return forward_paged(p, q, k, v, o, lse);
  if (p.varlen()) return forward_varlen(p, q, k, v, o, lse);
  const int d = p.head_dim, g = p.group();
  const int blocks = (p.seq_q + kRowBlock - 1) / kRowBlock;
  // A unit is one (b, kv head): its K and V are gathered once and shared by the group's query
  // heads (gathered per query head until 2026-12-06: g copies of each, the larger part of a GQA
  // decode case's reference). Parallel over the units when there are enough of them, else over
  // the group's (query head, row block) pairs of each. Every row is computed as before.
  const std::int64_t units = static_cast<std::int64_t>(p.batch) * p.heads_kv;
  const bool threaded = worth_threads(p);
  const bool over_units = units >= omp_get_max_threads();
#pragma omp parallel for schedule(dynamic) if (threaded && over_units)
  for (std::int64_t t = 0; t < units; ++t) {
    const int b = static_cast<int>(t / p.heads_kv);
    const int hk = static_cast<int>(t % p.heads_kv);
    const Mat kh = gather(k, b, p.seq_kv, p.heads_kv, hk, d);
    const Mat vh = gather(v, b, p.seq_kv, p.heads_kv, hk, d);
#pragma omp parallel for schedule(dynamic) if (threaded && !over_units)
    for (int w = 0; w < g * blocks; ++w) {
      const int h = hk * g + w / blocks;
      const int row0 = (w % blocks) * kRowBlock;
      const int nrows = std::min(kRowBlock, p.seq_q - row0);
      const Mat qb = gather(q, b, p.seq_q, p.heads_q, h, d, row0, nrows);
      Mat s, ob;
      double* lse_h = lse + (static_cast<std::int64_t>(b) * p.heads_q + h) * p.seq_q;
      forward_block(p, qb, row0, kh, vh, s, ob, lse_h + row0);
      for (int r = 0; r < nrows; ++r) {
        std::copy(ob.row(r).data(), ob.row(r).data() + d,
                  o + row_offset(b, row0 + r, p.seq_q, p.heads_q, h, d));
      }
    }
  }
}

// q: [B, Sq, Hq, D], k, v: [B, Skv, Hkv, D] -> o_rows: [rows.size(), D], lse_rows: [rows.size()]
void forward_rows(const Problem& p, const double* q, const double* k, const double* v, int b, int h,
                  const std::vector<int>& rows, double* o_rows, double* lse_rows) {
  check_problem(p);
  if (p.paged()) {
    // Sequence b's rows of head h: the one-head slice gathered through the block table, whose
    // rows forward() computes the same way (forward_paged).
    if (b < 0 || b >= p.batch || h < 0 || h >= p.heads_q) {
      throw std::out_of_range("attnbench::reference::forward_rows: (sequence, head) out of range");
    }
    for (int r : rows) {
      if (r < 0 || r >= p.seq_q_of(b))
        throw std::out_of_range("attnbench::reference::forward_rows: row out of range");
    }
    if (rows.empty()) return;
    if (p.seq_kv_of(b) == 0) {
      std::fill(o_rows, o_rows + static_cast<std::int64_t>(rows.size()) * p.head_dim, 0.0);
      std::fill(lse_rows, lse_rows + rows.size(), kNegInf);
      return;
    }
    const PagedSlice s = paged_slice(p, q, k, v, b, p.kv_head(h), h, 1);
    return forward_rows(s.sp, s.q.data(), s.k.data(), s.v.data(), 0, 0, rows, o_rows, lse_rows);
  }
  if (p.varlen()) {
    // Sequence b's rows: its own dense problem on its slices (forward() computes it the same way).
    if (b < 0 || b >= p.batch) {
      throw std::out_of_range("attnbench::reference::forward_rows: sequence out of range");
    }
    const Problem sp = p.sequence(b);
    if (sp.seq_kv == 0) {
      for (int r : rows) {
        if (r < 0 || r >= sp.seq_q)
          throw std::out_of_range("attnbench::reference::forward_rows: row out of range");
      }
      std::fill(o_rows, o_rows + static_cast<std::int64_t>(rows.size()) * p.head_dim, 0.0);
      std::fill(lse_rows, lse_rows + rows.size(), kNegInf);
      return;
    }
    if (sp.seq_q == 0) {
      if (!rows.empty())
        throw std::out_of_range("attnbench::reference::forward_rows: row out of range");
      return;
    }
    return forward_rows(sp, q + p.q_start(b) * p.heads_q * p.head_dim,
                        k + p.kv_start(b) * p.heads_kv * p.head_dim,
                        v + p.kv_start(b) * p.heads_kv * p.head_dim, 0, h, rows, o_rows, lse_rows);
  }
  if (b < 0 || b >= p.batch || h < 0 || h >= p.heads_q) {
    throw std::out_of_range("attnbench::reference::forward_rows: (batch, head) out of range");
  }
  for (int r : rows) {
    if (r < 0 || r >= p.seq_q) {
      throw std::out_of_range("attnbench::reference::forward_rows: row " + std::to_string(r) +
                              " out of range");
    }
  }
  const int d = p.head_dim;
  // Each needed row block is computed whole, exactly as forward() computes it.
  std::vector<int> blocks;
  for (int r : rows) blocks.push_back(r / kRowBlock);
  std::sort(blocks.begin(), blocks.end());
  blocks.erase(std::unique(blocks.begin(), blocks.end()), blocks.end());
  const Mat kh = gather(k, b, p.seq_kv, p.heads_kv, p.kv_head(h), d);
  const Mat vh = gather(v, b, p.seq_kv, p.heads_kv, p.kv_head(h), d);
  const int nb = static_cast<int>(blocks.size());
  std::vector<Mat> obs(nb);
  std::vector<std::vector<double>> lses(nb, std::vector<double>(kRowBlock));
#pragma omp parallel for schedule(dynamic) if (nb > 1 && worth_threads(p))
  for (int i = 0; i < nb; ++i) {
    const int row0 = blocks[i] * kRowBlock;
    const int nrows = std::min(kRowBlock, p.seq_q - row0);
    const Mat qb = gather(q, b, p.seq_q, p.heads_q, h, d, row0, nrows);
    Mat s;
    forward_block(p, qb, row0, kh, vh, s, obs[i], lses[i].data());
  }
  for (std::size_t n = 0; n < rows.size(); ++n) {
    const int blk = rows[n] / kRowBlock;
    const auto i = std::lower_bound(blocks.begin(), blocks.end(), blk) - blocks.begin();
    const int r = rows[n] - blk * kRowBlock;
    std::copy(obs[i].row(r).data(), obs[i].row(r).data() + d,
              o_rows + static_cast<std::int64_t>(n) * d);
    lse_rows[n] = lses[i][r];
  }
}

// q, dout: [B, Sq, Hq, D], k, v: [B, Skv, Hkv, D] -> dq like q, dk and dv like k
// (varlen: packed THD as in forward)
void backward(const Problem& p, const double* q, const double* k, const double* v,
              const double* dout, double* dq, double* dk, double* dv) {
  check_problem(p);
  if (p.paged()) no_paged_backward();
  if (p.varlen()) return backward_varlen(p, q, k, v, dout, dq, dk, dv);
  const Inputs in{q, k, v, dout};
  const int d = p.head_dim;
  const int g = p.group();
  const std::int64_t groups = static_cast<std::int64_t>(p.batch) * p.heads_kv;
  // Parallel over (b, kv head) when there are enough of them (no races on dK/dV: each group owns
  // its slice), else over the work units inside each group. Both give the same bits.
  const bool threaded = worth_threads(p);
  const bool over_groups = groups >= omp_get_max_threads();
#pragma omp parallel for schedule(dynamic) if (threaded && over_groups)
  for (std::int64_t t = 0; t < groups; ++t) {
    const int b = static_cast<int>(t / p.heads_kv);
    const int hk = static_cast<int>(t % p.heads_kv);
    std::vector<double> dq_group(static_cast<std::size_t>(g) * p.seq_q * d);
    Mat dkh, dvh;
    backward_group(p, in, b, hk, dq_group.data(), dkh, dvh, threaded && !over_groups);
    for (int gi = 0; gi < g; ++gi) {
      scatter(dq_group.data() + static_cast<std::int64_t>(gi) * p.seq_q * d, dq, b, p.seq_q,
              p.heads_q, hk * g + gi, d);
    }
    scatter(dkh.data(), dk, b, p.seq_kv, p.heads_kv, hk, d);
    scatter(dvh.data(), dv, b, p.seq_kv, p.heads_kv, hk, d);
  }
}

// q, dout: [B, Sq, Hq, D], k, v: [B, Skv, Hkv, D] -> dq_group: [group, Sq, D],
// dk_head, dv_head: [Skv, D] for kv head hk of batch b
void backward_kv_head(const Problem& p, const double* q, const double* k, const double* v,
                      const double* dout, int b, int hk, double* dq_group, double* dk_head,
                      double* dv_head) {
  check_problem(p);
  if (p.paged()) no_paged_backward();
  if (p.varlen()) {
    // Sequence b's kv head: its own dense problem on its slices; dq_group: [group, seq_q_b, D],
    // dk_head, dv_head: [seq_kv_b, D].
    if (b < 0 || b >= p.batch || hk < 0 || hk >= p.heads_kv) {
      throw std::out_of_range(
          "attnbench::reference::backward_kv_head: (sequence, kv head) out of range");
    }
    const Problem sp = p.sequence(b);
    if (sp.seq_q == 0 || sp.seq_kv == 0) {
      std::fill(dq_group, dq_group + static_cast<std::int64_t>(p.group()) * sp.seq_q * p.head_dim,
                0.0);
      std::fill(dk_head, dk_head + static_cast<std::int64_t>(sp.seq_kv) * p.head_dim, 0.0);
      std::fill(dv_head, dv_head + static_cast<std::int64_t>(sp.seq_kv) * p.head_dim, 0.0);
      return;
    }
    const std::int64_t qo = p.q_start(b) * p.heads_q * p.head_dim;
    const std::int64_t ko = p.kv_start(b) * p.heads_kv * p.head_dim;
    return backward_kv_head(sp, q + qo, k + ko, v + ko, dout + qo, 0, hk, dq_group, dk_head,
                            dv_head);
  }
  if (b < 0 || b >= p.batch || hk < 0 || hk >= p.heads_kv) {
    throw std::out_of_range(
        "attnbench::reference::backward_kv_head: (batch, kv head) out of range");
  }
  Mat dkh, dvh;
  backward_group(p, Inputs{q, k, v, dout}, b, hk, dq_group, dkh, dvh, worth_threads(p));
  const std::int64_t n = static_cast<std::int64_t>(p.seq_kv) * p.head_dim;
  std::copy(dkh.data(), dkh.data() + n, dk_head);
  std::copy(dvh.data(), dvh.data() + n, dv_head);
}

}  // namespace attnbench::reference
