// The one static switch of the CUDA implementations: run-time (dtype, head_dim, causal and the
// options that select code) to compile-time (element type, head_dim tile, flags). Host only;
// the CPU emulation builds of the mma and Hopper kernels use it too, with the emulator's element
// types (common/element_types.cuh).
//
//   Element<t>::type               the one map from a dtype to its element type: float, half_t,
//                                  bfloat_t (common/element_types.cuh);
//   dispatch_dtype(t, f)           f(Element<t>{}) for f32, f16, bf16; dispatch_dtype16 for the
//                                  16-bit dtypes only (tensor-core kernels: their Capabilities
//                                  refuse f32 first);
//   HeadDims<64, 128, 256>         the head_dim tiles a kernel is instantiated for, declared once
//                                  per kernel; a head_dim runs in the smallest tile that holds it
//                                  (the kernel zero-fills the columns past head_dim on load and
//                                  never stores them), so Capabilities and supports() derive
//                                  from kMax and the dispatch from tile();
//   HeadDims<...>::dispatch(d, f)  f(IntTag<tile(d)>{});
//   dispatch_bool(b, f)            f(std::bool_constant<b>{}), for flags that select code;
//   dispatch_problem<HDs>(p, f)    the three nested for a Problem: f(Element<dtype>{},
//                                  IntTag<tile>{}, std::bool_constant<causal>{}), 16-bit dtypes.
#pragma once

#include <stdexcept>
#include <string>
#include <type_traits>

#include "attnbench/dtype.hpp"
#include "attnbench/problem.hpp"
#include "common/element_types.cuh"

namespace attnbench::cuda {

// ---- element types -------------------------------------------------------------------------

template <DType>
struct Element;
template <>
struct Element<DType::f32> {
  using type = float;
};
template <>
struct Element<DType::f16> {
  using type = half_t;
};
template <>
struct Element<DType::bf16> {
  using type = bfloat_t;
};

template <int N>
struct IntTag {
  static constexpr int value = N;
};

template <template <DType> class Map, DType T0, DType... Ts, class F>
decltype(auto) dispatch_dtype(DType t, F&& f) {
  if (t == T0) return f(Map<T0>{});
  if constexpr (sizeof...(Ts) > 0) {
    return dispatch_dtype<Map, Ts...>(t, static_cast<F&&>(f));
  } else {
    throw std::invalid_argument("dtype " + std::string(to_string(t)) + " has no instantiation");
  }
}

template <class F>
decltype(auto) dispatch_dtype(DType t, F&& f) {
  return dispatch_dtype<Element, DType::f32, DType::f16, DType::bf16>(t, static_cast<F&&>(f));
}

template <class F>
decltype(auto) dispatch_dtype16(DType t, F&& f) {
  return dispatch_dtype<Element, DType::f16, DType::bf16>(t, static_cast<F&&>(f));
}

// Ds ascending: the tiles of a kernel.
template <int... Ds>
struct HeadDims;

template <>
struct HeadDims<> {
  static constexpr int kMax = 0;
  static constexpr int tile(int) { return 0; }
};

template <int D0, int... Ds>
struct HeadDims<D0, Ds...> {
  static_assert(((D0 < Ds) && ...), "tiles ascending");
  static constexpr int kMin = D0;
  static constexpr int kMax = sizeof...(Ds) == 0 ? D0 : HeadDims<Ds...>::kMax;
  // The tile that runs head_dim d (0 if none holds it).
  static constexpr int tile(int d) { return d <= D0 ? D0 : HeadDims<Ds...>::tile(d); }
  // "64, 128, 256", for SKIP reasons.
  static std::string list() {
    return std::to_string(D0) + ((", " + std::to_string(Ds)) + ... + std::string());
  }
  template <class F>
  static decltype(auto) dispatch(int d, F&& f) {
    if (d <= D0) return f(IntTag<D0>{});
    if constexpr (sizeof...(Ds) > 0) {
      return HeadDims<Ds...>::dispatch(d, static_cast<F&&>(f));
    } else {
      throw std::invalid_argument("head_dim " + std::to_string(d) + " is above every tile");
    }
  }
};

template <class F>
decltype(auto) dispatch_bool(bool b, F&& f) {
  if (b) return f(std::true_type{});
  return f(std::false_type{});
}

// The window and soft-cap switch (issue 30) of a kernel whose dense switch gave causal C:
// f(bool_constant<kCausal>, bool_constant<kLocal>, bool_constant<kSoftcap>). kLocal: a sliding
// window, causal folded into it (common/shape.hpp's AttnVariant), so kCausal is false; kSoftcap:
// a soft cap. A dense or causal problem gets (C, false, false): its kernels are unchanged.
// A varlen batch runs in the kLocal instantiations too (AttnVariant::cu_seqlens_q: each block
// reads its sequence's lengths there), its window unbounded unless the problem sets one.
template <bool C, class F>
decltype(auto) dispatch_variant(const Problem& p, F&& f) {
  using std::false_type, std::true_type;
  if (p.has_window() || p.varlen()) {
    return dispatch_bool(p.softcap > 0, [&](auto sc) { return f(false_type{}, true_type{}, sc); });
  }
  if (p.softcap > 0) return f(std::bool_constant<C>{}, false_type{}, true_type{});
  return f(std::bool_constant<C>{}, false_type{}, false_type{});
}

// f(Element<dtype>{}, IntTag<tile>{}, std::bool_constant<causal>{}) for problem p: the
// instantiation of a tensor-core kernel whose head_dim tiles are HDs that runs p.
template <class HDs, class F>
decltype(auto) dispatch_problem(const Problem& p, F&& f) {
  return dispatch_dtype16(p.dtype, [&](auto e) {
    return HDs::dispatch(p.head_dim, [&](auto d) {
      return dispatch_bool(p.causal, [&](auto causal) { return f(e, d, causal); });
    });
  });
}

}  // namespace attnbench::cuda
