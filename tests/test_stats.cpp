// compare's statistics (stats.hpp) against SciPy's values, the corrections by hand; the globs
// against fnmatch(3); the command-line sweeps (cli_problem.hpp).
#include <fnmatch.h>
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <string>
#include <variant>
#include <vector>

#include "attnbench/cli_problem.hpp"
#include "attnbench/implementation.hpp"
#include "attnbench/stats.hpp"

namespace attnbench {
namespace {

// scipy.stats.mannwhitneyu(base, new, alternative="less", method=...).pvalue: "new is larger".
TEST(MannWhitney, ExactAgainstSciPy) {
  EXPECT_NEAR(mann_whitney_greater({1, 2, 3}, {4, 5, 6}), 0.05, 1e-12);
  EXPECT_NEAR(mann_whitney_greater({1, 2, 3, 4, 5}, {6, 7, 8, 9, 10}), 0.003968253968253968, 1e-12);
  EXPECT_NEAR(mann_whitney_greater({1.0, 1.2, 0.9, 1.1, 1.05, 0.95, 1.3, 1.02},
                                   {1.11, 1.25, 1.4, 1.22, 1.15, 1.5, 1.06, 1.33}),
              0.007381507381507382, 1e-12);
  // The other way round: new is not larger.
  EXPECT_NEAR(mann_whitney_greater({4, 5, 6}, {1, 2, 3}), 1.0, 1e-12);
  EXPECT_EQ(mann_whitney_greater({}, {1, 2}), 1.0);
}

TEST(MannWhitney, NormalApproximationWithTiesAndLargeSamples) {
  // Ties: the tie-corrected normal approximation with continuity correction (SciPy's asymptotic).
  EXPECT_NEAR(mann_whitney_greater({1, 2, 2, 3, 3, 3, 4}, {2, 3, 4, 4, 5, 5, 6}),
              0.021525716364472567, 1e-9);
  // More than kExactMax samples on a side.
  std::vector<double> a, b;
  for (int x = 0; x < 60; ++x) a.push_back(x);
  for (int x = 0; x < 110; x += 2) b.push_back(x + 7.5);
  EXPECT_NEAR(mann_whitney_greater(a, b) / 5.634219910319323e-08, 1.0, 1e-6);
  // Everything tied: no evidence either way.
  EXPECT_EQ(mann_whitney_greater({1, 1, 1}, {1, 1, 1}), 1.0);
}

TEST(MannWhitney, SmallestPValue) {
  EXPECT_NEAR(mann_whitney_min_p(3, 3), 0.05, 1e-12);  // 3 against 3 can never reach 0.05 / N
  EXPECT_NEAR(mann_whitney_min_p(10, 10), 1 / 184756.0, 1e-15);
  EXPECT_NEAR(mann_whitney_min_p(2, 5), 1 / 21.0, 1e-12);
  EXPECT_EQ(mann_whitney_min_p(0, 5), 1.0);
  // The exact test reaches it with complete separation.
  EXPECT_NEAR(mann_whitney_greater({1, 2, 3, 4, 5, 6, 7, 8, 9, 10},
                                   {11, 12, 13, 14, 15, 16, 17, 18, 19, 20}),
              mann_whitney_min_p(10, 10), 1e-15);
}

// scipy.stats.wilcoxon(d, alternative="greater", method="exact").pvalue where SciPy is exact (no
// ties, no zeros); with ties and zeros, the count over all 2^n sign patterns (by hand in Python,
// ranks from scipy.stats.rankdata, zeros left out).
TEST(SignedRank, ExactAgainstSciPyAndByCounting) {
  EXPECT_NEAR(signed_rank_greater({0.1, 0.2, 0.3, 0.4, 0.5, 0.6}), 0.015625, 1e-15);
  EXPECT_NEAR(signed_rank_greater({0.1, -0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8}), 0.01171875, 1e-15);
  EXPECT_NEAR(signed_rank_greater({-1, -2, -3, 0.5}), 0.9375, 1e-15);
  EXPECT_NEAR(signed_rank_greater({0.1, 0.1, -0.1, 0.2, 0.3, 0.3, 0.0, -0.05}), 0.0625, 1e-15);
  EXPECT_EQ(signed_rank_greater({}), 1.0);
  EXPECT_EQ(signed_rank_greater({0, 0, 0}), 1.0);
  // NaN (a failed invocation) is left out like a zero.
  EXPECT_NEAR(signed_rank_greater({0.1, 0.2, 0.3, 0.4, 0.5, 0.6, NAN}), 0.015625, 1e-15);
}

TEST(SignedRank, NormalApproximationBeyondExactMax) {
  // scipy.stats.wilcoxon(d, alternative="greater", method="approx", correction=True,
  // zero_method="wilcox"): 60 pairs, 6 of them zero, many ties.
  std::vector<double> d;
  for (int i = 0; i < 60; ++i) d.push_back((i % 7 - 2) * 0.1 + 0.05 * (i % 3));
  EXPECT_NEAR(signed_rank_greater(d) / 6.166368299876032e-06, 1.0, 1e-6);
}

TEST(SignedRank, SmallestPValue) {
  EXPECT_EQ(signed_rank_min_p(4), 0.0625);  // 4 rounds can never reach 0.05
  EXPECT_EQ(signed_rank_min_p(10), 1 / 1024.0);
  EXPECT_EQ(signed_rank_greater({1, 2, 3, 4, 5, 6, 7, 8, 9, 10}), signed_rank_min_p(10));
}

TEST(Correction, HolmAndBenjaminiHochberg) {
  const std::vector<double> p{0.01, 0.04, 0.03, 0.005};
  // Holm: sorted 0.005*4, 0.01*3, 0.03*2, 0.04*1, made monotone: 0.02, 0.03, 0.06, 0.06.
  const auto h = adjust_p(p, Correction::holm);
  EXPECT_NEAR(h[0], 0.03, 1e-12);
  EXPECT_NEAR(h[1], 0.06, 1e-12);
  EXPECT_NEAR(h[2], 0.06, 1e-12);
  EXPECT_NEAR(h[3], 0.02, 1e-12);
  // BH: 4p/rank = 0.02, 0.02, 0.04, 0.04 from the smallest, made monotone from the largest.
  const auto b = adjust_p(p, Correction::bh);
  EXPECT_NEAR(b[0], 0.02, 1e-12);
  EXPECT_NEAR(b[1], 0.04, 1e-12);
  EXPECT_NEAR(b[2], 0.04, 1e-12);
  EXPECT_NEAR(b[3], 0.02, 1e-12);
  EXPECT_EQ(adjust_p(p, Correction::none), p);
  EXPECT_EQ(adjust_p({0.9, 0.8}, Correction::holm), (std::vector<double>{1.0, 1.0}));
  Correction c;
  EXPECT_TRUE(parse_correction("benjamini-hochberg", c));
  EXPECT_EQ(c, Correction::bh);
  EXPECT_FALSE(parse_correction("bonferroni", c));
}

TEST(Median, OddEvenEmpty) {
  EXPECT_EQ(median({3, 1, 2}), 2);
  EXPECT_EQ(median({4, 1, 3, 2}), 2.5);
  EXPECT_TRUE(std::isnan(median({})));
}

// --impl, --case and the configs' implementations take fnmatch's globs: glob_match agrees with
// fnmatch(pattern, name, 0) on every pattern and name here.
TEST(Glob, SameAsFnmatch) {
  const std::vector<std::string> names{"cpu.flash_fwd",
                                       "cpu.flash_bwd",
                                       "cpu.naive_3pass",
                                       "cpu.online_2pass",
                                       "cuda.flash_fwd_mma",
                                       "cuda.standard_cublas",
                                       "b1_hq8_hkv8_sq1024_skv1024_d64_causal_bf16",
                                       "a*b",
                                       "x]y",
                                       "-",
                                       ""};
  const std::vector<std::string> patterns{"*",
                                          "cpu.*",
                                          "cpu.[fn]*",
                                          "cpu.[!fn]*",
                                          "cpu.[^fn]*",
                                          "cuda.flash_*_mma",
                                          "*_[0-9]pass",
                                          "*[[:digit:]]pass",
                                          "c?u.*",
                                          "*causal*",
                                          "*_sq1024_*",
                                          "[]x]*",
                                          "x[]]y",
                                          "a\\*b",
                                          "a*b",
                                          "[a-c]*",
                                          "[z-a]*",
                                          "cpu.[fn",
                                          "*[",
                                          "[!]]*",
                                          "\\-",
                                          "*d64*bf16",
                                          "**",
                                          "cpu.flash_fwd",
                                          "[[:alpha:]][[:alpha:]]u.*",
                                          "*[-]*",
                                          "[a-]*"};
  for (const auto& p : patterns) {
    for (const auto& n : names) {
      EXPECT_EQ(glob_match(p, n), fnmatch(p.c_str(), n.c_str(), 0) == 0)
          << "pattern '" << p << "', name '" << n << "'";
    }
  }
}

std::map<std::string, std::string> paths;

nlohmann::ordered_json built(const std::vector<ProblemFlagValue>& v) {
  paths.clear();
  const auto r = problem_from_flags(v, paths);
  if (const auto* e = std::get_if<std::string>(&r)) {
    ADD_FAILURE() << *e;
    return {};
  }
  return std::get<nlohmann::ordered_json>(r);
}

std::string error_of(const std::vector<ProblemFlagValue>& v) {
  const auto r = problem_from_flags(v, paths);
  const auto* e = std::get_if<std::string>(&r);
  return e ? *e : "accepted";
}

// The noise between two runs (compare's between-runs rule): quantiles and the sign test against
// SciPy 1.10 (scipy.stats.norm.isf, t.isf with 3 degrees of freedom, binom.sf), and the robust
// shift and spread of a set of log-ratios.
TEST(BetweenRuns, QuantilesAndSignTestMatchScipy) {
  EXPECT_NEAR(normal_upper_quantile(0.025), 1.9599639845400545, 1e-9);
  EXPECT_NEAR(t3_upper_quantile(0.05 / 42), 9.6241935286096, 1e-8);
  EXPECT_NEAR(t3_upper_quantile(0.25), kT3Mad, 1e-9);  // the median of |T|
  EXPECT_NEAR(sign_test_greater(34, 42), 3.438555745560735e-05, 1e-15);
  EXPECT_NEAR(sign_test_greater(9, 10), 0.0009765625 + 0.009765625, 1e-15);  // 10 and 9 of 10
  EXPECT_EQ(sign_test_greater(0, 10), 1.0);
}

TEST(BetweenRuns, ShiftAndSpreadAreRobust) {
  // Nine rows around x1.02 (log 0.0198), one wild row: the median and the MAD barely move.
  std::vector<double> x = {0.01, 0.015, 0.02, 0.025, 0.03, 0.0198, 0.012, 0.028, 0.022, 2.0};
  const BetweenRuns b = between_runs(x);
  EXPECT_EQ(b.rows, 10u);
  EXPECT_NEAR(b.shift, 0.021, 1e-12);
  EXPECT_NEAR(b.sigma, 1.482602218505602 * 0.0065, 1e-12);  // MAD 0.0065
  EXPECT_EQ(b.above, 10);
  EXPECT_EQ(between_runs({}).rows, 0u);
}

TEST(CliSweep, ListsAreProductAxesInAFixedOrder) {
  using K = ProblemFlagValue;
  const auto j = built({{"--seq", "seq", K::integer, "512,1k,2k"},
                        {"--head-dim", "head_dim", K::integer, "64,128"},
                        {"--causal", "causal", K::boolean, "both"},
                        {"--dtype", "dtype", K::text, "bf16,f16"},
                        {"--heads-q", "heads_q", K::integer, "16"}});
  EXPECT_EQ(j["problem"].dump(), R"({"heads_q":16})");
  EXPECT_EQ(
      j["sweep"]["product"].dump(),
      R"({"dtype":["bf16","f16"],"causal":[false,true],"head_dim":[64,128],"seq":[512,1024,2048]})");
  EXPECT_EQ(paths.at("/sweep/product/seq/2"), "--seq");
  EXPECT_EQ(paths.at("/problem/heads_q"), "--heads-q");
}

TEST(CliSweep, SingleValuesAndBareCausal) {
  using K = ProblemFlagValue;
  const auto j = built({{"--seq", "seq", K::integer, "16K"},
                        {"--causal", "causal", K::boolean, ""},
                        {"--scale", "scale", K::real, "0.125"}});
  EXPECT_EQ(j["problem"].dump(), R"({"seq":16384,"causal":true,"scale":0.125})");
  EXPECT_FALSE(j.contains("sweep"));
  EXPECT_EQ(built({{"--causal", "causal", K::boolean, "false"}})["problem"].dump(),
            R"({"causal":false})");
}

TEST(CliSweep, BadValuesNameTheFlag) {
  using K = ProblemFlagValue;
  EXPECT_EQ(error_of({{"--seq", "seq", K::integer, "512,5x"}}),
            "--seq = 512,5x: not an integer (or a list of them, e.g. 512,1k,2k)");
  EXPECT_EQ(error_of({{"--seq", "seq", K::integer, "512,"}}),
            "--seq = 512,: not an integer (or a list of them, e.g. 512,1k,2k)");
  EXPECT_EQ(error_of({{"--causal", "causal", K::boolean, "configs/x.json"}}),
            "--causal = configs/x.json: must be true, false or both (a config file goes before the "
            "flags)");
  EXPECT_EQ(error_of({{"--scale", "scale", K::real, "0.1,abc"}}),
            "--scale = 0.1,abc: not a number (or a list of them)");
  EXPECT_EQ(error_of({{"--dtype", "dtype", K::text, "bf16,"}}), "--dtype = bf16,: an empty value");
}

}  // namespace
}  // namespace attnbench
