// The statistics of `attnbench compare` (compare.hpp): a rank test per row and a correction for
// testing many rows at once.
//
// Mann–Whitney U (as google/benchmark's tools/compare.py uses, there two-sided): do the new
// samples tend to be larger (slower) than the base samples? U counts the pairs (base a, new b)
// with b > a, ties counting one half. Under "no change" every ordering of the pooled samples is
// equally likely; the p-value is exact (the distribution of U by counting) when there are no ties
// and both sides have at most kExactMax samples, otherwise the normal approximation with the tie
// and continuity corrections. A rank test needs no assumption about the shape of the times
// (skewed, with outliers from a busy machine) and is not moved by one wild sample.
//
// Wilcoxon signed-rank (paired): `compare --rerun` measures BASE and NEW in alternating
// invocations, round by round, and takes each invocation's median as one sample. The repetitions
// inside one invocation share the machine's state of that second and are not independent of it;
// the invocations are, nearly, and the two of a round see the same machine within seconds. The
// test asks whether the round's differences d (log NEW - log BASE) lean above 0: W+ sums the
// ranks of |d| over the positive d (ties share the mean rank, zeros are left out, as Wilcoxon's
// own rule). Under "no change" each d is as likely negative as positive; the p-value is exact (by
// counting the 2^n sign patterns, tied ranks included) up to kExactMax pairs, otherwise the normal
// approximation with the tie correction. n pairs cannot give a p-value below 2^-n.
//
// Many rows: with 300 rows and a 5% test each, 15 rows would be "slower" by chance. Holm's
// step-down procedure keeps the probability of even one false "slower" among all the rows at
// alpha (family-wise), whatever the dependence between rows; Benjamini–Hochberg keeps the
// expected fraction of false ones among those flagged at alpha (more power when many rows
// really change; family-wise only when none does).
#pragma once

#include <string>
#include <vector>

namespace attnbench {

inline constexpr std::size_t kExactMax = 50;

// P(U >= U observed) for "b is stochastically larger than a" (one-sided). 1 when either side is
// empty.
double mann_whitney_greater(const std::vector<double>& a, const std::vector<double>& b);

// The smallest one-sided p-value samples of these sizes can give (all of b above all of a):
// 1 / C(n + m, n). A side with fewer samples cannot show a change at a level below it.
double mann_whitney_min_p(std::size_t n, std::size_t m);

// P(W+ >= W+ observed) for "d leans above 0" (one-sided). 1 when no d is nonzero.
double signed_rank_greater(const std::vector<double>& d);

// The smallest one-sided p-value n pairs can give (every d above 0): 2^-n.
double signed_rank_min_p(std::size_t n);

enum class Correction { holm, bh, none };
const char* to_string(Correction c);
// "holm", "bh" (also "benjamini-hochberg"), "none"; false for anything else.
bool parse_correction(const std::string& s, Correction& out);
// "Holm–Bonferroni (family-wise error rate)" and so on, for the report.
std::string describe(Correction c);

// Adjusted p-values, in the order given: a row is significant at level alpha when its adjusted
// p-value is <= alpha. Holm: max over the smaller ones of (N - rank + 1) p, capped at 1. BH: min
// over the larger ones of N p / rank. none: the p-values themselves.
std::vector<double> adjust_p(const std::vector<double>& p, Correction c);

double median(std::vector<double> v);

// The noise between two runs, from many rows at once: each row's x = log(NEW median / BASE
// median). Their median is the shift of the whole file (the machine, or a change that slows
// every row); their spread, 1.4826 times the median absolute deviation from that median, is a
// robust estimate of the standard deviation a single row's x has between runs, which no run's
// own repetitions show (they share the run's machine state). Robust: up to half the rows may
// really have changed without moving either figure much.
struct BetweenRuns {
  std::size_t rows = 0;  // rows with a ratio
  double shift = 0;      // median x
  double sigma = 0;      // 1.4826 * median |x - shift|
  int above = 0;         // rows with x > 0
};
BetweenRuns between_runs(const std::vector<double>& log_ratios);

// z with P(Z >= z) = p for a standard normal Z (0 < p < 1).
double normal_upper_quantile(double p);

// t with P(T >= t) = p for Student's t with 3 degrees of freedom (0 < p < 1): a heavy-tailed
// model of timing noise. kT3Mad: the median of |T| (its scale as a MAD), 0.7649.
double t3_upper_quantile(double p);
inline constexpr double kT3Mad = 0.764892328404345;

// P(X >= k) for X ~ Binomial(n, 1/2): the one-sided sign test of k of n rows slower.
double sign_test_greater(int k, int n);

}  // namespace attnbench
