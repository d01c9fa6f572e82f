// AttnShape: the sizes every attention kernel reads, built once from a Problem. Each family's
// kernel params struct derives from it, so the shape sits at the head of the params (the first
// 32 bytes of every kernel's parameter block) and the kernels read p.seq_q, p.group, ... under
// one set of names in every family. Plain C++, so the CPU emulation of the mma and Hopper
// kernels builds it too.
//
// Conventions (the same as core/problem.hpp): tensors are [B, S, H, head_dim]; query head h
// reads kv head h / group; causal is bottom-right aligned: row i sees keys j <= i + causal_offset.
#pragma once

#include <algorithm>
#include <limits>
#include <stdexcept>

#include "attnbench/problem.hpp"

namespace attnbench::cuda {

struct AttnShape {
  int seq_q, seq_kv;
  int heads_q, heads_kv;
  int group;          // heads_q / heads_kv
  int head_dim;       // d; a kernel's tile width may be larger (the columns past d are padding)
  int causal_offset;  // seq_kv - seq_q: causal row i sees keys j <= i + causal_offset
  float scale_log2;   // softmax scale * log2(e): the kernels keep scores in the log2 domain
};
static_assert(sizeof(AttnShape) == 32, "the head of every params struct");

// The log2 domain's constants: log2(e) (scores scale into it; natural-log LSE converts by it) and
// ln(2) (back to the natural-log LSE). The one definition for every family.
inline constexpr double kLog2eD = 1.4426950408889634;
inline constexpr float kLog2e = static_cast<float>(kLog2eD);
inline constexpr float kLn2 = 0.6931471805599453f;

inline AttnShape make_shape(const Problem& p) {
  AttnShape s{};
  s.seq_q = p.seq_q;
  s.seq_kv = p.seq_kv;
  s.heads_q = p.heads_q;
  s.heads_kv = p.heads_kv;
  s.group = p.group();
  s.head_dim = p.head_dim;
  s.causal_offset = p.seq_kv - p.seq_q;
  s.scale_log2 = static_cast<float>(p.effective_scale() * kLog2eD);
  return s;
}

// The sliding window and the soft cap (Problem::window_left, window_right, softcap) in the
// kernels' terms, for the kernels that declare them; a member at the end of their params, so
// that the dense fields keep their offsets.
// Window: row i sees the keys j with
//   i + causal_offset - window_left <= j <= i + causal_offset + window_right, and j < seq_kv;
// both bounds finite (an unbounded side is seq_q + seq_kv, wider than any row's reach) and causal
// folded into window_right (at most 0), so one pair of comparisons is the whole mask.
// Soft cap: the raw score q.k becomes t = tanh(q.k * softcap_in) and the capped logit
// softcap * t; the kernels keep t and use softcap_log2 = softcap * log2(e) where a dense kernel
// uses scale_log2. The capped logit's derivative is scale * (1 - t^2).
// Varlen (issue 30; only in the kLocal instantiations, common/dispatch.hpp): cu_seqlens_q and
// cu_seqlens_kv are the problem's prefix sums (FwdArgs), null for a dense problem; a block of
// sequence b reads its lengths and first rows there (seq_of below). The shape then holds the
// batch's longest lengths (the grid's extent), and the LSE is [heads_q, total_q].
struct AttnVariant {
  int window_left, window_right;
  float softcap_in;    // scale / softcap (0: no soft cap)
  float softcap_log2;  // softcap * log2(e)
  float softcap_log2_inv;  // 1 / softcap_log2: t from P's exponent (flash_bwd_wgmma's dS)
  const int* cu_seqlens_q;
  const int* cu_seqlens_kv;
  int total_q;  // varlen: the packed query rows (the LSE's row count per head)
};

// Sequence b of a problem as a kernel block sees it: its lengths, causal offset, and its first
// query and key rows in the packed tensors (dense: b * seq_q and b * seq_kv, the shape's). The
// LSE of (b, head h, row i) is at lse_row(h) + i.
struct SeqView {
  int seq_q, seq_kv, causal_offset;
  long long q_start, kv_start;  // rows of the [tokens, heads, d] tensors
  long long lse_start;          // (b, head 0, row 0) in the LSE
  long long lse_head_stride;    // between heads: seq_q (dense) or total_q (varlen)
  constexpr long long lse_row(int h) const { return lse_start + h * lse_head_stride; }
};
#if defined(__CUDACC__)
#define ATTN_HD __host__ __device__
#else
#define ATTN_HD
#endif
ATTN_HD inline SeqView seq_of(const AttnShape s, const AttnVariant v, int b) {
  SeqView q{};
  if (v.cu_seqlens_q != nullptr) {
    const int q0 = v.cu_seqlens_q[b], kv0 = v.cu_seqlens_kv[b];
    q.seq_q = v.cu_seqlens_q[b + 1] - q0;
    q.seq_kv = v.cu_seqlens_kv[b + 1] - kv0;
    q.q_start = q0;
    q.kv_start = kv0;
    q.lse_start = q0;
    q.lse_head_stride = v.total_q;
  } else {
    q.seq_q = s.seq_q;
    q.seq_kv = s.seq_kv;
    q.q_start = static_cast<long long>(b) * s.seq_q;
    q.kv_start = static_cast<long long>(b) * s.seq_kv;
    q.lse_head_stride = s.seq_q;
    q.lse_start = static_cast<long long>(b) * s.heads_q * s.seq_q;
  }
  q.causal_offset = q.seq_kv - q.seq_q;
  return q;
}
#undef ATTN_HD

// The kernels' window rule, in one place. Everything by value: a reference to a kernel parameter
// takes its address, which can make the compiler copy the parameters to local memory.
// The row whose diagonal is diag (i + causal_offset) may not see key j.
constexpr bool window_hides(const AttnVariant v, int diag, int j) {
  return j > diag + v.window_right || j < diag - v.window_left;
}
// Keys [n0, n0 + n) cross an edge of the window for some row whose diagonal is in
// [diag_first, diag_last]: past the first row's right edge or before the last row's left edge.
// Only such tiles need the mask.
constexpr bool window_crosses(const AttnVariant v, int diag_first, int diag_last, int n0, int n) {
  return n0 + n - 1 > diag_first + v.window_right || n0 < diag_last - v.window_left;
}

// The K/V tiles of BN keys that query rows [m0, m0 + rows) see under the window: tiles first ..
// first + count - 1 (visibility ranges are non-decreasing in the row, so the first row bounds the
// left side and the last row the right). The dense and causal kernels keep their own code (their
// SASS is unchanged by the window).
struct TileSpan {
  int first, count;
};
template <int BN>
constexpr TileSpan window_key_tiles(int seq_kv, int causal_offset, const AttnVariant v, int m0,
                                    int rows) {
  const int begin = std::max(0, m0 + causal_offset - v.window_left);
  const int end = std::max(0, std::min(seq_kv, m0 + rows + causal_offset + v.window_right));
  const int first = begin / BN;
  return {first, end > begin ? (end + BN - 1) / BN - first : 0};
}

// The launch order of a grid of pairs x blocks: each (head, sequence) pair has `blocks` blocks
// (the forward's query blocks, the backward's key blocks), numbered so that block 0 of a pair is
// its longest under causal masking. The pairs go in groups of `group`; within a group, block by
// block, each over the group's pairs. With group = launch_group (about one wave of blocks), a
// group's pairs still read their shared inputs (the forward's K/V, the backward's Q/dO) from L2
// at about the same time, as when each pair's blocks were adjacent, and the causal blocks run
// longest first over the group, so that the grid no longer ends on a pair's longest block. With
// one block per SM, that tail cost 5-14% of the time at causal 2k-8k on the FA3 grid in a
// list-scheduling model, and 0-3% in this order (results/h200/issue27/block_order_model.py).
// Every pair's lower blocks still come before its higher ones (the backward's deterministic dQ
// order relies on it).
struct GroupedIndex {
  int block, pair;
};
constexpr GroupedIndex grouped_order(int linear, int blocks, int group, int pairs) {
  const int per_group = group * blocks;
  const int g = linear / per_group, r = linear - g * per_group;
  const int first = g * group, size = std::min(group, pairs - first);
  const int block = r / size;
  return {block, first + (r - block * size)};
}
// grouped_order's group for a device of `sms` SMs: about one wave of blocks, at least 1 pair and at
// most all of them.
inline int launch_group(int sms, int blocks, int pairs) {
  return std::clamp(sms / std::max(1, blocks), 1, std::max(1, pairs));
}

inline AttnVariant make_variant(const Problem& p) {
  const long long unbounded = std::min<long long>(static_cast<long long>(p.seq_q) + p.seq_kv,
                                                  std::numeric_limits<int>::max() / 4);
  auto side = [&](int w) {
    return static_cast<int>(w < 0 ? unbounded : std::min<long long>(w, unbounded));
  };
  AttnVariant v{};
  v.window_left = side(p.window_left);
  v.window_right = p.causal ? 0 : side(p.window_right);
  if (p.softcap > 0) {
    v.softcap_in = static_cast<float>(p.effective_scale() / p.softcap);
    v.softcap_log2 = static_cast<float>(p.softcap * kLog2eD);
    v.softcap_log2_inv = static_cast<float>(1.0 / (p.softcap * kLog2eD));
  }
  v.total_q = static_cast<int>(p.total_q());
  return v;
}

// A window whose rows each see at most `span` keys (left + right + 1, causal's right side 0):
// where the Hopper kernels take their narrow-window tiles (fwd_wgmma::kNarrowSpan,
// bwd_wgmma::kNarrowSpan).
inline bool window_spans_at_most(const Problem& p, long long span) {
  if (!p.has_window()) return false;
  const AttnVariant v = make_variant(p);
  return static_cast<long long>(v.window_left) + v.window_right + 1 <= span;
}

// make_variant with the call's cu_seqlens (FwdArgs or BwdArgs); a varlen problem without them is
// an error (the C API's caller forgot ab_call_set_cu_seqlens).
template <class Args>
AttnVariant make_variant(const Args& a) {
  AttnVariant v = make_variant(a.p);
  if (a.p.varlen()) {
    if (!a.cu_seqlens_q || !a.cu_seqlens_kv) {
      throw std::invalid_argument("a varlen problem needs cu_seqlens_q and cu_seqlens_kv (FwdArgs)");
    }
    v.cu_seqlens_q = a.cu_seqlens_q;
    v.cu_seqlens_kv = a.cu_seqlens_kv;
  }
  return v;
}

// A params struct P (deriving from AttnShape) zero-initialised, with its shape from p.
template <class P>
P with_shape(const Problem& p) {
  P x{};
  static_cast<AttnShape&>(x) = make_shape(p);
  return x;
}

}  // namespace attnbench::cuda
