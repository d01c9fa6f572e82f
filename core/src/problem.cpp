// Problem: sizes, the causal and window mask (first_visible_key, first_invisible_key), FLOPs, the
// case label and validate().
#include "attnbench/problem.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

namespace attnbench {

double Problem::effective_scale() const {
  return scale != 0 ? scale : 1.0 / std::sqrt(static_cast<double>(head_dim));
}

std::int64_t Problem::q_elems() const {
  return static_cast<std::int64_t>(batch) * seq_q * heads_q * head_dim;
}
std::int64_t Problem::kv_elems() const {
  return static_cast<std::int64_t>(batch) * seq_kv * heads_kv * head_dim;
}
std::int64_t Problem::lse_elems() const { return static_cast<std::int64_t>(batch) * heads_q * seq_q; }

int Problem::first_visible_key(int i) const {
  if (window_left < 0) return 0;
  const long long begin = static_cast<long long>(i) + seq_kv - seq_q - window_left;
  return static_cast<int>(std::clamp<long long>(begin, 0, seq_kv));
}

int Problem::first_invisible_key(int i) const {
  // The right bound: the diagonal itself under causal, window_right past it, else none.
  long long right = -1;
  if (window_right >= 0) right = window_right;
  if (causal) right = right < 0 ? 0 : std::min<long long>(right, 0);
  if (right < 0) return seq_kv;
  const long long end = static_cast<long long>(i) + seq_kv - seq_q + right + 1;
  return static_cast<int>(std::clamp<long long>(end, 0, seq_kv));
}

std::int64_t Problem::visible_pairs() const {
  if (!causal && !has_window()) return static_cast<std::int64_t>(seq_q) * seq_kv;
  std::int64_t n = 0;
  for (int i = 0; i < seq_q; ++i) n += visible_keys(i);
  return n;
}

double Problem::flops_fwd() const {
  const double bhd = 4.0 * batch * heads_q * head_dim;
  // FlashAttention's convention halves the square for causal; with seq_q != seq_kv the half is
  // wrong, so the visible pairs are counted exactly there, and under a window (FlashAttention-3's
  // benchmark: only the unmasked scores count).
  if (causal && seq_q == seq_kv && !has_window()) {
    return bhd * static_cast<double>(seq_q) * seq_kv / 2.0;
  }
  return bhd * static_cast<double>(visible_pairs());
}

std::string Problem::label() const {
  std::ostringstream s;
  s << "b" << batch << "_hq" << heads_q << "_hkv" << heads_kv << "_sq" << seq_q << "_skv" << seq_kv
    << "_d" << head_dim << (causal ? "_causal" : "") << "_" << to_string(dtype);
  if (scale != 0) s << "_scale" << scale;
  if (window_left >= 0) s << "_wl" << window_left;
  if (window_right >= 0) s << "_wr" << window_right;
  if (softcap != 0) s << "_softcap" << softcap;
  return s.str();
}

std::string validate(const Problem& p, std::int64_t max_bytes) {
  auto bad = [](const char* field, long long v, const char* why) {
    std::ostringstream s;
    s << field << " = " << v << ": " << why;
    return s.str();
  };
  if (p.batch <= 0) return bad("batch", p.batch, "must be positive");
  if (p.heads_q <= 0) return bad("heads_q", p.heads_q, "must be positive");
  if (p.heads_kv <= 0) return bad("heads_kv", p.heads_kv, "must be positive");
  if (p.seq_q <= 0) return bad("seq_q", p.seq_q, "must be positive");
  if (p.seq_kv <= 0) return bad("seq_kv", p.seq_kv, "must be positive");
  if (p.head_dim <= 0) return bad("head_dim", p.head_dim, "must be positive");
  if (p.head_dim > kMaxHeadDim) return bad("head_dim", p.head_dim, "must be at most 256");
  if (p.heads_q % p.heads_kv != 0) {
    std::ostringstream s;
    s << "heads_q = " << p.heads_q << " is not a multiple of heads_kv = " << p.heads_kv;
    return s.str();
  }
  if (!std::isfinite(p.scale) || p.scale < 0) {
    std::ostringstream s;
    s << "scale = " << p.scale << ": must be finite and positive (0 means 1/sqrt(head_dim))";
    return s.str();
  }
  if (p.scale > kMaxScale) {
    std::ostringstream s;
    s << "scale = " << p.scale << ": " << kScaleOverflow;
    return s.str();
  }
  if (p.window_left < -1) return bad("window_left", p.window_left, "must be -1 (unbounded) or >= 0");
  if (p.window_right < -1) {
    return bad("window_right", p.window_right, "must be -1 (unbounded) or >= 0");
  }
  if (!std::isfinite(p.softcap) || p.softcap < 0) {
    std::ostringstream s;
    s << "softcap = " << p.softcap << ": must be finite and >= 0 (0 means off)";
    return s.str();
  }
  // Sizes in elements must fit in int64 with room for byte counts, and each per-(b,h) score
  // matrix index (seq_q * seq_kv) in int64 as well.
  const long double q = static_cast<long double>(p.batch) * p.seq_q * p.heads_q * p.head_dim;
  const long double kv = static_cast<long double>(p.batch) * p.seq_kv * p.heads_kv * p.head_dim;
  const long double total = (2 * q + 2 * kv) * 2 * dtype_size(p.dtype);  // inputs, outputs, grads
  if (total > static_cast<long double>(std::numeric_limits<std::int64_t>::max() / 4)) {
    return "problem size overflows 64-bit byte counts (batch * seq * heads * head_dim too large)";
  }
  if (max_bytes > 0 && total > static_cast<long double>(max_bytes)) {
    std::ostringstream s;
    s << "tensors need " << static_cast<double>(total) / (1 << 20) << " MiB, more than the limit of "
      << static_cast<double>(max_bytes) / (1 << 20) << " MiB";
    return s.str();
  }
  return {};
}

}  // namespace attnbench
