// The mma kernels' side of the static switch (common/dispatch.hpp): the element type of each
// 16-bit dtype, and dispatch_mma, which turns a Problem into a kernel's template arguments.
// Host-only; included by mma/host.cuh and by its CPU emulation (emulation/mma/host.cuh), so
// half_t and bfloat_t come from whichever mma/ptx.cuh is in use.
#pragma once

#include "attnbench/problem.hpp"
#include "common/dispatch.hpp"
#include "mma/ptx.cuh"

namespace attn_mma {

// Element type of a 16-bit dtype (f32 has none: the mma kernels refuse it in Capabilities).
template <attnbench::DType>
struct MmaElem;
template <>
struct MmaElem<attnbench::DType::f16> {
  using type = half_t;
};
template <>
struct MmaElem<attnbench::DType::bf16> {
  using type = bfloat_t;
};

// f(MmaElem<dtype>{}) for the 16-bit dtypes; f32 is refused by Capabilities before this.
template <class F>
decltype(auto) dispatch_dtype(attnbench::DType t, F&& f) {
  using attnbench::DType;
  return attnbench::cuda::dispatch_dtype<MmaElem, DType::f16, DType::bf16>(t, static_cast<F&&>(f));
}

// f(MmaElem<dtype>{}, IntTag<tile>{}, std::bool_constant<head_dim != tile>{},
// std::bool_constant<causal>{}) for problem pr: the instantiation of a kernel whose tiles are HDs
// that runs pr. Causal selects code in the kernels (launch order, the visible range of tiles,
// the masks), so it is a template parameter too.
template <class HDs, class F>
decltype(auto) dispatch_mma(const attnbench::Problem& pr, F&& f) {
  return dispatch_dtype(pr.dtype, [&](auto e) {
    return HDs::dispatch(pr.head_dim, [&](auto d) {
      return attnbench::cuda::dispatch_bool(pr.head_dim != d.value, [&](auto padded) {
        return attnbench::cuda::dispatch_bool(pr.causal,
                                              [&](auto causal) { return f(e, d, padded, causal); });
      });
    });
  });
}

}  // namespace attn_mma
