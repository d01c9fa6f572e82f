// Implementation::supports (Capabilities, then supports_extra), the registry of every
// implementation (filled by ATTNBENCH_REGISTER at static initialisation) with the former names
// the implementations declare (ATTNBENCH_FORMER_NAME), and its glob matcher.
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <stdexcept>

#include "attnbench/implementation.hpp"

namespace attnbench {

Support Implementation::supports(const Problem& p, Pass pass) const {
  const Capabilities c = capabilities();
  if (std::find(c.dtypes.begin(), c.dtypes.end(), p.dtype) == c.dtypes.end()) {
    return Support::no("dtype " + std::string(to_string(p.dtype)) + " not supported");
  }
  if (p.head_dim < c.min_head_dim || p.head_dim > c.max_head_dim ||
      p.head_dim % c.head_dim_multiple != 0) {
    std::ostringstream s;
    s << "head_dim " << p.head_dim << " not supported (needs " << c.min_head_dim << ".."
      << c.max_head_dim;
    if (c.head_dim_multiple > 1) s << ", multiple of " << c.head_dim_multiple;
    s << ")";
    return Support::no(s.str());
  }
  if (p.causal && !c.causal) return Support::no("causal not supported");
  if (p.heads_kv != p.heads_q && !c.gqa) return Support::no("GQA/MQA not supported");
  if (p.has_window() && !c.window) return Support::no("sliding window not supported");
  if (p.softcap != 0 && !c.softcap) return Support::no("softcap not supported");
  if (p.varlen() && !c.varlen) return Support::no("variable-length batches not supported");
  if (p.paged() && !c.paged) return Support::no("paged KV caches not supported");
  const bool need_fwd = pass != Pass::bwd;
  const bool need_bwd = pass != Pass::fwd;
  // Inference only: no gradient flows through a block table (nor does the reference compute one).
  if (p.paged() && need_bwd) return Support::no("paged KV caches are forward-only (inference): no backward");
  if (need_fwd && !c.forward) {
    if (c.fwd_partner.empty()) return Support::no("no forward pass");
    const Implementation* partner = Registry::instance().find(c.fwd_partner);
    if (!partner) return Support::no("forward partner " + c.fwd_partner + " is not registered");
    Support s = partner->supports(p, Pass::fwd);
    if (!s) return Support::no("forward partner " + c.fwd_partner + ": " + s.reason);
  }
  if (need_bwd && !c.backward) return Support::no("no backward pass");
  return supports_extra(p, pass);
}

void Implementation::forward(const FwdArgs&) const {
  throw std::logic_error(name() + " has no forward pass");
}
void Implementation::backward(const BwdArgs&) const {
  throw std::logic_error(name() + " has no backward pass");
}

Registry& Registry::instance() {
  static Registry r;
  return r;
}

bool Registry::add(std::unique_ptr<Implementation> impl) {
  if (find(impl->name())) {
    std::fprintf(stderr, "attnbench: two implementations are named '%s'\n", impl->name().c_str());
    std::abort();
  }
  if (const auto it = former_.find(impl->name()); it != former_.end()) {
    std::fprintf(stderr, "attnbench: '%s' is registered, but it is also the former name of '%s'\n",
                 impl->name().c_str(), it->second.c_str());
    std::abort();
  }
  impls_.push_back(std::move(impl));
  return true;
}

// Registration order across files is unspecified, so each of add() and add_former_name() checks
// against what the other has recorded so far: together they refuse every clash in either order.
bool Registry::add_former_name(std::string former, std::string current) {
  const char* why = nullptr;
  if (former == current)
    why = "is its own former name";
  else if (find(former))
    why = "is the name of a registered implementation";
  else if (former_.count(former) && former_.at(former) != current)
    why = "is already the former name of another implementation";
  if (why) {
    std::fprintf(stderr, "attnbench: the former name '%s' (of '%s') %s\n", former.c_str(),
                 current.c_str(), why);
    std::abort();
  }
  former_[std::move(former)] = std::move(current);
  return true;
}

std::string Registry::canonical(std::string_view name) const {
  std::string n(name);
  // A rename of a rename: follow the chain, at most once per entry (a cycle cannot loop).
  for (std::size_t hops = 0; hops <= former_.size(); ++hops) {
    const auto it = former_.find(n);
    if (it == former_.end()) break;
    n = it->second;
  }
  return n;
}

bool Registry::is_former_name(std::string_view name) const { return former_.find(name) != former_.end(); }

std::vector<std::pair<std::string, std::string>> Registry::former_names() const {
  std::vector<std::pair<std::string, std::string>> v;
  for (const auto& [former, current] : former_) v.emplace_back(former, canonical(current));
  return v;
}

const Implementation* Registry::find(std::string_view name) const {
  for (const auto& i : impls_) {
    if (i->name() == name) return i.get();
  }
  return nullptr;
}

std::vector<const Implementation*> Registry::all() const {
  std::vector<const Implementation*> v;
  for (const auto& i : impls_) v.push_back(i.get());
  std::sort(v.begin(), v.end(), [](auto* a, auto* b) { return a->name() < b->name(); });
  return v;
}

std::vector<const Implementation*> Registry::match(std::string_view glob) const {
  std::vector<const Implementation*> v;
  for (auto* i : all()) {
    if (glob_match(glob, i->name())) v.push_back(i);
  }
  return v;
}

namespace {

bool in_class(std::string_view name, unsigned char c) {
  if (name == "alpha") return std::isalpha(c);
  if (name == "digit") return std::isdigit(c);
  if (name == "alnum") return std::isalnum(c);
  if (name == "upper") return std::isupper(c);
  if (name == "lower") return std::islower(c);
  if (name == "space") return std::isspace(c);
  if (name == "punct") return std::ispunct(c);
  if (name == "xdigit") return std::isxdigit(c);
  return false;
}

// One pattern element at pat[p] against the character c: '?', a bracket expression ([abc],
// [a-z], [!x] or [^x], [[:digit:]]), a backslash escape, or itself. len gets the element's length.
// An unterminated '[' is an ordinary character, as for fnmatch.
bool element_matches(std::string_view pat, std::size_t p, char c, std::size_t& len) {
  if (pat[p] == '?') {
    len = 1;
    return true;
  }
  if (pat[p] == '\\' && p + 1 < pat.size()) {
    len = 2;
    return pat[p + 1] == c;
  }
  if (pat[p] == '[') {
    std::size_t q = p + 1;
    const bool negate = q < pat.size() && (pat[q] == '!' || pat[q] == '^');
    if (negate) ++q;
    bool hit = false, first = true;
    const auto uc = static_cast<unsigned char>(c);
    while (q < pat.size() && (pat[q] != ']' || first)) {
      first = false;
      if (pat[q] == '[' && q + 1 < pat.size() && pat[q + 1] == ':') {
        const std::size_t close = pat.find(":]", q + 2);
        if (close != std::string_view::npos) {
          hit = hit || in_class(pat.substr(q + 2, close - q - 2), uc);
          q = close + 2;
          continue;
        }
      }
      char lo = pat[q];
      if (lo == '\\' && q + 1 < pat.size()) lo = pat[++q];
      char hi = lo;
      if (q + 2 < pat.size() && pat[q + 1] == '-' && pat[q + 2] != ']') {
        hi = pat[q + 2];
        if (hi == '\\' && q + 3 < pat.size()) hi = pat[++q + 2];
        q += 2;
      }
      hit = hit || (uc >= static_cast<unsigned char>(lo) && uc <= static_cast<unsigned char>(hi));
      ++q;
    }
    if (q < pat.size()) {  // the closing ']'
      len = q + 1 - p;
      return hit != negate;
    }
  }
  len = 1;
  return pat[p] == c;
}

}  // namespace

bool glob_match(std::string_view pat, std::string_view s) {
  // fnmatch's globs (no flags): '*', '?', bracket expressions and backslash escapes. Iterative
  // with single-star backtracking: linear in practice, no recursion (the fuzzer feeds it).
  std::size_t p = 0, t = 0, star = std::string_view::npos, mark = 0;
  while (t < s.size()) {
    std::size_t len = 0;
    if (p < pat.size() && pat[p] == '*') {
      star = p++;
      mark = t;
    } else if (p < pat.size() && element_matches(pat, p, s[t], len)) {
      p += len;
      ++t;
    } else if (star != std::string_view::npos) {
      p = star + 1;
      t = ++mark;
    } else {
      return false;
    }
  }
  while (p < pat.size() && pat[p] == '*') ++p;
  return p == pat.size();
}

const Implementation* naive_baseline(Device d) {
  return Registry::instance().find(std::string(to_string(d)) + ".naive_3pass");
}

}  // namespace attnbench
