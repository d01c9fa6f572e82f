// NumPy .npy v1.0 writer; the format and the bf16 choice are described in npy.hpp.
#include "attnbench/npy.hpp"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <utility>

namespace attnbench {

const char* npy_descr(DType t) {
  return t == DType::f16 ? "<f2" : "<f4";
}  // bf16 widens

std::string npy_header(const std::string& descr, const std::vector<std::int64_t>& shape) {
  std::string dict = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': (";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] < 0) throw std::invalid_argument("npy: negative dimension in shape");
    if (i) dict += ", ";
    dict += std::to_string(shape[i]);
  }
  if (shape.size() == 1) dict += ",";  // Python's one-element tuple
  dict += "), }";
  // magic (6) + version (2) + length (2) + dict + padding + '\n' is a multiple of 64.
  constexpr std::size_t kPrefix = 10;
  const std::size_t unpadded = kPrefix + dict.size() + 1;
  const std::size_t total = (unpadded + 63) / 64 * 64;
  const std::size_t header_len = total - kPrefix;
  if (header_len > 0xffff) throw std::invalid_argument("npy: header too long for format 1.0");
  dict.append(total - unpadded, ' ');
  dict += '\n';

  std::string out = "\x93NUMPY";
  out += '\x01';
  out += '\x00';
  out += static_cast<char>(header_len & 0xff);
  out += static_cast<char>(header_len >> 8);
  return out + dict;
}

namespace {

// Element bytes in little-endian order (a no-op on every host we build for, kept for clarity).
template <typename T>
void put_le(std::string& buf, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  if constexpr (std::endian::native == std::endian::big) {
    for (std::size_t i = 0; i < sizeof(T) / 2; ++i) std::swap(b[i], b[sizeof(T) - 1 - i]);
  }
  buf.append(b, sizeof(T));
}

}  // namespace

void write_npy(const std::string& path, const void* data, DType dtype,
               const std::vector<std::int64_t>& shape) {
  std::int64_t n = 1;
  for (const std::int64_t d : shape) n *= d;
  const std::string header = npy_header(npy_descr(dtype), shape);

  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) throw std::runtime_error("cannot write " + path + ": " + std::strerror(errno));
  f.write(header.data(), static_cast<std::streamsize>(header.size()));

  // Converted in chunks so a large tensor does not need a second full-size copy.
  constexpr std::int64_t kChunk = 1 << 16;
  std::string buf;
  for (std::int64_t start = 0; start < n; start += kChunk) {
    const std::int64_t end = std::min(n, start + kChunk);
    buf.clear();
    for (std::int64_t i = start; i < end; ++i) {
      const auto idx = static_cast<std::size_t>(i);
      switch (dtype) {
        case DType::f32:
          put_le(buf, static_cast<const float*>(data)[idx]);
          break;
        case DType::f16:
          put_le(buf, static_cast<const std::uint16_t*>(data)[idx]);
          break;
        case DType::bf16:
          put_le(buf, bf16_to_float(static_cast<const std::uint16_t*>(data)[idx]));
          break;
      }
    }
    f.write(buf.data(), static_cast<std::streamsize>(buf.size()));
  }
  f.flush();
  if (!f) throw std::runtime_error("error writing " + path + ": " + std::strerror(errno));
}

}  // namespace attnbench
