// The capabilities and option checks the tensor-core families (mma/, hopper/) share. Host-only
// plain C++, so that their CPU emulation builds use it too.
#pragma once

#include <string>

#include "attnbench/implementation.hpp"

namespace attnbench::cuda {

// A tensor-core kernel whose head_dim tiles are HDs (common/dispatch.hpp): f16 and bf16, head_dim
// a multiple of 8 (16-byte rows for cp.async and TMA) from 8 up to the largest tile, causal and
// GQA; forward and backward as given.
template <class HDs>
Capabilities tensor_core_capabilities(bool forward, bool backward) {
  Capabilities c;
  c.dtypes = {DType::f16, DType::bf16};
  c.min_head_dim = 8;
  c.max_head_dim = HDs::kMax;
  c.head_dim_multiple = 8;
  c.causal = true;
  c.gqa = true;
  c.forward = forward;
  c.backward = backward;
  return c;
}

// An on/off option (deterministic, persistent): absent, 0 or 1.
inline Support check_flag_option(const Options& o, const std::string& key) {
  const auto it = o.find(key);
  if (it != o.end() && it->second != 0 && it->second != 1) {
    return Support::no(key + " must be 0 or 1, not " + std::to_string(it->second));
  }
  return Support::yes();
}

}  // namespace attnbench::cuda
