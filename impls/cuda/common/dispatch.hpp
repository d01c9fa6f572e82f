// The one static switch of the CUDA implementations: run-time (dtype, head_dim) to compile-time
// (element type, head_dim tile). Plain C++, host only, so that the CPU emulation build of the
// mma kernels (tests/mma_emulation) uses it too.
//
//   HeadDims<64, 128, 256>         the head_dim tiles a kernel is instantiated for, declared once
//                                  per kernel; a head_dim runs in the smallest tile that holds it
//                                  (the kernel zero-fills the columns past head_dim on load and
//                                  never stores them), so Capabilities and supports() derive
//                                  from kMax and the dispatch from tile();
//   dispatch_dtype<Map, Ts...>     f(Map<t>{}) for the dtypes Ts... (Map<t>::type: element type);
//   HeadDims<...>::dispatch(d, f)  f(IntTag<tile(d)>{});
//   dispatch_bool(b, f)            f(std::bool_constant<b>{}), for flags that select code.
#pragma once

#include <stdexcept>
#include <string>
#include <type_traits>

#include "attnbench/dtype.hpp"

namespace attnbench::cuda {

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

}  // namespace attnbench::cuda
