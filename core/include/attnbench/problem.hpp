// The attention problem every implementation computes (see docs/architecture.md):
//   S = scale * Q K^T, P = softmax(S + mask), O = P V, LSE[i] = log sum_j exp(S[i,j]).
// Layout BSHD, contiguous:
//   q, o, do, dq : [batch, seq_q,  heads_q,  head_dim]
//   k, v, dk, dv : [batch, seq_kv, heads_kv, head_dim]
//   lse          : [batch, heads_q, seq_q]  (float32, natural log)
// GQA: query head h reads kv head h / (heads_q / heads_kv). Causal is bottom-right aligned:
// query i sees key j iff j <= i + seq_kv - seq_q; a row that sees no key has O = 0, LSE = -inf.
#pragma once

#include <cstdint>
#include <string>

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

  double effective_scale() const;
  int group() const { return heads_q / heads_kv; }  // query heads per kv head
  int kv_head(int h) const { return h / group(); }

  std::int64_t q_elems() const;    // also o, do, dq
  std::int64_t kv_elems() const;   // also v, dk, dv
  std::int64_t lse_elems() const;  // float32
  std::int64_t q_bytes() const { return q_elems() * static_cast<std::int64_t>(dtype_size(dtype)); }
  std::int64_t kv_bytes() const { return kv_elems() * static_cast<std::int64_t>(dtype_size(dtype)); }
  std::int64_t lse_bytes() const { return lse_elems() * 4; }

  // Causal visibility, bottom-right aligned.
  int first_invisible_key(int i) const;  // keys [0, first_invisible_key(i)) are visible to row i
  bool visible(int i, int j) const { return !causal || j < first_invisible_key(i); }

  // Number of visible (query, key) pairs per (batch, head), counted exactly.
  std::int64_t visible_pairs() const;
  // FlashAttention convention: forward = 4 * b * h * (visible pairs) * d; backward = 2.5x forward.
  double flops_fwd() const;
  double flops_bwd() const { return 2.5 * flops_fwd(); }

  // Short unique text, e.g. "b2_hq8_hkv2_sq17_skv33_d64_causal_bf16".
  std::string label() const;
};

// Returns an empty string if the problem is valid, otherwise a message that names the field and
// the value. max_bytes bounds the total size of q, k, v, o and their gradients (0 = no bound).
std::string validate(const Problem& p, std::int64_t max_bytes = 0);

}  // namespace attnbench
