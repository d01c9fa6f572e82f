// The .npy writer: header bytes exactly as NumPy's format 1.0 defines them, data round-trips.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "attnbench/npy.hpp"

namespace attnbench {
namespace {

std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// A parsed file: the dict text (without padding) and the data bytes.
struct Parsed {
  std::string dict, data;
};

// Checks every fixed byte of the header and the padding rule, then splits the file.
Parsed parse(const std::string& f) {
  Parsed p;
  EXPECT_GE(f.size(), 10u);
  if (f.size() < 10) return p;
  EXPECT_EQ(f.substr(0, 6), std::string("\x93NUMPY"));
  EXPECT_EQ(f[6], '\x01');  // major version
  EXPECT_EQ(f[7], '\x00');  // minor version
  const std::size_t len = static_cast<unsigned char>(f[8]) |
                          (static_cast<std::size_t>(static_cast<unsigned char>(f[9])) << 8);
  EXPECT_EQ((10 + len) % 64, 0u) << "data must start 64-byte aligned";
  EXPECT_LE(10 + len, f.size());
  const std::string header = f.substr(10, len);
  EXPECT_EQ(header.back(), '\n');
  const std::size_t end = header.find_last_not_of(" \n");
  EXPECT_EQ(header.find_first_not_of(' ', end + 1), header.size() - 1)
      << "padding is spaces then one newline";
  p.dict = header.substr(0, end + 1);
  p.data = f.substr(10 + len);
  return p;
}

class Npy : public ::testing::Test {
 protected:
  std::filesystem::path dir;
  void SetUp() override {
    dir = std::filesystem::path(::testing::TempDir()) /
          ("attnbench_npy_" +
           std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    std::filesystem::create_directories(dir);
  }
  void TearDown() override { std::filesystem::remove_all(dir); }
};

TEST_F(Npy, Float32HeaderAndData) {
  const std::vector<float> x = {0.f, 1.5f, -2.25f, 3e-8f, 1e30f, -0.f};
  const auto path = dir / "x.npy";
  write_npy(path.string(), x.data(), DType::f32, {2, 3});
  const std::string f = slurp(path);
  EXPECT_EQ(f.size(), 128u + 24u);  // 10 + 60-byte dict + '\n' rounds up to 128
  const Parsed p = parse(f);
  EXPECT_EQ(p.dict, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }");
  ASSERT_EQ(p.data.size(), x.size() * 4);
  std::vector<float> back(x.size());
  std::memcpy(back.data(), p.data.data(), p.data.size());
  for (std::size_t i = 0; i < x.size(); ++i) EXPECT_EQ(float_bits(back[i]), float_bits(x[i])) << i;
}

TEST_F(Npy, Float16KeepsTheBits) {
  std::vector<std::uint16_t> h;
  for (float v : {1.0f, -0.5f, 65504.f, 6e-8f}) h.push_back(float_to_f16(v));
  h.push_back(0x7e00);  // NaN stays the same NaN
  const auto path = dir / "h.npy";
  write_npy(path.string(), h.data(), DType::f16, {5});
  const Parsed p = parse(slurp(path));
  EXPECT_EQ(p.dict, "{'descr': '<f2', 'fortran_order': False, 'shape': (5,), }");
  ASSERT_EQ(p.data.size(), 10u);
  EXPECT_EQ(std::memcmp(p.data.data(), h.data(), 10), 0);
}

TEST_F(Npy, Bfloat16IsWidenedToFloat32Exactly) {
  std::vector<std::uint16_t> b;
  for (float v : {1.0f, 3.140625f, -1e-20f, 3e38f}) b.push_back(float_to_bf16(v));
  const auto path = dir / "b.npy";
  write_npy(path.string(), b.data(), DType::bf16, {2, 1, 2});
  const Parsed p = parse(slurp(path));
  EXPECT_EQ(p.dict, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 1, 2), }");
  ASSERT_EQ(p.data.size(), 16u);
  for (std::size_t i = 0; i < b.size(); ++i) {
    float v;
    std::memcpy(&v, p.data.data() + 4 * i, 4);
    EXPECT_EQ(float_bits(v), static_cast<std::uint32_t>(b[i]) << 16) << i;
  }
}

TEST_F(Npy, ScalarAndEmptyShapes) {
  const float one = 1.f;
  write_npy((dir / "s.npy").string(), &one, DType::f32, {});
  Parsed p = parse(slurp(dir / "s.npy"));
  EXPECT_EQ(p.dict, "{'descr': '<f4', 'fortran_order': False, 'shape': (), }");
  EXPECT_EQ(p.data.size(), 4u);

  write_npy((dir / "e.npy").string(), nullptr, DType::f32, {0, 8});
  p = parse(slurp(dir / "e.npy"));
  EXPECT_EQ(p.dict, "{'descr': '<f4', 'fortran_order': False, 'shape': (0, 8), }");
  EXPECT_TRUE(p.data.empty());
}

TEST_F(Npy, LongHeaderPadsToTheNextBlock) {
  // Eight large dimensions push the dict past two 64-byte blocks.
  const std::vector<std::int64_t> shape(8, 1000000000LL);
  const std::string h = npy_header("<f4", shape);
  EXPECT_EQ(h.size(), 192u);
  EXPECT_EQ(
      h.find("'shape': (1000000000, 1000000000, 1000000000, 1000000000, 1000000000, 1000000000, "
             "1000000000, 1000000000), }"),
      static_cast<std::size_t>(h.find("'shape'")));
  EXPECT_EQ(static_cast<unsigned char>(h[8]) | (static_cast<unsigned char>(h[9]) << 8), 182);
}

TEST_F(Npy, LargeArrayRoundTripsAcrossChunks) {
  // More elements than one conversion chunk (65536).
  std::vector<std::uint16_t> b(7 * 10001);
  for (std::size_t i = 0; i < b.size(); ++i)
    b[i] = float_to_bf16(static_cast<float>(i) * 0.25f - 100.f);
  const auto path = dir / "big.npy";
  write_npy(path.string(), b.data(), DType::bf16, {7, 10001});
  const Parsed p = parse(slurp(path));
  ASSERT_EQ(p.data.size(), b.size() * 4);
  for (std::size_t i = 0; i < b.size(); i += 997) {
    float v;
    std::memcpy(&v, p.data.data() + 4 * i, 4);
    EXPECT_EQ(v, bf16_to_float(b[i])) << i;
  }
}

TEST_F(Npy, Errors) {
  const float x = 0;
  EXPECT_THROW(write_npy((dir / "no_such_dir" / "x.npy").string(), &x, DType::f32, {1}),
               std::runtime_error);
  EXPECT_THROW(npy_header("<f4", {2, -1}), std::invalid_argument);
}

}  // namespace
}  // namespace attnbench
