// The arithmetic of cuda.ring_attention (impls/cuda/ring/ring_attention.cu), in plain C++ so that the
// CPU tests (tests/test_ring_plan.cpp) check it against the float64 reference without a GPU:
//   - the split of a sequence over the ranks: contiguous, or zig-zag (2N chunks, rank r holds
//     chunks r and 2N-1-r, so every rank has the same causal work);
//   - the ring schedule: which rank's K/V a rank holds at each step;
//   - the causal mask of one (query chunk, key chunk) block in the local kernel's terms: no key
//     visible, every key visible, or bottom-right causal (the only mask the local kernels have);
//   - the merge of two partial results of the same query rows through their LSE.
// Nothing here includes a CUDA header; the merge is __host__ __device__ under nvcc.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#if defined(__CUDACC__)
#define ATTN_RING_HD __host__ __device__
#else
#define ATTN_RING_HD
#endif

namespace attnbench::ring {

// Global sequence positions [begin, end).
struct Span {
  int begin = 0;
  int end = 0;
  int size() const { return end - begin; }
};

// Chunk c of `parts` near-equal chunks of [0, seq): sizes differ by at most one.
inline Span chunk(int seq, int parts, int c) {
  const long long s = seq;
  return {static_cast<int>(s * c / parts), static_cast<int>(s * (c + 1) / parts)};
}

// The spans rank r holds (in order): contiguous: [chunk r of N]; zig-zag: chunks r and 2N-1-r of
// 2N. Throws std::invalid_argument for ranks < 1.
inline std::vector<std::vector<Span>> split_sequence(int seq, int ranks, bool zigzag) {
  if (ranks < 1) throw std::invalid_argument("ranks = " + std::to_string(ranks) + ": must be >= 1");
  std::vector<std::vector<Span>> out(static_cast<std::size_t>(ranks));
  for (int r = 0; r < ranks; ++r) {
    if (zigzag) {
      out[r] = {chunk(seq, 2 * ranks, r), chunk(seq, 2 * ranks, 2 * ranks - 1 - r)};
    } else {
      out[r] = {chunk(seq, ranks, r)};
    }
  }
  return out;
}

// Ring: at step s (0 .. ranks-1) rank r holds the K/V (and, backward, the dK/dV accumulators) of
// rank (r - s) mod ranks; it sends to r+1 and receives from r-1. Step 0 is its own.
inline int kv_owner(int rank, int step, int ranks) { return ((rank - step) % ranks + ranks) % ranks; }
inline int send_peer(int rank, int ranks) { return (rank + 1) % ranks; }
inline int recv_peer(int rank, int ranks) { return (rank + ranks - 1) % ranks; }

// The mask of a block: query rows q of the full problem against keys k. In the block's local
// indices, key j is visible from row i iff j <= i + offset (when kind == causal).
struct BlockMask {
  enum Kind { none, full, causal } kind = full;
  int offset = 0;
  // The local kernels mask bottom-right aligned only: offset must be k.size() - q.size().
  bool local_kernel_can_run(const Span& q, const Span& k) const {
    return kind != causal || offset == k.size() - q.size();
  }
};

// The full problem's mask (bottom-right aligned: global key kj visible from query qi iff
// kj <= qi + seq_kv - seq_q) restricted to the block (q, k).
inline BlockMask block_mask(bool causal, int seq_q, int seq_kv, const Span& q, const Span& k) {
  BlockMask m;
  if (q.size() <= 0 || k.size() <= 0) {
    m.kind = BlockMask::none;
    return m;
  }
  if (!causal) return m;
  m.offset = q.begin + (seq_kv - seq_q) - k.begin;
  if (q.size() - 1 + m.offset < 0) m.kind = BlockMask::none;           // the last row sees nothing
  else if (m.offset >= k.size() - 1) m.kind = BlockMask::full;          // the first row sees all
  else m.kind = BlockMask::causal;
  return m;
}

// Visible (query, key) pairs of a block, per (batch, head): the work it is.
inline long long block_pairs(const BlockMask& m, const Span& q, const Span& k) {
  if (m.kind == BlockMask::none) return 0;
  if (m.kind == BlockMask::full) return static_cast<long long>(q.size()) * k.size();
  long long n = 0;
  for (int i = 0; i < q.size(); ++i) n += std::clamp(i + m.offset + 1, 0, k.size());
  return n;
}

// ---- The merge of partial results ---------------------------------------------------------------
// Two partial attentions of one query row over disjoint key sets A and B, each normalised over its
// own keys (o_A = sum_A p_j v_j / sum_A p_j, lse_A = log sum_A p_j), combine into the attention over
// A u B: lse = log(e^lse_A + e^lse_B), o = e^(lse_A - lse) o_A + e^(lse_B - lse) o_B. A set with
// no visible key has lse = -inf and weight 0; both empty gives lse = -inf and o = 0.

ATTN_RING_HD inline float ring_exp(float x) {
#if defined(__CUDA_ARCH__)
  return expf(x);
#else
  return std::exp(x);
#endif
}
ATTN_RING_HD inline double ring_exp(double x) {
#if defined(__CUDA_ARCH__)
  return ::exp(x);
#else
  return std::exp(x);
#endif
}
ATTN_RING_HD inline float ring_log1p(float x) {
#if defined(__CUDA_ARCH__)
  return log1pf(x);
#else
  return std::log1p(x);
#endif
}
ATTN_RING_HD inline double ring_log1p(double x) {
#if defined(__CUDA_ARCH__)
  return ::log1p(x);
#else
  return std::log1p(x);
#endif
}

template <class T>
struct MergeWeights {
  T a = 0, b = 0;  // o = a * o_A + b * o_B
  T lse = 0;
};

// -inf must compare as such: the callers pass -INFINITY for an empty key set (never NaN).
template <class T>
ATTN_RING_HD inline MergeWeights<T> lse_merge(T lse_a, T lse_b) {
  MergeWeights<T> w;
  const T ninf = -std::numeric_limits<T>::infinity();
  if (lse_b == ninf) {
    w.a = lse_a == ninf ? T(0) : T(1);
    w.lse = lse_a;
    return w;
  }
  if (lse_a == ninf) {
    w.b = 1;
    w.lse = lse_b;
    return w;
  }
  // Around the larger one: the exponent of the other is <= 0, so nothing overflows, and the
  // weights 1 / (1 + e) and e / (1 + e) do not go through the rounding of lse itself.
  const bool a_hi = lse_a > lse_b;
  const T hi = a_hi ? lse_a : lse_b;
  const T e = ring_exp((a_hi ? lse_b : lse_a) - hi);
  const T w_hi = T(1) / (T(1) + e);
  w.lse = hi + ring_log1p(e);
  w.a = a_hi ? w_hi : e * w_hi;
  w.b = a_hi ? e * w_hi : w_hi;
  return w;
}

// One row of d values: (o, lse) <- merge((o, lse), (o_part, lse_part)).
template <class T, class P>
ATTN_RING_HD inline void merge_row(int d, T* o, T& lse, const P* o_part, T lse_part) {
  const MergeWeights<T> w = lse_merge(lse, lse_part);
  for (int c = 0; c < d; ++c) o[c] = w.a * o[c] + w.b * static_cast<T>(o_part[c]);
  lse = w.lse;
}

}  // namespace attnbench::ring
