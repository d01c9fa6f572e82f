// The mma kernels' side of the static switch (common/dispatch.hpp):
// dispatch_mma, which turns a Problem into a kernel's template arguments. Host-only; included by
// mma/host.cuh and by its CPU emulation (emulation/mma/host.cuh), so half_t and bfloat_t are
// whichever common/element_types.cuh is on the include path.
#pragma once

#include "attnbench/problem.hpp"
#include "common/dispatch.hpp"
#include "mma/ptx.cuh"

namespace attn_mma {

// f(Element<dtype>{}, IntTag<tile>{}, std::bool_constant<head_dim != tile>{},
// std::bool_constant<causal>{}) for problem pr: dispatch_problem (common/dispatch.hpp) and whether
// the tile is padded, which selects the mma kernels' column masks. Causal selects code in the
// kernels (launch order, the visible range of tiles, the masks), so it is a template parameter.
template <class HDs, class F>
decltype(auto) dispatch_mma(const attnbench::Problem& pr, F&& f) {
  return attnbench::cuda::dispatch_problem<HDs>(pr, [&](auto e, auto d, auto causal) {
    return attnbench::cuda::dispatch_bool(pr.head_dim != d.value,
                                          [&](auto padded) { return f(e, d, padded, causal); });
  });
}

}  // namespace attn_mma
