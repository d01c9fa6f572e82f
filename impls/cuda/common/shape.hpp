// AttnShape: the sizes every attention kernel reads, built once from a Problem. Each family's
// kernel params struct derives from it, so the shape sits at the head of the params (the first
// 32 bytes of every kernel's parameter block) and the kernels read p.seq_q, p.group, ... under
// one set of names in every family. Plain C++, so the CPU emulation of the mma and Hopper
// kernels builds it too.
//
// Conventions (the same as core/problem.hpp): tensors are [B, S, H, head_dim]; query head h
// reads kv head h / group; causal is bottom-right aligned: row i sees keys j <= i + causal_offset.
#pragma once

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

// A params struct P (deriving from AttnShape) zero-initialised, with its shape from p.
template <class P>
P with_shape(const Problem& p) {
  P x{};
  static_cast<AttnShape&>(x) = make_shape(p);
  return x;
}

}  // namespace attnbench::cuda
