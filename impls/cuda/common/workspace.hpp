// The workspace arithmetic of every CUDA implementation, host-only plain C++ (the cuDNN .cpp files
// and the CPU emulation builds include it too): 256-byte alignment of the pieces of the
// harness's workspace, and a carver that hands them out.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <string>

namespace attnbench::cuda {

inline constexpr std::size_t kWorkspaceAlign = 256;
inline constexpr std::size_t align_up(std::size_t n, std::size_t a = kWorkspaceAlign) {
  return (n + a - 1) / a * a;
}
// For byte counts kept signed (cuDNN's int64_t sizes).
inline constexpr std::int64_t align_up(std::int64_t n) {
  return static_cast<std::int64_t>(align_up(static_cast<std::size_t>(n)));
}

// Hands out consecutive 256-byte aligned pieces of the harness's workspace; throws if the
// workspace is smaller than the pieces requested (a harness/implementation mismatch).
class WorkspaceCarver {
 public:
  WorkspaceCarver(void* base, std::size_t bytes) : base_(static_cast<char*>(base)), bytes_(bytes) {}
  template <class T>
  T* take(std::size_t count) {
    const std::size_t need = align_up(count * sizeof(T));
    const auto addr = reinterpret_cast<std::uintptr_t>(base_ + used_);
    const std::size_t pad = align_up(addr) - addr;  // base may not be 256-aligned
    if (used_ + pad + need > bytes_)
      throw std::runtime_error("workspace too small: need more than " + std::to_string(bytes_) +
                               " bytes");
    T* p = reinterpret_cast<T*>(base_ + used_ + pad);
    used_ += pad + need;
    return p;
  }

 private:
  char* base_;
  std::size_t bytes_;
  std::size_t used_ = 0;
};

// Bytes a WorkspaceCarver needs for these pieces (each rounded up, plus slack for a base that is
// not 256-aligned).
inline std::size_t carve_bytes(std::initializer_list<std::size_t> pieces) {
  std::size_t n = kWorkspaceAlign;
  for (std::size_t p : pieces) n += align_up(p);
  return n;
}

}  // namespace attnbench::cuda
