// The attention problem every implementation computes (see docs/architecture.md):
//   S = scale * Q K^T, P = softmax(S + mask), O = P V, LSE[i] = log sum_j exp(S[i,j]).
// Layout BSHD, contiguous:
//   q, o, do, dq : [batch, seq_q,  heads_q,  head_dim]
//   k, v, dk, dv : [batch, seq_kv, heads_kv, head_dim]
//   lse          : [batch, heads_q, seq_q]  (float32, natural log)
// GQA: query head h reads kv head h / (heads_q / heads_kv). Causal is bottom-right aligned:
// query i sees key j iff j <= i + seq_kv - seq_q; a row that sees no key has O = 0, LSE = -inf.
// Sliding window (local attention, FlashAttention's window_size = (left, right)), aligned the
// same way: with the diagonal c(i) = i + seq_kv - seq_q, query i sees key j iff
// c(i) - window_left <= j <= c(i) + window_right, -1 leaving that side unbounded; it composes
// with causal (which bounds the right side at 0). Soft-capping (Gemma 2): with softcap > 0 the
// scaled score s becomes softcap * tanh(s / softcap) before the mask and the softmax, so
// dS reaching Q and K carries the factor 1 - tanh^2(s / softcap).
//
// Variable-length batches (varlen, FlashAttention's cu_seqlens): with seqlens_q and seqlens_kv set
// (one length per sequence each, 0 allowed), the batch is packed in the THD layout, sequence b's
// tokens following sequence b - 1's:
//   q, o, do, dq : [total_q,  heads_q,  head_dim]   total_q  = sum of seqlens_q
//   k, v, dk, dv : [total_kv, heads_kv, head_dim]   total_kv = sum of seqlens_kv
//   lse          : [heads_q, total_q]               (FlashAttention 2/3's varlen LSE)
// batch is the number of sequences, seq_q and seq_kv their longest lengths (max_seqlen). Each
// sequence b is its own problem (sequence(b): seqlens_q[b] x seqlens_kv[b]), with causal and the
// window aligned bottom-right in it. A sequence with queries but no key has O = 0, LSE = -inf and
// no gradient; one without queries has no rows at all. A dense problem is the same THD layout with
// every length equal (q_start(b) = b * seq_q), except for its LSE, [batch, heads_q, seq_q]: code
// that indexes through q_start / kv_start / lse_start serves both.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "attnbench/dtype.hpp"

namespace attnbench {

inline constexpr int kMaxHeadDim = 256;

// Every implementation takes the scale in float32, and the exp2-based kernels scale by
// scale * log2(e): the largest scale for which both are finite.
inline constexpr double kMaxScale = 3.4028234663852886e38 / 1.4426950408889634;
inline constexpr const char* kScaleOverflow =
    "overflows float32, the type every implementation takes the scale in (at most 2.36e38, so that "
    "scale * log2(e) stays finite)";

struct Problem {
  int batch = 1;
  int heads_q = 1;
  int heads_kv = 1;
  int seq_q = 1;
  int seq_kv = 1;
  int head_dim = 64;
  bool causal = false;
  double scale = 0;  // 0 means the default 1/sqrt(head_dim); see effective_scale()
  DType dtype = DType::f32;
  int window_left = -1;   // keys before the diagonal a query sees (-1: all)
  int window_right = -1;  // keys after the diagonal a query sees (-1: all; causal makes it 0)
  double softcap = 0;     // logit soft-capping, softcap * tanh(s / softcap); 0: off
  // Varlen: per-sequence lengths, both empty for a dense problem (see the top of this file). A
  // ragged decode batch (issue 29: a context length per sequence) is meant to reuse them.
  std::vector<int> seqlens_q;
  std::vector<int> seqlens_kv;

  bool has_window() const { return window_left >= 0 || window_right >= 0; }
  bool varlen() const { return !seqlens_q.empty() || !seqlens_kv.empty(); }

  // Per sequence b (dense: the same for every b). Lengths, and the first token of the sequence in
  // the packed q (o, do, dq) and k (v, dk, dv) tensors; q_start(batch) = total_q().
  int seq_q_of(int b) const {
    return seqlens_q.empty() ? seq_q : seqlens_q[static_cast<std::size_t>(b)];
  }
  int seq_kv_of(int b) const {
    return seqlens_kv.empty() ? seq_kv : seqlens_kv[static_cast<std::size_t>(b)];
  }
  // (Dense: b * seq, inline, as the implementations computed it before varlen.)
  std::int64_t q_start(int b) const {
    return seqlens_q.empty() ? std::int64_t{b} * seq_q : packed_start(seqlens_q, b);
  }
  std::int64_t kv_start(int b) const {
    return seqlens_kv.empty() ? std::int64_t{b} * seq_kv : packed_start(seqlens_kv, b);
  }
  std::int64_t total_q() const { return q_start(batch); }
  std::int64_t total_kv() const { return kv_start(batch); }
  // Index in lse of (sequence b, query head h, row 0); the rows of (b, h) follow contiguously.
  std::int64_t lse_start(int b, int h) const;
  // Sequence b as a dense problem of batch 1 (every other field kept); the problem itself when
  // dense and batch is 1. Its tensors are those of this problem from q_start(b) / kv_start(b).
  Problem sequence(int b) const;
  // Sets the lengths, batch (their count) and seq_q, seq_kv (their maxima).
  void set_seqlens(std::vector<int> q, std::vector<int> kv);

  double effective_scale() const;
  int group() const { return heads_q / heads_kv; }  // query heads per kv head
  int kv_head(int h) const { return h / group(); }

  std::int64_t q_elems() const;    // also o, do, dq
  std::int64_t kv_elems() const;   // also v, dk, dv
  std::int64_t lse_elems() const;  // float32
  std::int64_t q_bytes() const { return q_elems() * static_cast<std::int64_t>(dtype_size(dtype)); }
  std::int64_t kv_bytes() const { return kv_elems() * static_cast<std::int64_t>(dtype_size(dtype)); }
  std::int64_t lse_bytes() const { return lse_elems() * 4; }

  // Visibility (causal and window), bottom-right aligned, of a dense problem (varlen: of
  // sequence(b)): row i sees the keys
  // [first_visible_key(i), first_invisible_key(i)), an empty range when the first is not below
  // the second. Both are non-decreasing in i.
  int first_visible_key(int i) const;
  int first_invisible_key(int i) const;
  bool visible(int i, int j) const { return j >= first_visible_key(i) && j < first_invisible_key(i); }
  // Keys row i sees (0 for a row that sees none).
  int visible_keys(int i) const { return std::max(0, first_invisible_key(i) - first_visible_key(i)); }
  // The keys of the tile [j0, j0 + n) that row i sees, as offsets [lo, hi) into the tile
  // (lo <= hi; equal when it sees none): the one clamp of the visibility range to a tile.
  struct KeySpan {
    int lo, hi;
    int size() const { return hi - lo; }
  };
  KeySpan visible_in(int i, int j0, int n) const {
    const int lo = std::clamp(first_visible_key(i) - j0, 0, n);
    return {lo, std::clamp(first_invisible_key(i) - j0, lo, n)};
  }

  // Number of visible (query, key) pairs per (batch, head), counted exactly; varlen: per head,
  // summed over the sequences.
  std::int64_t visible_pairs() const;
  // FlashAttention convention: forward = 4 * b * h * (visible pairs) * d; backward = 2.5x forward.
  // Varlen: the sum over the sequences of their own (dense) counts.
  double flops_fwd() const;
  double flops_bwd() const { return 2.5 * flops_fwd(); }

  // Varlen: the prefix sums of seqlens_q / seqlens_kv (batch + 1 entries, 0 first), the
  // cu_seqlens the implementations receive (FwdArgs); empty for a dense problem.
  std::vector<std::int32_t> cu_seqlens_q() const { return prefix_sums(seqlens_q); }
  std::vector<std::int32_t> cu_seqlens_kv() const { return prefix_sums(seqlens_kv); }

  // The sum of the first b lengths.
  static std::int64_t packed_start(const std::vector<int>& lens, int b);
  static std::vector<std::int32_t> prefix_sums(const std::vector<int>& lens);

  // Short unique text, e.g. "b2_hq8_hkv2_sq17_skv33_d64_causal_bf16"; a window adds "_wl<L>"
  // and/or "_wr<R>", soft-capping "_softcap<C>", varlen "_varlen_q<total_q>_kv<total_kv>_<hash>"
  // (hash: 8 hex digits of FNV-1a over the lengths; b, sq and skv are the count and the maxima).
  std::string label() const;
};

// Returns an empty string if the problem is valid, otherwise a message that names the field and
// the value. max_bytes bounds the total size of q, k, v, o and their gradients (0 = no bound).
std::string validate(const Problem& p, std::int64_t max_bytes = 0);

}  // namespace attnbench
