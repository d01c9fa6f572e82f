// The parameters of the mma.sync attention kernels (flash_fwd_mma.cu, flash_bwd_mma.cu): one
// struct for the family, its shape built from the Problem by make_params(); each call fills in
// the tensors it passes. Causal is not here: it is a template parameter of every kernel.
#pragma once

#include <cstdint>

#include "attnbench/problem.hpp"
#include "common/shape.hpp"

namespace attn_mma {

// The shape (common/shape.hpp: seq_q, seq_kv, heads_q, heads_kv, group, head_dim, causal_offset,
// scale_log2) at the head, then the tensors. At most 128 bytes: past that ptxas generates
// different (and untimed) code for the forward kernel, whose fields are the first 72 bytes.
struct MmaParams : attnbench::cuda::AttnShape {
  const void* q;  // [B, Sq, Hq, d]
  const void* k;  // [B, Skv, Hkv, d]
  const void* v;  // [B, Skv, Hkv, d]
  void* o;        // [B, Sq, Hq, d]: written by the forward, read by the backward
  float* lse;     // [B, Hq, Sq], natural log: likewise
  // Backward only.
  const void* dout;  // [B, Sq, Hq, d]
  void* dq;          // [B, Sq, Hq, d]
  void* dk;          // [B, Skv, Hkv, d]
  void* dv;          // [B, Skv, Hkv, d]
  float* delta;      // [B, Hq, Sq] workspace: rowsum(dO * O)
  float* dq_accum;   // [B, Sq, Hq, d] workspace, float32; null in deterministic mode
  int batch;
  float scale;  // softmax scale
};
static_assert(sizeof(MmaParams) <= 128, "see MmaParams");

inline MmaParams make_params(const attnbench::Problem& pr) {
  MmaParams p = attnbench::cuda::with_shape<MmaParams>(pr);
  p.batch = pr.batch;
  p.scale = static_cast<float>(pr.effective_scale());
  return p;
}

}  // namespace attn_mma
