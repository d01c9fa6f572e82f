// Problem: sizes, the causal and window mask (first_visible_key, first_invisible_key), FLOPs, the
// case label and validate().
#include "attnbench/problem.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>

namespace attnbench {

double Problem::effective_scale() const {
  return scale != 0 ? scale : 1.0 / std::sqrt(static_cast<double>(head_dim));
}

// The first token of sequence b: the sum of the lengths before it. Bounded by the list, so that
// label() stays safe on a problem that validate() has yet to refuse (lists of unequal length, or
// batch past them: the config's error message names the case by its label).
std::int64_t Problem::packed_start(const std::vector<int>& lens, int b) {
  std::int64_t n = 0;
  const int count = std::min(b, static_cast<int>(lens.size()));
  for (int i = 0; i < count; ++i) n += lens[static_cast<std::size_t>(i)];
  return n;
}
std::vector<std::int32_t> Problem::prefix_sums(const std::vector<int>& lens) {
  if (lens.empty()) return {};
  std::vector<std::int32_t> cu(lens.size() + 1, 0);
  for (std::size_t i = 0; i < lens.size(); ++i) cu[i + 1] = cu[i] + lens[i];  // validate(): fits
  return cu;
}

std::int64_t Problem::lse_start(int b, int h) const {
  if (varlen()) return static_cast<std::int64_t>(h) * total_q() + q_start(b);
  return (static_cast<std::int64_t>(b) * heads_q + h) * seq_q;
}

Problem Problem::sequence(int b) const {
  Problem s = *this;
  s.batch = 1;
  s.seq_q = seq_q_of(b);
  s.seq_kv = seq_kv_of(b);
  s.seqlens_q.clear();
  s.seqlens_kv.clear();
  return s;
}

void Problem::set_seqlens(std::vector<int> q, std::vector<int> kv) {
  batch = static_cast<int>(q.size());
  seq_q = q.empty() ? 0 : *std::max_element(q.begin(), q.end());
  seq_kv = kv.empty() ? 0 : *std::max_element(kv.begin(), kv.end());
  seqlens_q = std::move(q);
  seqlens_kv = std::move(kv);
}

// Dense: batch * seq * heads * head_dim as before; varlen: the packed totals.
std::int64_t Problem::q_elems() const {
  if (varlen()) return total_q() * heads_q * head_dim;
  return static_cast<std::int64_t>(batch) * seq_q * heads_q * head_dim;
}
std::int64_t Problem::kv_elems() const {
  if (varlen()) return total_kv() * heads_kv * head_dim;
  return static_cast<std::int64_t>(batch) * seq_kv * heads_kv * head_dim;
}
std::int64_t Problem::lse_elems() const {
  if (varlen()) return total_q() * heads_q;
  return static_cast<std::int64_t>(batch) * heads_q * seq_q;
}

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
  if (varlen()) {
    std::int64_t n = 0;
    for (int b = 0; b < batch; ++b) n += sequence(b).visible_pairs();
    return n;
  }
  if (!causal && !has_window()) return static_cast<std::int64_t>(seq_q) * seq_kv;
  std::int64_t n = 0;
  for (int i = 0; i < seq_q; ++i) n += visible_keys(i);
  return n;
}

double Problem::flops_fwd() const {
  if (varlen()) {  // each sequence by the dense convention (its causal square halved as there)
    double f = 0;
    for (int b = 0; b < batch; ++b) f += sequence(b).flops_fwd();
    return f;
  }
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
  if (varlen()) {
    // The totals for the reader, a hash of the lengths for uniqueness (a list of 30 lengths
    // would not make a label).
    std::uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a, 64-bit
    auto mix = [&h](std::int64_t x) {
      for (int byte = 0; byte < 8; ++byte) {
        h ^= static_cast<std::uint64_t>(x >> (8 * byte)) & 0xffu;
        h *= 0x100000001b3ull;
      }
    };
    mix(static_cast<std::int64_t>(seqlens_q.size()));
    for (int x : seqlens_q) mix(x);
    mix(static_cast<std::int64_t>(seqlens_kv.size()));
    for (int x : seqlens_kv) mix(x);
    char hex[9];
    std::snprintf(hex, sizeof hex, "%08x", static_cast<unsigned>((h >> 32) ^ (h & 0xffffffffu)));
    s << "_varlen_q" << total_q() << "_kv" << total_kv() << "_" << hex;
  }
  return s.str();
}

namespace {

// The varlen fields: both lists, one length per sequence each, >= 0, with batch, seq_q and
// seq_kv their count and maxima (set_seqlens), and totals that fit FlashAttention's int32
// cu_seqlens.
std::string validate_varlen(const Problem& p) {
  if (p.seqlens_q.empty() || p.seqlens_kv.empty()) {
    const bool q = p.seqlens_q.empty();
    std::ostringstream s;
    s << (q ? "seqlens_q" : "seqlens_kv") << " = []: a varlen batch needs both lists ("
      << (q ? "seqlens_kv" : "seqlens_q") << " has " << (q ? p.seqlens_kv : p.seqlens_q).size()
      << " lengths)";
    return s.str();
  }
  if (p.seqlens_q.size() != p.seqlens_kv.size()) {
    std::ostringstream s;
    s << "seqlens_kv has " << p.seqlens_kv.size() << " lengths, seqlens_q " << p.seqlens_q.size()
      << ": one per sequence in each";
    return s.str();
  }
  for (const auto* list : {&p.seqlens_q, &p.seqlens_kv}) {
    const char* name = list == &p.seqlens_q ? "seqlens_q" : "seqlens_kv";
    long long total = 0, longest = 0;
    for (std::size_t i = 0; i < list->size(); ++i) {
      const int n = (*list)[i];
      if (n < 0) {
        std::ostringstream s;
        s << name << "[" << i << "] = " << n << ": a sequence length must be >= 0";
        return s.str();
      }
      total += n;
      longest = std::max<long long>(longest, n);
    }
    std::ostringstream s;
    if (total == 0) {
      s << name << ": every length is 0 (a batch needs at least one "
        << (list == &p.seqlens_q ? "query" : "key") << ")";
      return s.str();
    }
    if (total > std::numeric_limits<int>::max()) {
      s << name << ": " << total << " tokens in all, more than 2^31 - 1 (int32 cu_seqlens)";
      return s.str();
    }
    const int field = list == &p.seqlens_q ? p.seq_q : p.seq_kv;
    if (field != longest) {
      const char* fname = list == &p.seqlens_q ? "seq_q" : "seq_kv";
      s << fname << " = " << field << ": a varlen batch's " << fname
        << " is its longest sequence, max(" << name << ") = " << longest;
      return s.str();
    }
  }
  if (static_cast<std::size_t>(p.batch) != p.seqlens_q.size()) {
    std::ostringstream s;
    s << "batch = " << p.batch << ": a varlen batch's is its number of sequences, "
      << p.seqlens_q.size();
    return s.str();
  }
  return {};
}

}  // namespace

std::string validate(const Problem& p, std::int64_t max_bytes) {
  auto bad = [](const char* field, long long v, const char* why) {
    std::ostringstream s;
    s << field << " = " << v << ": " << why;
    return s.str();
  };
  if (p.varlen()) {
    if (std::string why = validate_varlen(p); !why.empty()) return why;
  }
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
  // (Varlen: the packed totals, which validate_varlen bounds to int32.)
  const long double q =
      static_cast<long double>(p.varlen() ? p.total_q() : std::int64_t{p.batch} * p.seq_q) *
      p.heads_q * p.head_dim;
  const long double kv =
      static_cast<long double>(p.varlen() ? p.total_kv() : std::int64_t{p.batch} * p.seq_kv) *
      p.heads_kv * p.head_dim;
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
