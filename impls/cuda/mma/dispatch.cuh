// Run-time (dtype, head_dim) to compile-time dispatch for the mma kernels. Host-only, shared by
// mma/host.cuh and its CPU emulation (emulation/mma/host.cuh); half_t and bfloat_t come from
// whichever mma/ptx.cuh is in use.
#pragma once

#include <stdexcept>
#include <string>
#include <type_traits>

#include "attnbench/problem.hpp"
#include "mma/ptx.cuh"

namespace attn_mma {

template <class T>
struct TypeTag {
  using type = T;
};

// f(TypeTag<element type>{}) for the 16-bit dtypes; f32 is rejected by Capabilities before this.
template <class F>
void dispatch_dtype(attnbench::DType t, F&& f) {
  switch (t) {
    case attnbench::DType::f16:
      f(TypeTag<half_t>{});
      return;
    case attnbench::DType::bf16:
      f(TypeTag<bfloat_t>{});
      return;
    case attnbench::DType::f32:
      break;
  }
  throw std::invalid_argument("mma kernels: dtype " + std::string(attnbench::to_string(t)) +
                              " has no instantiation");
}

// f(TypeTag<T>{}, std::integral_constant<int, D>{}) for the (dtype, head_dim) instantiated, where
// head_dim is one of Ds...; `who` names the implementation in the error for any other.
template <int... Ds, class F>
void dispatch_dtype_head_dim(const attnbench::Problem& pr, const char* who, F&& f) {
  dispatch_dtype(pr.dtype, [&](auto tag) {
    const bool found = ((pr.head_dim == Ds ? (f(tag, std::integral_constant<int, Ds>{}), true)
                                           : false) ||
                        ...);
    if (!found) throw std::invalid_argument(std::string(who) + ": head_dim has no instantiation");
  });
}

}  // namespace attn_mma
