// Replays the fuzzer's findings as a normal test: every file in tests/fuzz/regressions/ (an input
// that once crashed, hung or exhausted memory in fuzz_config) goes through the fuzz target's own
// function, then through parse_config, which must finish quickly with the outcome the file's name
// states: "error-*" must be refused with a ConfigError, "ok-*" must parse. The seed corpus
// (configs/*.json) is replayed too; those must all parse.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include "attnbench/config.hpp"
#include "attnbench/context.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

namespace {

using namespace attnbench;
namespace fs = std::filesystem;

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// Runs the input through the fuzz target and the parser; returns whether it parsed.
bool replay(const fs::path& file) {
  const std::string text = slurp(file);
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(LLVMFuzzerTestOneInput(reinterpret_cast<const std::uint8_t*>(text.data()), text.size()), 0);
  ParseOptions po;
  po.max_bytes = std::int64_t{64} << 30;
  const ConfigResult r = parse_config(text, po);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(s, 10.0) << file << " took " << s << " s (a hang regression)";
  if (const auto* e = std::get_if<ConfigError>(&r)) {
    EXPECT_FALSE(e->message.empty()) << file;
    return false;
  }
  return true;
}

TEST(FuzzRegressions, EachFindingEndsAsItsNameSays) {
  const fs::path dir = fs::path(source_dir()) / "tests" / "fuzz" / "regressions";
  ASSERT_TRUE(fs::is_directory(dir)) << dir;
  int n = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (!e.is_regular_file() || name == "README.md") continue;
    const bool want_ok = name.rfind("ok-", 0) == 0;
    ASSERT_TRUE(want_ok || name.rfind("error-", 0) == 0) << name << ": name it error-* or ok-*";
    EXPECT_EQ(replay(e.path()), want_ok) << name;
    ++n;
  }
  std::cout << "[ replayed ] " << n << " regression input(s)\n";
}

TEST(FuzzRegressions, SeedCorpusParses) {
  int n = 0;
  for (const auto& e : fs::directory_iterator(fs::path(source_dir()) / "configs")) {
    if (e.path().extension() != ".json") continue;
    const std::string text = slurp(e.path());
    // fa2_grid.json names CUDA implementations only: "nothing to run" in a CPU-only build.
    const ConfigResult r = parse_config(text);
    const auto* err = std::get_if<ConfigError>(&r);
    const bool cpu_only_refusal = err && err->message.find("nothing to run") != std::string::npos;
    EXPECT_TRUE(!err || cpu_only_refusal) << e.path() << ": " << err->text();
    EXPECT_EQ(LLVMFuzzerTestOneInput(reinterpret_cast<const std::uint8_t*>(text.data()), text.size()), 0);
    ++n;
  }
  EXPECT_GE(n, 3);
}

}  // namespace
