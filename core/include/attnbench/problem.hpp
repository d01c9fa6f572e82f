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
//
// Paged KV cache (issue 29; vLLM's PagedAttention, FlashAttention's page_table, FlashInfer's paged
// KV): with page_size > 0, K and V are a pool of pages instead of one row per key,
//   k, v         : [num_pages, page_size, heads_kv, head_dim]
//   block_table  : int32 [batch, pages_per_seq], row-major: sequence b's logical page lp lives at
//                  physical page block_table[b * pages_per_seq + lp]
// so key j of sequence b (j < its context length, seq_kv_of(b)) is row j % page_size of page
// block_table[b][j / page_size]: kv_row(b, j) is its row in the pool, as an index into
// [num_pages * page_size, heads_kv, head_dim]. Sequence b uses its first pages_of(b) =
// ceil(seq_kv_of(b) / page_size) entries; the rest of its row is padding, never read for keys (0
// in generated tables, -1 after an explicit row shorter than the longest). Pages may come in any order, and one page may appear in several sequences
// (a shared prefix) or twice in one. The queries (q, o, lse) keep their layout: dense BSHD, or
// packed THD when seqlens_q / seqlens_kv are set (a ragged batch: one context length per
// sequence). Causal stays bottom-right aligned: new tokens see the whole cache and themselves.
// Paged problems are forward-only (inference): there is no dK, dV through a block table.
// The table is made by make_block_table() from page_order (sequential: the pages in sequence
// order; shuffled: a fixed-seed permutation of the pool) or given as explicit rows
// (set_block_table); it is shared between copies of the problem (FwdArgs carries one per call).
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "attnbench/dtype.hpp"

namespace attnbench {

inline constexpr int kMaxHeadDim = 256;
// Queries per sequence up to which a problem counts as decode (speculative decoding's new tokens):
// Problem::memory_bound().
inline constexpr int kMaxDecodeQueries = 16;
// The seed of PageOrder::shuffled's permutation (fixed: the same table on every machine).
inline constexpr std::uint64_t kPageShuffleSeed = 29;

// Every implementation takes the scale in float32, and the exp2-based kernels scale by
// scale * log2(e): the largest scale for which both are finite.
inline constexpr double kMaxScale = 3.4028234663852886e38 / 1.4426950408889634;
inline constexpr const char* kScaleOverflow =
    "overflows float32, the type every implementation takes the scale in (at most 2.36e38, so that "
    "scale * log2(e) stays finite)";

// How a paged problem's block table was made (results files record this instead of the table).
enum class PageOrder {
  sequential,  // sequence 0's pages first, then sequence 1's, ...: page k of the pool is used k-th
  shuffled,    // the same pages drawn from the pool in a fixed-seed random order
  table,       // explicit rows (set_block_table), written out in full
};
std::string_view to_string(PageOrder o);
// "sequential" or "shuffled" ("table" is not a name a config gives: it gives the rows).
std::optional<PageOrder> parse_page_order(std::string_view s);

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
  // Paged KV cache (see the top of this file); page_size 0: K and V contiguous, the rest unused.
  int page_size = 0;
  PageOrder page_order = PageOrder::sequential;
  int num_pages = 0;      // pages in the pool; make_block_table: 0 means just those the table uses
  int pages_per_seq = 0;  // the block table's row length
  std::shared_ptr<const std::vector<std::int32_t>> block_table;  // [batch, pages_per_seq]

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
  // dense and batch is 1. Its tensors are those of this problem from q_start(b) / kv_start(b);
  // paged: it is not paged, its K and V being sequence b's keys gathered through the block table
  // (kv_row(b, j) for j < seq_kv_of(b)).
  Problem sequence(int b) const;
  // Sets the lengths, batch (their count) and seq_q, seq_kv (their maxima).
  void set_seqlens(std::vector<int> q, std::vector<int> kv);

  // Paged KV cache.
  bool paged() const { return page_size > 0; }
  // Pages sequence b's context fills: ceil(seq_kv_of(b) / page_size).
  int pages_of(int b) const;
  // The pages every context fills, summed over the sequences.
  std::int64_t pages_needed() const;
  // Physical page of sequence b's logical page lp (lp < pages_per_seq).
  std::int32_t page(int b, int lp) const {
    return (*block_table)[static_cast<std::size_t>(std::int64_t{b} * pages_per_seq + lp)];
  }
  // Row of sequence b's key j in K and V, counted in rows of [heads_kv, head_dim]: through the
  // block table when paged, else kv_start(b) + j (dense BSHD or packed THD).
  std::int64_t kv_row(int b, int j) const {
    if (!paged()) return kv_start(b) + j;
    return std::int64_t{page(b, j / page_size)} * page_size + j % page_size;
  }
  // (Re)builds block_table from page_order, page_size and the context lengths (pages_per_seq =
  // ceil(seq_kv / page_size); num_pages, when 0, becomes pages_needed()). page_order table: only
  // num_pages, when 0, becomes the largest entry + 1. Leaves what validate() must refuse (a pool
  // too small, a bad page size) for validate() to say.
  void make_block_table();
  // An explicit table, one row of physical pages per sequence (rows may differ in length; shorter
  // ones are padded with -1 to the longest): page_order becomes table. num_pages as given (0: the
  // largest entry + 1, see make_block_table).
  void set_block_table(const std::vector<std::vector<int>>& rows);
  // The table as rows (for a results file): pages_per_seq entries each, an explicit table's -1
  // padding left out.
  std::vector<std::vector<int>> block_table_rows() const;

  double effective_scale() const;
  int group() const { return heads_q / heads_kv; }  // query heads per kv head
  int kv_head(int h) const { return h / group(); }

  std::int64_t q_elems() const;    // also o, do, dq
  std::int64_t kv_elems() const;   // also v, dk, dv (paged: the whole pool of pages)
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
  // The bytes a forward must move through memory at least (issue 29's bandwidth figure): K and V
  // of each sequence's context read once (sum of seq_kv_of(b) * heads_kv * head_dim * 2 tensors,
  // whatever the pool holds), Q read and O written once; LSE (float32) left out.
  std::int64_t hbm_bytes_fwd() const;
  // Whether rows of this problem are judged by bandwidth rather than FLOPs: paged, or at most
  // kMaxDecodeQueries queries per sequence (decode and speculative decode).
  bool memory_bound() const;

  // The sum of the first b lengths.
  static std::int64_t packed_start(const std::vector<int>& lens, int b);

  // Short unique text, e.g. "b2_hq8_hkv2_sq17_skv33_d64_causal_bf16"; a window adds "_wl<L>"
  // and/or "_wr<R>", soft-capping "_softcap<C>", varlen "_varlen_q<total_q>_kv<total_kv>_<hash>"
  // (hash: 8 hex digits of FNV-1a over the lengths; b, sq and skv are the count and the maxima),
  // a paged KV cache "_page<page_size>" and "_shuffled" or "_table<hash of the table>" (nothing
  // for sequential), and "_pool<num_pages>" when the pool holds more pages than the contexts use.
  std::string label() const;
};

// The int32 arrays a device kernel reads for a varlen or paged problem (FwdArgs), in one buffer
// that the harness uploads to the implementation's device: the offset of each array in `data`,
// -1 where the problem has none. The host copy for CPU code is the problem itself.
struct SequenceMetadata {
  std::vector<std::int32_t> data;
  std::int64_t cu_seqlens_q = -1;   // varlen: [batch + 1], q_start(b) (FlashAttention's cu_seqlens_q)
  std::int64_t cu_seqlens_kv = -1;  // varlen and not paged: [batch + 1], kv_start(b)
  std::int64_t seqlens_kv = -1;     // varlen or paged: [batch], seq_kv_of(b) (seqused_k)
  std::int64_t block_table = -1;    // paged: [batch, pages_per_seq], Problem::block_table
};
// Empty (every offset -1) for a dense, contiguous problem. p must be valid.
SequenceMetadata sequence_metadata(const Problem& p);

// Returns an empty string if the problem is valid, otherwise a message that names the field and
// the value. max_bytes bounds the total size of q, k, v, o and their gradients (0 = no bound).
std::string validate(const Problem& p, std::int64_t max_bytes = 0);

}  // namespace attnbench
