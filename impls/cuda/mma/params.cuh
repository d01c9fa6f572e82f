// The parameters of the mma.sync attention kernels (flash_fwd_mma.cu, flash_bwd_mma.cu): one
// struct for the family, its sizes built from the Problem by make_params(); each call fills in
// the tensors it passes. Causal is not here: it is a template parameter of every kernel.
#pragma once

#include <cstdint>

#include "attnbench/problem.hpp"

namespace attn_mma {

struct MmaParams {
  const void* q;  // [B, Sq, Hq, d]
  const void* k;  // [B, Skv, Hkv, d]
  const void* v;  // [B, Skv, Hkv, d]
  void* o;        // [B, Sq, Hq, d]: written by the forward, read by the backward
  float* lse;     // [B, Hq, Sq], natural log: likewise
  int seq_q, seq_kv, heads_q, heads_kv, group;
  int causal_offset;  // seq_kv - seq_q: causal row i sees keys j <= i + causal_offset
  float scale_log2;   // softmax scale * log2(e)
  // Backward only.
  const void* dout;  // [B, Sq, Hq, d]
  void* dq;          // [B, Sq, Hq, d]
  void* dk;          // [B, Skv, Hkv, d]
  void* dv;          // [B, Skv, Hkv, d]
  float* delta;      // [B, Hq, Sq] workspace: rowsum(dO * O)
  float* dq_accum;   // [B, Sq, Hq, d] workspace, float32; null in deterministic mode
  // 16 bits each keep the struct at 128 bytes: past that ptxas generates different (here: other
  // and untimed) code for the forward kernel, whose fields are the first 72 bytes. supports_extra
  // refuses batch > 65535; head_dim <= 256.
  std::uint16_t batch;
  std::uint16_t head_dim;  // d; the kernel's tile width D >= d (columns d..D are padding)
  float scale;             // softmax scale
};
static_assert(sizeof(MmaParams) <= 128, "see batch and head_dim");

inline MmaParams make_params(const attnbench::Problem& pr) {
  MmaParams p{};
  p.seq_q = pr.seq_q;
  p.seq_kv = pr.seq_kv;
  p.heads_q = pr.heads_q;
  p.heads_kv = pr.heads_kv;
  p.group = pr.group();
  p.causal_offset = pr.seq_kv - pr.seq_q;
  p.scale_log2 = static_cast<float>(pr.effective_scale() * 1.4426950408889634);
  p.batch = static_cast<std::uint16_t>(pr.batch);
  p.head_dim = static_cast<std::uint16_t>(pr.head_dim);
  p.scale = static_cast<float>(pr.effective_scale());
  return p;
}

}  // namespace attn_mma
