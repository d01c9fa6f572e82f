// Implementation::supports (Capabilities, then supports_extra), the registry of every
// implementation (filled by ATTNBENCH_REGISTER at static initialisation) and its glob matcher.
#include <algorithm>
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
  const bool need_fwd = pass != Pass::bwd;
  const bool need_bwd = pass != Pass::fwd;
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
  impls_.push_back(std::move(impl));
  return true;
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

bool glob_match(std::string_view pat, std::string_view s) {
  // Iterative matcher with single-star backtracking: linear in practice, no recursion.
  std::size_t p = 0, t = 0, star = std::string_view::npos, mark = 0;
  while (t < s.size()) {
    if (p < pat.size() && (pat[p] == '?' || pat[p] == s[t])) {
      ++p;
      ++t;
    } else if (p < pat.size() && pat[p] == '*') {
      star = p++;
      mark = t;
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
