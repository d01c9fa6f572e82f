// Problem: sizes, the causal and window mask (first_visible_key, first_invisible_key), FLOPs, the
// case label and validate().
#include "attnbench/problem.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>

#include "attnbench/splitmix64.hpp"

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
  s.page_size = 0;  // its keys gathered through the table: contiguous
  s.page_order = PageOrder::sequential;
  s.num_pages = 0;
  s.pages_per_seq = 0;
  s.block_table.reset();
  return s;
}

std::string_view to_string(PageOrder o) {
  switch (o) {
    case PageOrder::sequential: return "sequential";
    case PageOrder::shuffled: return "shuffled";
    case PageOrder::table: return "table";
  }
  return "?";
}

std::optional<PageOrder> parse_page_order(std::string_view s) {
  if (s == "sequential") return PageOrder::sequential;
  if (s == "shuffled") return PageOrder::shuffled;
  return std::nullopt;
}

int Problem::pages_of(int b) const {
  if (page_size <= 0) return 0;
  return static_cast<int>((std::int64_t{seq_kv_of(b)} + page_size - 1) / page_size);
}

std::int64_t Problem::pages_needed() const {
  std::int64_t n = 0;
  for (int b = 0; b < batch; ++b) n += pages_of(b);
  return n;
}

namespace {

// The pages a pool of this size may hold at most (2^31 - 1: int32 page indices, as every paged
// kernel takes them); make_block_table builds nothing larger, validate() refuses it.
constexpr std::int64_t kMaxPages = std::numeric_limits<std::int32_t>::max();

}  // namespace

void Problem::make_block_table() {
  if (page_size <= 0) return;
  if (page_order == PageOrder::table) {
    if (num_pages == 0 && block_table) {
      std::int32_t top = -1;
      for (std::int32_t x : *block_table) top = std::max(top, x);
      num_pages = top + 1;
    }
    return;
  }
  // Sizes validate() refuses: no table (validate() says what is wrong with the sizes first).
  block_table.reset();
  pages_per_seq = 0;
  if (batch <= 0 || (varlen() && seqlens_kv.size() != static_cast<std::size_t>(batch))) return;
  const std::int64_t needed = pages_needed();
  int longest = 0;
  for (int b = 0; b < batch; ++b) longest = std::max(longest, pages_of(b));
  if (needed > kMaxPages || std::int64_t{batch} * longest > kMaxPages) return;
  if (num_pages == 0) num_pages = static_cast<int>(needed);
  if (num_pages < needed || num_pages < 1) return;
  // Physical pages in the order they are handed out: the pool in order, or a fixed-seed
  // Fisher-Yates permutation of it (splitmix64, portable; its first `needed` pages are used).
  std::vector<std::int32_t> order(static_cast<std::size_t>(num_pages));
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = static_cast<std::int32_t>(i);
  if (page_order == PageOrder::shuffled) {
    for (std::size_t i = order.size(); i > 1; --i) {
      const std::size_t j = splitmix64(kPageShuffleSeed + i) % i;
      std::swap(order[i - 1], order[j]);
    }
  }
  auto table = std::make_shared<std::vector<std::int32_t>>(
      static_cast<std::size_t>(std::int64_t{batch} * longest), 0);
  std::size_t next = 0;
  for (int b = 0; b < batch; ++b) {
    for (int lp = 0; lp < pages_of(b); ++lp) {
      (*table)[static_cast<std::size_t>(std::int64_t{b} * longest + lp)] = order[next++];
    }
  }
  pages_per_seq = longest;
  block_table = std::move(table);
}

void Problem::set_block_table(const std::vector<std::vector<int>>& rows) {
  std::size_t longest = 0;
  for (const auto& r : rows) longest = std::max(longest, r.size());
  // Padding -1: a row shorter than its context then reads as missing pages (validate()).
  auto table = std::make_shared<std::vector<std::int32_t>>(rows.size() * longest, -1);
  for (std::size_t b = 0; b < rows.size(); ++b) {
    std::copy(rows[b].begin(), rows[b].end(), table->begin() + static_cast<std::ptrdiff_t>(b * longest));
  }
  page_order = PageOrder::table;
  pages_per_seq = static_cast<int>(longest);
  block_table = std::move(table);
}

std::vector<std::vector<int>> Problem::block_table_rows() const {
  std::vector<std::vector<int>> rows;
  if (!block_table || pages_per_seq <= 0) return rows;
  for (std::size_t i = 0; i < block_table->size(); i += static_cast<std::size_t>(pages_per_seq)) {
    rows.emplace_back(block_table->begin() + static_cast<std::ptrdiff_t>(i),
                      block_table->begin() + static_cast<std::ptrdiff_t>(i + pages_per_seq));
    while (!rows.back().empty() && rows.back().back() == -1) rows.back().pop_back();  // padding
  }
  return rows;
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
  if (paged()) return std::int64_t{num_pages} * page_size * heads_kv * head_dim;
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

SequenceMetadata sequence_metadata(const Problem& p) {
  SequenceMetadata m;
  auto& d = m.data;
  auto cumulative = [&](bool q) {
    const auto at = static_cast<std::int64_t>(d.size());
    for (int b = 0; b <= p.batch; ++b)
      d.push_back(static_cast<std::int32_t>(q ? p.q_start(b) : p.kv_start(b)));
    return at;
  };
  if (p.varlen()) m.cu_seqlens_q = cumulative(true);
  if (p.varlen() && !p.paged()) m.cu_seqlens_kv = cumulative(false);
  if (p.varlen() || p.paged()) {
    m.seqlens_kv = static_cast<std::int64_t>(d.size());
    for (int b = 0; b < p.batch; ++b) d.push_back(p.seq_kv_of(b));
  }
  if (p.paged() && p.block_table) {
    m.block_table = static_cast<std::int64_t>(d.size());
    d.insert(d.end(), p.block_table->begin(), p.block_table->end());
  }
  return m;
}

std::int64_t Problem::hbm_bytes_fwd() const {
  std::int64_t keys = 0;  // every sequence's context, once
  for (int b = 0; b < batch; ++b) keys += seq_kv_of(b);
  const auto elt = static_cast<std::int64_t>(dtype_size(dtype));
  return 2 * keys * heads_kv * head_dim * elt + 2 * q_bytes();
}

bool Problem::memory_bound() const {
  if (paged()) return true;
  return seq_q > 0 && seq_q <= kMaxDecodeQueries;  // varlen: seq_q is the longest sequence's
}

namespace {

// FNV-1a, 64-bit, over 64-bit values, folded to 8 hex digits: the labels' hashes of lists.
class LabelHash {
 public:
  void mix(std::int64_t x) {
    for (int byte = 0; byte < 8; ++byte) {
      h_ ^= static_cast<std::uint64_t>(x >> (8 * byte)) & 0xffu;
      h_ *= 0x100000001b3ull;
    }
  }
  std::string hex() const {
    char s[9];
    std::snprintf(s, sizeof s, "%08x", static_cast<unsigned>((h_ >> 32) ^ (h_ & 0xffffffffu)));
    return s;
  }

 private:
  std::uint64_t h_ = 0xcbf29ce484222325ull;
};

}  // namespace

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
    LabelHash h;
    h.mix(static_cast<std::int64_t>(seqlens_q.size()));
    for (int x : seqlens_q) h.mix(x);
    h.mix(static_cast<std::int64_t>(seqlens_kv.size()));
    for (int x : seqlens_kv) h.mix(x);
    s << "_varlen_q" << total_q() << "_kv" << total_kv() << "_" << h.hex();
  }
  if (page_size != 0) {
    s << "_page" << page_size;
    if (page_order == PageOrder::shuffled) s << "_shuffled";
    if (page_order == PageOrder::table) {
      LabelHash h;
      h.mix(num_pages);
      h.mix(pages_per_seq);
      if (block_table) {
        h.mix(static_cast<std::int64_t>(block_table->size()));
        for (std::int32_t x : *block_table) h.mix(x);
      }
      s << "_table" << h.hex();
    }
    if (page_order != PageOrder::table && num_pages > pages_needed()) s << "_pool" << num_pages;
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

// The paged fields: a page size, a block table of batch rows whose first pages_of(b) entries hold
// each context, every entry a page of the pool, int32 indices (as kernels take them).
std::string validate_paged(const Problem& p) {
  std::ostringstream s;
  if (p.page_size < 0) {
    s << "page_size = " << p.page_size << ": must be >= 0 (0: K and V contiguous, not paged)";
    return s.str();
  }
  if (p.page_size == 0) {
    if (p.page_order != PageOrder::sequential || p.block_table || p.num_pages != 0) {
      s << "page_size = 0: a block table";
      if (p.page_order != PageOrder::sequential) s << " (page_order " << to_string(p.page_order) << ")";
      if (p.num_pages != 0) s << " (num_pages " << p.num_pages << ")";
      s << " needs pages of at least one token";
      return s.str();
    }
    return {};
  }
  if (p.num_pages < 1) {
    s << "num_pages = " << p.num_pages << ": a paged KV cache needs at least one page";
    return s.str();
  }
  if (p.pages_needed() > kMaxPages) {
    s << "page_size = " << p.page_size << ": the contexts fill " << p.pages_needed()
      << " pages, more than 2^31 - 1 (int32 page indices)";
    return s.str();
  }
  if (p.page_order != PageOrder::table && p.num_pages < p.pages_needed()) {
    s << "num_pages = " << p.num_pages << ": fewer than the " << p.pages_needed()
      << " pages of " << p.page_size << " keys the contexts fill";
    return s.str();
  }
  if (!p.block_table) {
    s << "block_table: none for page_size = " << p.page_size
      << " (Problem::make_block_table builds it)";
    return s.str();
  }
  if (p.pages_per_seq < 0 ||
      static_cast<std::int64_t>(p.block_table->size()) != std::int64_t{p.batch} * p.pages_per_seq) {
    s << "block_table: " << p.block_table->size() << " entries, not batch x pages_per_seq = "
      << p.batch << " x " << p.pages_per_seq << " (one row per sequence)";
    return s.str();
  }
  for (int b = 0; b < p.batch; ++b) {
    int given = p.pages_per_seq;  // an explicit row's own length: its -1 padding left out
    while (given > 0 && p.page(b, given - 1) == -1) --given;
    if (p.pages_of(b) > given) {
      s << "block_table[" << b << "]: " << given << " pages of " << p.page_size << " keys hold "
        << std::int64_t{given} * p.page_size << " keys, fewer than its "
        << (p.varlen() ? "seqlens_kv[" + std::to_string(b) + "]" : std::string("seq_kv")) << " = "
        << p.seq_kv_of(b);
      return s.str();
    }
    for (int lp = 0; lp < given; ++lp) {
      const std::int32_t x = p.page(b, lp);
      if (x < 0 || x >= p.num_pages) {
        s << "block_table[" << b << "][" << lp << "] = " << x << ": not a page of the pool [0, "
          << p.num_pages << ")";
        return s.str();
      }
    }
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
  if (std::string why = validate_paged(p); !why.empty()) return why;
  // Sizes in elements must fit in int64 with room for byte counts, and each per-(b,h) score
  // matrix index (seq_q * seq_kv) in int64 as well.
  // (Varlen: the packed totals, which validate_varlen bounds to int32.)
  const long double q =
      static_cast<long double>(p.varlen() ? p.total_q() : std::int64_t{p.batch} * p.seq_q) *
      p.heads_q * p.head_dim;
  // (Paged: the pool, num_pages * page_size rows, bounded to int32 pages of int32 keys.)
  const long double kv =
      (p.paged() ? static_cast<long double>(p.num_pages) * p.page_size
                 : static_cast<long double>(p.varlen() ? p.total_kv()
                                                       : std::int64_t{p.batch} * p.seq_kv)) *
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
