// NumPy .npy writer (format version 1.0), for `attnbench run --dump DIR`.
//
// Layout: the magic "\x93NUMPY", version bytes 1 0, a little-endian uint16 header length, then
// an ASCII dict "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }" padded with spaces
// and ended by '\n' so that the data starts at a multiple of 64 bytes; then the raw data in C
// order, little-endian.
//
// dtypes: f32 -> '<f4', f16 -> '<f2' (bits as stored). bf16 has no NumPy dtype, so it is widened
// to '<f4': bf16 -> f32 is exact (the upper 16 bits of the float), and every tool reads '<f4'
// (writing '<u2' bit patterns would force each reader to know the trick). The file is therefore
// twice the size of the bf16 tensor; the values are identical.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "attnbench/dtype.hpp"

namespace attnbench {

// "<f4" or "<f2": the descr written for a tensor stored in t.
const char* npy_descr(DType t);

// The full header (magic through the '\n' padding) for descr and shape. Throws
// std::invalid_argument if it would not fit version 1.0 (header longer than 65535 bytes) or a
// dimension is negative.
std::string npy_header(const std::string& descr, const std::vector<std::int64_t>& shape);

// Writes data (C order, product(shape) elements stored in dtype) to path. Throws
// std::runtime_error naming the path when the file cannot be written.
void write_npy(const std::string& path, const void* data, DType dtype,
               const std::vector<std::int64_t>& shape);

}  // namespace attnbench
