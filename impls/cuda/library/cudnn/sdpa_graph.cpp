// SDPA forward/backward graphs for cuDNN's fused flash-attention engines; see sdpa_graph.hpp.
//
// The fused engines match a fixed pattern of primitive operations. The pattern used here is the
// one cudnn-frontend (1.x) lowers its composite SDPA nodes to for cuDNN 9 backends, studied from
// its node implementations (not copied): operation kinds, their order, compute precisions and
// which intermediates are virtual. Version-dependent workarounds follow the frontend's too and
// are listed in SdpaFlags.
#ifdef ATTNBENCH_HAVE_CUDNN_HEADERS

#include "library/cudnn/sdpa_graph.hpp"

#include <algorithm>
#include <limits>
#include <vector>

#include "common/workspace.hpp"

namespace attnbench::cudnn {
namespace {

using Id = Graph::Id;
using Dims = std::vector<std::int64_t>;

using cuda::align_up;

// BSHD storage seen as [b, h, s, d]: the head stride is d, the sequence stride h*d.
Dims bshd_as_bhsd(std::int64_t h, std::int64_t s, std::int64_t d) {
  return {s * h * d, d, h * d, 1};
}
// The same storage seen as [b, h, d, s] (K transposed for Q @ K^T).
Dims bshd_as_bhds(std::int64_t h, std::int64_t s, std::int64_t d) {
  return {s * h * d, d, 1, h * d};
}

// An io-typed device tensor of BSHD storage with h heads and seq rows, seen as [b, h, seq, d],
// or transposed as [b, h, d, seq] (K^T, V^T). Varlen: THD storage, the same strides within a
// sequence, and `ragged` (kRaggedQ or kRaggedKV) says where each sequence starts; the batch
// stride is then unused.
Id bshd_tensor(Graph& g, const char* name, const SdpaShape& s, std::int64_t h, std::int64_t seq,
               Id uid, Id ragged) {
  return g.tensor(name, {s.b, h, seq, s.d}, bshd_as_bhsd(h, seq, s.d), s.io, Storage::device, uid,
                  ragged);
}
Id bshd_tensor_t(Graph& g, const char* name, const SdpaShape& s, std::int64_t h, std::int64_t seq,
                 Id uid, Id ragged) {
  return g.tensor(name, {s.b, h, s.d, seq}, bshd_as_bhds(h, seq, s.d), s.io, Storage::device, uid,
                  ragged);
}

Dims scores_dims(const SdpaShape& s) {
  return {s.b, s.hq, s.sq, s.skv};
}
Dims scores_strides(const SdpaShape& s) {
  return {s.hq * s.sq * s.skv, s.sq * s.skv, s.skv, 1};
}
Dims rows_dims(const SdpaShape& s) {
  return {s.b, s.hq, s.sq, 1};
}
// Packed [b, hq, sq, 1]: attnbench's LSE layout [b, hq, sq] exactly.
Dims rows_strides(const SdpaShape& s) {
  return {s.hq * s.sq, s.sq, 1, 1};
}

// The graph's inputs that only varlen has: per-sequence lengths and the ragged offsets.
struct Varlen {
  Id seq_q = -1, seq_kv = -1;  // [b,1,1,1] int32 lengths (also the dense padding workaround)
  Id off_q = -1, off_kv = -1;  // [b+1,1,1,1] int32 element offsets
  Id off_stats = -1;
};

Id lengths_tensor(Graph& g, const char* name, const SdpaShape& s, Id uid) {
  return g.tensor(name, {s.b, 1, 1, 1}, {1, 1, 1, 1}, CUDNN_DATA_INT32, Storage::device, uid);
}

Varlen varlen_inputs(Graph& g, const SdpaShape& s) {
  Varlen v;
  if (!s.varlen) return v;
  v.seq_q = lengths_tensor(g, "seq_len_q", s, kSeqLenQ);
  v.seq_kv = lengths_tensor(g, "seq_len_kv", s, kSeqLenKV);
  const auto offsets = [&](const char* name, Id uid) {
    return g.tensor(name, {s.b + 1, 1, 1, 1}, {1, 1, 1, 1}, CUDNN_DATA_INT32, Storage::device, uid);
  };
  v.off_q = offsets("ragged_offset_q", kRaggedQ);
  v.off_kv = offsets("ragged_offset_kv", kRaggedKV);
  v.off_stats = offsets("ragged_offset_stats", kRaggedStats);
  return v;
}

// The Stats (LSE) tensor. Dense: [b, hq, sq] packed. Varlen: attnbench's [hq, total_q] (FA2/3's
// varlen LSE) as a ragged tensor: head stride total_q, row stride 1, sequence b starting at
// element cu_seqlens_q[b], so cuDNN writes (and the backward reads) the harness's buffer as is.
Id stats_tensor(Graph& g, const SdpaShape& s, const Varlen& v) {
  if (!s.varlen) {
    return g.tensor("Stats", rows_dims(s), rows_strides(s), CUDNN_DATA_FLOAT, Storage::device,
                    kStats);
  }
  return g.tensor("Stats", rows_dims(s), {s.sq, s.total_q, 1, 1}, CUDNN_DATA_FLOAT, Storage::device,
                  kStats, v.off_stats);
}

// The sliding-window / causal mask: a diagonal band of at most two halves, each a node of its own
// as cudnn-frontend's composite diagonal-band mask (cuDNN < 9.21) emits it, right bound first:
//
//   right bound R (causal: R = 0), keeps j <= c(i) + R:
//     row = GEN_INDEX(x, axis 2), col = GEN_INDEX(x, axis 3)          (float math, int32 out)
//     [row = row + seq_kv; row = row - seq_q]   bottom-right only      (int32)
//     [row = row + R]                           R != 0 only            (int32 scalar, int32)
//     keep = row >= col (CMP_GE); y = keep ? x : masked (BINARY_SELECT)
//   left bound L = window_left + 1, keeps j > c(i) - L:
//     row = GEN_INDEX(y, axis 2), col = GEN_INDEX(y, axis 3)
//     top-left:                   col = col + L                        (float scalar, float)
//     bottom-right, scalar sizes: col = col + (L - seq_kv + seq_q)     (float scalar, float)
//     bottom-right, length tensors: col = col + L; col = col - seq_kv; col = col + seq_q (int32)
//     keep = col > row (CMP_GT); y = keep ? y : masked
//
// The fused engines match the graph around the mask, and may treat a band they recognise (tile
// skipping) differently from an arbitrary pointwise mask, so it follows the frontend's lowering
// for the same cuDNN version (operations, order, types, index axes) rather than any equivalent
// form. cuDNN 9.19 also compiles other, equivalent forms (docs/peers.md, the offline check).
// seq_q/seq_kv are the per-batch length tensors when the graph has them (varlen, or the backward's
// padding workaround), else -1 and the sizes enter as pass-by-value scalars.

// Right half: keeps x where c(i) + right >= j. With seq_q == seq_kv the shift is zero and the plain
// (top-left) pattern is used: right == 0 is then cuDNN's plain causal mask.
Id right_bound_mask(Graph& g, const SdpaShape& s, const SdpaFlags& f, Id x, std::int64_t right,
                    Id seq_q, Id seq_kv) {
  Id row = g.virt_like(x, CUDNN_DATA_INT32);
  g.pointwise("band_right_row_index", CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_FLOAT, x, -1, -1, row,
              2);
  const Id col = g.virt_like(x, CUDNN_DATA_INT32);
  g.pointwise("band_right_col_index", CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_FLOAT, x, -1, -1, col,
              3);
  if (sdpa_bottom_right(s)) {
    const Id kv = seq_kv >= 0 ? seq_kv : g.scalar_i32(static_cast<std::int32_t>(s.skv));
    const Id q = seq_q >= 0 ? seq_q : g.scalar_i32(static_cast<std::int32_t>(s.sq));
    const Id shifted = g.virt_like(x, CUDNN_DATA_INT32);
    g.pointwise("band_right_row_plus_skv", CUDNN_POINTWISE_ADD, CUDNN_DATA_INT32, row, kv, -1,
                shifted);
    const Id aligned = g.virt_like(x, CUDNN_DATA_INT32);
    g.pointwise("band_right_row_minus_sq", CUDNN_POINTWISE_SUB, CUDNN_DATA_INT32, shifted, q, -1,
                aligned);
    row = aligned;
  }
  if (right != 0) {
    const Id widened = g.virt_like(x, CUDNN_DATA_INT32);
    g.pointwise("band_right_row_plus_window", CUDNN_POINTWISE_ADD, CUDNN_DATA_INT32, row,
                g.scalar_i32(static_cast<std::int32_t>(right)), -1, widened);
    row = widened;
  }
  const Id keep = g.virt_like(x, CUDNN_DATA_BOOLEAN);
  g.pointwise("band_right_row_ge_col", CUDNN_POINTWISE_CMP_GE, CUDNN_DATA_BOOLEAN, row, col, -1,
              keep);
  const Id y = g.virt_like(x, CUDNN_DATA_FLOAT);
  g.pointwise("band_right_select", CUDNN_POINTWISE_BINARY_SELECT, CUDNN_DATA_FLOAT, x,
              g.scalar_f32(f.masked_value), keep, y);
  return y;
}

// Left half: keeps x where j + left > c(i), i.e. j >= c(i) - (left - 1).
Id left_bound_mask(Graph& g, const SdpaShape& s, const SdpaFlags& f, Id x, std::int64_t left,
                   Id seq_q, Id seq_kv) {
  const Id row = g.virt_like(x, CUDNN_DATA_INT32);
  g.pointwise("band_left_row_index", CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_FLOAT, x, -1, -1, row,
              2);
  Id col = g.virt_like(x, CUDNN_DATA_INT32);
  g.pointwise("band_left_col_index", CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_FLOAT, x, -1, -1, col,
              3);
  if (!sdpa_bottom_right(s) || (seq_q < 0 && seq_kv < 0)) {
    // One float addition: the bound, shifted by seq_q - seq_kv when bottom-right. Both it and the
    // column index are integers of magnitude below seq_q + seq_kv + 1: exact in float.
    const std::int64_t shift = sdpa_bottom_right(s) ? s.sq - s.skv : 0;
    const Id widened = g.virt_like(x, CUDNN_DATA_FLOAT);
    g.pointwise("band_left_col_plus_window", CUDNN_POINTWISE_ADD, CUDNN_DATA_FLOAT, col,
                g.scalar_f32(static_cast<float>(left + shift)), -1, widened);
    col = widened;
  } else {
    const Id widened = g.virt_like(x, CUDNN_DATA_INT32);
    g.pointwise("band_left_col_plus_window", CUDNN_POINTWISE_ADD, CUDNN_DATA_INT32, col,
                g.scalar_i32(static_cast<std::int32_t>(left)), -1, widened);
    const Id minus_kv = g.virt_like(x, CUDNN_DATA_INT32);
    g.pointwise("band_left_col_minus_skv", CUDNN_POINTWISE_SUB, CUDNN_DATA_INT32, widened, seq_kv,
                -1, minus_kv);
    const Id plus_q = g.virt_like(x, CUDNN_DATA_INT32);
    g.pointwise("band_left_col_plus_sq", CUDNN_POINTWISE_ADD, CUDNN_DATA_INT32, minus_kv, seq_q, -1,
                plus_q);
    col = plus_q;
  }
  const Id keep = g.virt_like(x, CUDNN_DATA_BOOLEAN);
  g.pointwise("band_left_col_gt_row", CUDNN_POINTWISE_CMP_GT, CUDNN_DATA_BOOLEAN, col, row, -1,
              keep);
  const Id y = g.virt_like(x, CUDNN_DATA_FLOAT);
  g.pointwise("band_left_select", CUDNN_POINTWISE_BINARY_SELECT, CUDNN_DATA_FLOAT, x,
              g.scalar_f32(f.masked_value), keep, y);
  return y;
}

// Both halves, as the shape asks (x itself when it asks for neither).
Id band_mask(Graph& g, const SdpaShape& s, const SdpaFlags& f, Id x, Id seq_q, Id seq_kv) {
  if (const std::int64_t right = sdpa_right_bound(s); right >= 0) {
    x = right_bound_mask(g, s, f, x, right, seq_q, seq_kv);
  }
  if (const std::int64_t left = sdpa_left_bound(s); left >= 0) {
    x = left_bound_mask(g, s, f, x, left, seq_q, seq_kv);
  }
  return x;
}

// Keeps x where row < seq_q[b] and col < seq_kv[b]: varlen's per-sequence lengths, or the dense
// backward's workaround (where every row and column is valid: the lengths equal the extents).
Id padding_mask(Graph& g, const SdpaFlags& f, Id x, Id seq_q, Id seq_kv) {
  const Id row = g.virt_like(x, CUDNN_DATA_INT32);
  g.pointwise("pad_row_index", CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_INT32, x, -1, -1, row, 2);
  const Id col = g.virt_like(x, CUDNN_DATA_INT32);
  g.pointwise("pad_col_index", CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_INT32, x, -1, -1, col, 3);
  const Id row_ok = g.virt_like(x, CUDNN_DATA_BOOLEAN);
  g.pointwise("pad_row_lt_sq", CUDNN_POINTWISE_CMP_LT, CUDNN_DATA_BOOLEAN, row, seq_q, -1, row_ok);
  const Id col_ok = g.virt_like(x, CUDNN_DATA_BOOLEAN);
  g.pointwise("pad_col_lt_skv", CUDNN_POINTWISE_CMP_LT, CUDNN_DATA_BOOLEAN, col, seq_kv, -1,
              col_ok);
  const Id keep = g.virt_like(x, CUDNN_DATA_BOOLEAN);
  g.pointwise("pad_and", CUDNN_POINTWISE_LOGICAL_AND, CUDNN_DATA_BOOLEAN, row_ok, col_ok, -1, keep);
  const Id y = g.virt_like(x, CUDNN_DATA_FLOAT);
  g.pointwise("pad_select", CUDNN_POINTWISE_BINARY_SELECT, CUDNN_DATA_FLOAT, x,
              g.scalar_f32(f.masked_value), keep, y);
  return y;
}

}  // namespace

// Both bounds are capped where they stop masking anything, so that the mask is exactly the same
// and every index sum in the graph stays far inside int32 (and exact in float): the row index
// plus R and the column index plus L are then below seq_q + seq_kv.
std::int64_t sdpa_right_bound(const SdpaShape& s) {
  if (s.causal) return 0;  // causal caps any window_right at the diagonal
  if (s.window_right < 0) return -1;
  // c(i) + window_right >= seq_kv for every row once window_right >= seq_q.
  return std::min(s.window_right, s.sq);
}

std::int64_t sdpa_left_bound(const SdpaShape& s) {
  if (s.window_left < 0) return -1;
  // c(i) - window_left <= 0 for every row once window_left >= seq_kv - 1.
  return std::min(s.window_left, s.skv) + 1;
}

SdpaFlags sdpa_flags(std::size_t v, const SdpaShape& s) {
  SdpaFlags f{};
  f.masked_value =
      v < 91000 ? std::numeric_limits<float>::lowest() : -std::numeric_limits<float>::infinity();
  f.bwd_padding_mask = !s.varlen && v <= 91500 && s.skv % 128 != 0;
  f.bwd_double_padding = v >= 90000 && v < 91000;
  f.zero_dq_accum = v < 90600;
  return f;
}

Graph build_sdpa_fwd(const SdpaShape& s, const SdpaFlags& f) {
  Graph g;
  const Varlen vl = varlen_inputs(g, s);
  const Id q = bshd_tensor(g, "Q", s, s.hq, s.sq, kQ, vl.off_q);
  const Id kt = bshd_tensor_t(g, "K^T", s, s.hkv, s.skv, kK, vl.off_kv);
  const Id v = bshd_tensor(g, "V", s, s.hkv, s.skv, kV, vl.off_kv);
  const Id o = bshd_tensor(g, "O", s, s.hq, s.sq, kO, vl.off_q);
  const Id stats = stats_tensor(g, s, vl);

  // S = scale * Q K^T (GQA: the matmul broadcasts the hkv heads over groups of hq). Varlen: the
  // GEMM's M and N are each sequence's lengths, and the padding mask hides the rest of the
  // [sq, skv] tile, before the band (cudnn-frontend's order).
  const Id qk = g.virt(scores_dims(s), scores_strides(s), CUDNN_DATA_FLOAT);
  g.matmul("bmm1_q_kt", q, kt, qk, vl.seq_q, vl.seq_kv, -1);
  Id scores = g.virt_like(qk, CUDNN_DATA_FLOAT);
  g.pointwise("attn_scale", CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, qk, g.scalar_f32(s.scale), -1,
              scores);
  if (s.varlen) scores = padding_mask(g, f, scores, vl.seq_q, vl.seq_kv);
  scores = band_mask(g, s, f, scores, vl.seq_q, vl.seq_kv);

  // Softmax with statistics: Stats = max + log(sum exp(S - max)), i.e. the natural-log LSE of the
  // scaled scores, which is attnbench's LSE convention: written straight into the LSE buffer.
  const Id row_max = g.virt(rows_dims(s), rows_strides(s), CUDNN_DATA_FLOAT);
  g.reduction("softmax_max", CUDNN_REDUCE_TENSOR_MAX, scores, row_max);
  const Id centred = g.virt_like(scores, CUDNN_DATA_FLOAT);
  g.pointwise("softmax_sub_max", CUDNN_POINTWISE_SUB, CUDNN_DATA_FLOAT, scores, row_max, -1,
              centred);
  const Id e = g.virt_like(scores, CUDNN_DATA_FLOAT);
  g.pointwise("softmax_exp", CUDNN_POINTWISE_EXP, CUDNN_DATA_FLOAT, centred, -1, -1, e);
  const Id row_sum = g.virt(rows_dims(s), rows_strides(s), CUDNN_DATA_FLOAT);
  g.reduction("softmax_sum", CUDNN_REDUCE_TENSOR_ADD, e, row_sum);
  const Id log_sum = g.virt(rows_dims(s), rows_strides(s), CUDNN_DATA_FLOAT);
  g.pointwise("softmax_log", CUDNN_POINTWISE_LOG, CUDNN_DATA_FLOAT, row_sum, -1, -1, log_sum);
  g.pointwise("softmax_stats", CUDNN_POINTWISE_ADD, CUDNN_DATA_FLOAT, row_max, log_sum, -1, stats);
  // P is stored in the io type: the engine's second matmul takes it as its A operand.
  const Id p = g.virt_like(scores, s.io);
  g.pointwise("softmax_div", CUDNN_POINTWISE_DIV, CUDNN_DATA_FLOAT, e, row_sum, -1, p);

  g.matmul("bmm2_p_v", p, v, o, vl.seq_q, -1, vl.seq_kv);
  return g;
}

Graph build_sdpa_bwd(const SdpaShape& s, const SdpaFlags& f) {
  Graph g;
  Varlen vl = varlen_inputs(g, s);
  const Id q = bshd_tensor(g, "Q", s, s.hq, s.sq, kQ, vl.off_q);
  const Id kt = bshd_tensor_t(g, "K^T", s, s.hkv, s.skv, kK, vl.off_kv);
  const Id vt = bshd_tensor_t(g, "V^T", s, s.hkv, s.skv, kV, vl.off_kv);
  const Id o = bshd_tensor(g, "O", s, s.hq, s.sq, kO, vl.off_q);
  const Id stats = stats_tensor(g, s, vl);
  const Id dout = bshd_tensor(g, "dO", s, s.hq, s.sq, kdO, vl.off_q);
  const Id dq = bshd_tensor(g, "dQ", s, s.hq, s.sq, kdQ, vl.off_q);
  const Id dk = bshd_tensor(g, "dK", s, s.hkv, s.skv, kdK, vl.off_kv);
  const Id dv = bshd_tensor(g, "dV", s, s.hkv, s.skv, kdV, vl.off_kv);
  if (f.bwd_padding_mask) {
    vl.seq_q = lengths_tensor(g, "seq_len_q", s, kSeqLenQ);
    vl.seq_kv = lengths_tensor(g, "seq_len_kv", s, kSeqLenKV);
  }
  const Id seq_q = vl.seq_q, seq_kv = vl.seq_kv;
  const bool padded = seq_q >= 0;  // varlen, or the dense workaround
  const Id scale = g.scalar_f32(s.scale);
  const bool gqa = s.hq != s.hkv;

  // D = rowsum(dO * O), kept in the workspace (the engine's preprocessing pass writes it).
  const Id do_o = g.virt({s.b, s.hq, s.sq, s.d}, bshd_as_bhsd(s.hq, s.sq, s.d), CUDNN_DATA_FLOAT);
  g.pointwise("mul_do_o", CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, dout, o, -1, do_o);
  const Id d_rows = g.virt(rows_dims(s), rows_strides(s), CUDNN_DATA_FLOAT);
  g.reduction("reduce_do_o", CUDNN_REDUCE_TENSOR_ADD, do_o, d_rows);
  const Id softmax_sum = g.tensor("softmax_sum", rows_dims(s), rows_strides(s), CUDNN_DATA_FLOAT,
                                  Storage::device, kSoftmaxSum);
  // The dropout-scale multiply is part of the recognised pattern; without dropout it is by 1.
  g.pointwise("scale_dropout_inv", CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, d_rows,
              g.scalar_f32(1.0f), -1, softmax_sum);

  // P = exp(scale * Q K^T - LSE), recomputed.
  const Id qk = g.virt(scores_dims(s), scores_strides(s), CUDNN_DATA_FLOAT);
  g.matmul("matmul_q_kt", q, kt, qk, seq_q, seq_kv, -1);
  Id scaled = g.virt_like(qk, CUDNN_DATA_FLOAT);
  g.pointwise("mul_s_attn_scale", CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, qk, scale, -1, scaled);
  // The padding mask goes before the stats are subtracted, and (cuDNN 9.0-9.9) once more after,
  // as cudnn-frontend lowers it; then the band.
  if (padded) scaled = padding_mask(g, f, scaled, seq_q, seq_kv);
  Id logits = g.virt_like(qk, CUDNN_DATA_FLOAT);
  g.pointwise("sub_s_stats", CUDNN_POINTWISE_SUB, CUDNN_DATA_FLOAT, scaled, stats, -1, logits);
  if (padded && f.bwd_double_padding) logits = padding_mask(g, f, logits, seq_q, seq_kv);
  logits = band_mask(g, s, f, logits, seq_q, seq_kv);
  const Id p = g.virt_like(qk, CUDNN_DATA_FLOAT);
  g.pointwise("exp_s", CUDNN_POINTWISE_EXP, CUDNN_DATA_FLOAT, logits, -1, -1, p);

  // dV = P^T dO (GQA: per query head, then summed over each group of heads).
  const Dims t_dims{s.b, s.hq, s.skv, s.sq};
  const Dims t_strides{s.hq * s.sq * s.skv, s.sq * s.skv, 1, s.skv};
  const Id pt = g.virt(t_dims, t_strides, s.io);
  g.reshape("reshape_p", p, pt);
  const Dims full_dims{s.b, s.hq, s.skv, s.d};
  const Dims full_strides{s.hq * s.skv * s.d, s.skv * s.d, s.d, 1};
  if (!gqa) {
    g.matmul("matmul_pt_do", pt, dout, dv, seq_kv, -1, seq_q);
  } else {
    const Id dv_full = g.virt(full_dims, full_strides, s.io);
    g.matmul("matmul_pt_do", pt, dout, dv_full, seq_kv, -1, seq_q);
    g.reduction("reduce_dv_heads", CUDNN_REDUCE_TENSOR_ADD, dv_full, dv);
  }

  // dS = scale * P * (dO V^T - D).
  const Id dp = g.virt(scores_dims(s), scores_strides(s), CUDNN_DATA_FLOAT);
  g.matmul("matmul_do_vt", dout, vt, dp, seq_q, seq_kv, -1);
  const Id dp_minus = g.virt_like(dp, CUDNN_DATA_FLOAT);
  g.pointwise("sub_dp_softmax_sum", CUDNN_POINTWISE_SUB, CUDNN_DATA_FLOAT, dp, softmax_sum, -1,
              dp_minus);
  const Id dp_p = g.virt_like(dp, CUDNN_DATA_FLOAT);
  g.pointwise("mul_dp_exp_s", CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, dp_minus, p, -1, dp_p);
  const Id ds = g.virt_like(dp, CUDNN_DATA_FLOAT);
  g.pointwise("mul_ds_attn_scale", CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, dp_p, scale, -1, ds);

  // dK = dS^T Q (summed over the group for GQA).
  const Id dst = g.virt(t_dims, t_strides, s.io);
  g.reshape("reshape_ds", ds, dst);
  if (!gqa) {
    g.matmul("matmul_dst_q", dst, q, dk, seq_kv, -1, seq_q);
  } else {
    const Id dk_full = g.virt(full_dims, full_strides, s.io);
    g.matmul("matmul_dst_q", dst, q, dk_full, seq_kv, -1, seq_q);
    g.reduction("reduce_dk_heads", CUDNN_REDUCE_TENSOR_ADD, dk_full, dk);
  }

  // dQ = dS K, accumulated in float32 in the workspace, then converted into dQ.
  // (Varlen: the view of K keeps K's ragged offsets.)
  const Id k = g.virt({s.b, s.hkv, s.skv, s.d}, bshd_as_bhsd(s.hkv, s.skv, s.d), s.io, vl.off_kv);
  g.reshape("reshape_k", kt, k);
  const Id dq_accum =
      g.tensor("dQ_accum", {s.b, s.hq, s.sq, s.d}, {s.hq * s.sq * s.d, s.sq * s.d, s.d, 1},
               CUDNN_DATA_FLOAT, Storage::device, kdQAccum);
  g.matmul("matmul_ds_k", ds, k, dq_accum, seq_q, -1, seq_kv);
  g.pointwise("identity_dq", CUDNN_POINTWISE_IDENTITY, CUDNN_DATA_FLOAT, dq_accum, -1, -1, dq);
  return g;
}

std::int64_t sdpa_bwd_dq_accum_offset(const SdpaShape& s) {
  return align_up(s.b * s.hq * s.sq * 4);
}

std::int64_t sdpa_bwd_extra_bytes(const SdpaShape& s) {
  return sdpa_bwd_dq_accum_offset(s) + align_up(s.b * s.hq * s.sq * s.d * 4);
}

}  // namespace attnbench::cudnn

#endif  // ATTNBENCH_HAVE_CUDNN_HEADERS
