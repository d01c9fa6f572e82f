// splitmix64: the one counter-based generator of attnbench's seeded data (inputs, varlen and
// ragged lengths, shuffled page tables): x -> a well-mixed 64-bit value, the same on every
// platform and compiler (unlike the standard library's distributions).
#pragma once

#include <cstdint>

namespace attnbench {

constexpr std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace attnbench
