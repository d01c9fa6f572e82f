// One Problem from its fields, in the order of its label (b, hq, hkv, sq, skv, d): for the
// conformance list, the tests and the emulator tests, which build many of them by hand.
#pragma once

#include "attnbench/problem.hpp"

namespace attnbench {

// q: [b, sq, hq, d], k/v: [b, skv, hkv, d]; scale 0 means 1/sqrt(d).
inline Problem make_problem(int b, int hq, int hkv, int sq, int skv, int d, bool causal,
                            DType t = DType::f32, double scale = 0) {
  Problem p;
  p.batch = b;
  p.heads_q = hq;
  p.heads_kv = hkv;
  p.seq_q = sq;
  p.seq_kv = skv;
  p.head_dim = d;
  p.causal = causal;
  p.dtype = t;
  p.scale = scale;
  return p;
}

}  // namespace attnbench
