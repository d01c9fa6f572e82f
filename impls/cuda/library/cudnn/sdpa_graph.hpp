// The two cuDNN operation graphs of cuda.cudnn_sdpa (forward with LSE, backward), built from the
// primitive operations that cuDNN's fused flash-attention engines recognise (the same pattern
// cudnn-frontend's composite SDPA nodes lower to). Layouts are attnbench's BSHD, given to cuDNN
// as [b, h, s, d] dims with strides, so no tensor is copied. A varlen (packed THD) batch is the
// same [b, h, s, d] view with s the longest sequence, each sequence starting at a ragged offset,
// and a padding mask from per-sequence lengths (cudnn-frontend's padding_mask + ragged offsets).
#pragma once

#ifdef ATTNBENCH_HAVE_CUDNN_HEADERS

#include <cudnn.h>

#include <cstddef>
#include <cstdint>

#include "library/cudnn/graph.hpp"

namespace attnbench::cudnn {

// Unique ids of the tensors the caller binds at execution.
enum SdpaUid : Graph::Id {
  kQ = 1,
  kK,
  kV,
  kO,
  kStats,
  kdO,
  kdQ,
  kdK,
  kdV,
  kSeqLenQ,     // [b,1,1,1] int32: per-batch seq_q (varlen, or the backward padding workaround)
  kSeqLenKV,    // [b,1,1,1] int32: per-batch seq_kv
  kSoftmaxSum,  // [b,hq,sq,1] float: rowsum(dO * O), workspace
  kdQAccum,     // [b,hq,sq,d] float: dQ accumulator, workspace
  // Varlen only: [b+1,1,1,1] int32 element offsets of each sequence's first token.
  kRaggedQ,      // in Q, O, dO, dQ: cu_seqlens_q * hq * d
  kRaggedKV,     // in K, V, dK, dV: cu_seqlens_kv * hkv * d
  kRaggedStats,  // in Stats (LSE [hq, total_q]): cu_seqlens_q
};

struct SdpaShape {
  std::int64_t b, hq, hkv, sq, skv, d;
  bool causal;
  float scale;
  cudnnDataType_t io;  // CUDNN_DATA_HALF or CUDNN_DATA_BFLOAT16
  // Sliding window as attnbench defines it (attnbench/problem.hpp): with the bottom-right diagonal
  // c(i) = i + skv - sq, row i sees key j iff c(i) - window_left <= j <= c(i) + window_right;
  // -1 leaves that side unbounded. Composes with causal (which bounds the right side at 0).
  std::int64_t window_left = -1;
  std::int64_t window_right = -1;
  // Varlen (packed THD, attnbench/problem.hpp): b sequences of at most sq queries and skv keys,
  // total_q and total_kv tokens in all. Q/O/dO/dQ are [total_q, hq, d], K/V/dK/dV
  // [total_kv, hkv, d], Stats (LSE) [hq, total_q]; causal and windows are bottom-right per
  // sequence.
  bool varlen = false;
  std::int64_t total_q = 0;
  std::int64_t total_kv = 0;
};

// The diagonal band the graphs give cuDNN, in cuDNN's (cudnn-frontend's) terms; -1: no bound.
// Right bound R keeps j <= c(i) + R: 0 under causal, else window_right. Left bound L keeps
// j > c(i) - L, i.e. L = window_left + 1 keys up to and including the diagonal. window_right is
// first capped at sq and window_left at skv, past which they mask nothing (the int32 index sums in
// the graph cannot overflow).
std::int64_t sdpa_right_bound(const SdpaShape& s);
std::int64_t sdpa_left_bound(const SdpaShape& s);
// Whether the band is shifted to the bottom-right diagonal inside the graph (seq_q != seq_kv, or
// varlen: per sequence, by its length tensors); with equal lengths the two alignments coincide and
// the plain (top-left) pattern is used.
inline bool sdpa_bottom_right(const SdpaShape& s) {
  return s.varlen || s.sq != s.skv;
}

// Version-dependent choices, decided once from the loaded cuDNN (see sdpa_graph.cpp).
struct SdpaFlags {
  float masked_value;       // -inf (cuDNN >= 9.10) or lowest float (older prefer it)
  bool bwd_padding_mask;    // dense backward needs an explicit padding mask (cuDNN <= 9.15,
                            // s_kv % 128; varlen has its own, so never there)
  bool bwd_double_padding;  // cuDNN 9.0-9.9: any backward padding mask is applied again after
                            // subtracting the stats
  bool zero_dq_accum;       // cuDNN < 9.6 does not clear the dQ accumulator itself
};
SdpaFlags sdpa_flags(std::size_t cudnn_version, const SdpaShape& s);

// q,o: [b, sq, hq, d]; k,v: [b, skv, hkv, d] (BSHD); stats (LSE): [b, hq, sq] float. Varlen:
// q,o [total_q, hq, d]; k,v [total_kv, hkv, d]; stats [hq, total_q]; plus kSeqLenQ/kSeqLenKV and
// the kRagged* offsets.
Graph build_sdpa_fwd(const SdpaShape& s, const SdpaFlags& f);
// Adds do, dq (like q) and dk, dv (like k); reads kSoftmaxSum/kdQAccum from the workspace.
Graph build_sdpa_bwd(const SdpaShape& s, const SdpaFlags& f);

// Bytes of the backward's own workspace tensors (softmax sum + dQ accumulator), each aligned.
// Varlen: padded to [b, hq, sq(max)] like cudnn-frontend's default (not its max_total_seq_len).
std::int64_t sdpa_bwd_extra_bytes(const SdpaShape& s);
std::int64_t sdpa_bwd_dq_accum_offset(const SdpaShape& s);  // from the start of the extra area

}  // namespace attnbench::cudnn

#endif  // ATTNBENCH_HAVE_CUDNN_HEADERS
