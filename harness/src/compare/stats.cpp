// Mann–Whitney U, Wilcoxon signed-rank, their smallest p-values, and the Holm / Benjamini–Hochberg
// adjustments (stats.hpp).
#include "attnbench/stats.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <utility>

namespace attnbench {

namespace {

// U for "b above a" (pairs with b > a, ties one half) and whether any value is tied, through the
// ranks of the pooled samples.
std::pair<double, bool> u_statistic(const std::vector<double>& a, const std::vector<double>& b,
                                    double* tie_term) {
  std::vector<std::pair<double, int>> all;  // value, side (0 a, 1 b)
  for (double x : a) all.emplace_back(x, 0);
  for (double x : b) all.emplace_back(x, 1);
  std::sort(all.begin(), all.end());
  double rank_sum_b = 0, ties = 0;
  bool tied = false;
  for (std::size_t i = 0; i < all.size();) {
    std::size_t j = i;
    while (j < all.size() && all[j].first == all[i].first) ++j;
    const double t = static_cast<double>(j - i);
    const double mid = (static_cast<double>(i + 1) + static_cast<double>(j)) / 2;  // 1-based ranks
    for (std::size_t k = i; k < j; ++k)
      if (all[k].second == 1) rank_sum_b += mid;
    if (t > 1) {
      tied = true;
      ties += t * t * t - t;
    }
    i = j;
  }
  if (tie_term) *tie_term = ties;
  const double m = static_cast<double>(b.size());
  return {rank_sum_b - m * (m + 1) / 2, tied};
}

// The number of orderings of n a's and m b's with each value of U (index u), by the last
// element: a b there is above every a (adds n), an a adds nothing.
std::vector<double> u_counts(std::size_t n, std::size_t m) {
  // prev[j] = counts for (i - 1, j); cur[j] for (i, j).
  std::vector<std::vector<double>> prev(m + 1), cur(m + 1);
  for (std::size_t j = 0; j <= m; ++j) prev[j] = {1.0};  // i = 0: U = 0 only
  for (std::size_t i = 1; i <= n; ++i) {
    cur[0] = {1.0};
    for (std::size_t j = 1; j <= m; ++j) {
      std::vector<double> c(i * j + 1, 0.0);
      const auto& up = prev[j];       // last is an a: (i - 1, j), U unchanged
      const auto& left = cur[j - 1];  // last is a b: (i, j - 1), U + i
      for (std::size_t u = 0; u < up.size(); ++u) c[u] += up[u];
      for (std::size_t u = 0; u < left.size(); ++u) c[u + i] += left[u];
      cur[j] = std::move(c);
    }
    std::swap(prev, cur);
  }
  return prev[m];
}

// P(Z >= z) for a standard normal Z, capped at 1: the normal approximations' p-value.
double upper_tail(double z) {
  return std::min(1.0, 0.5 * std::erfc(z / std::sqrt(2.0)));
}

}  // namespace

double mann_whitney_greater(const std::vector<double>& a, const std::vector<double>& b) {
  const std::size_t n = a.size(), m = b.size();
  if (n == 0 || m == 0) return 1;
  double tie_term = 0;
  const auto [u, tied] = u_statistic(a, b, &tie_term);
  if (!tied && n <= kExactMax && m <= kExactMax) {
    const std::vector<double> c = u_counts(n, m);
    const double total = std::accumulate(c.begin(), c.end(), 0.0);
    double tail = 0;
    for (std::size_t k = static_cast<std::size_t>(std::llround(u)); k < c.size(); ++k) tail += c[k];
    return std::min(1.0, tail / total);
  }
  const double nn = static_cast<double>(n), mm = static_cast<double>(m), big = nn + mm;
  const double var = nn * mm / 12 * ((big + 1) - tie_term / (big * (big - 1)));
  if (!(var > 0)) return 1;
  const double z = (u - nn * mm / 2 - 0.5) / std::sqrt(var);
  return upper_tail(z);
}

double mann_whitney_min_p(std::size_t n, std::size_t m) {
  if (n == 0 || m == 0) return 1;
  // 1 / C(n + m, n), as a product to stay in range.
  double c = 1;
  for (std::size_t k = 1; k <= std::min(n, m); ++k)
    c = c * static_cast<double>(n + m - std::min(n, m) + k) / static_cast<double>(k);
  return 1 / c;
}

double signed_rank_greater(const std::vector<double>& d) {
  std::vector<double> a;  // |d| of the nonzero d, and their signs
  std::vector<bool> pos;
  for (double x : d) {
    if (x == 0 || std::isnan(x)) continue;
    a.push_back(std::fabs(x));
    pos.push_back(x > 0);
  }
  const std::size_t n = a.size();
  if (n == 0) return 1;
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](std::size_t i, std::size_t j) { return a[i] < a[j]; });
  // Doubled ranks (ties share the mean rank, so a doubled rank is a whole number).
  std::vector<long> r2(n);
  double ties = 0;
  for (std::size_t i = 0; i < n;) {
    std::size_t j = i;
    while (j < n && a[order[j]] == a[order[i]]) ++j;
    for (std::size_t k = i; k < j; ++k) r2[order[k]] = static_cast<long>(i + 1 + j);  // 2 * mean
    const double t = static_cast<double>(j - i);
    ties += t * t * t - t;
    i = j;
  }
  long w2 = 0, total2 = 0;  // doubled W+, doubled sum of all ranks
  for (std::size_t i = 0; i < n; ++i) {
    total2 += r2[i];
    if (pos[i]) w2 += r2[i];
  }
  if (n <= kExactMax) {
    // count[s]: sign patterns whose doubled W+ is s.
    std::vector<double> count(static_cast<std::size_t>(total2) + 1, 0.0);
    count[0] = 1;
    long reach = 0;
    for (std::size_t i = 0; i < n; ++i) {
      reach += r2[i];
      for (long s = reach; s >= r2[i]; --s)
        count[static_cast<std::size_t>(s)] += count[static_cast<std::size_t>(s - r2[i])];
    }
    double tail = 0;
    for (long s = w2; s <= total2; ++s) tail += count[static_cast<std::size_t>(s)];
    return std::min(1.0, std::ldexp(tail, -static_cast<int>(n)));
  }
  const double nn = static_cast<double>(n);
  const double mean = nn * (nn + 1) / 4;
  const double var = nn * (nn + 1) * (2 * nn + 1) / 24 - ties / 48;
  if (!(var > 0)) return 1;
  const double z = (static_cast<double>(w2) / 2 - mean - 0.5) / std::sqrt(var);
  return upper_tail(z);
}

double signed_rank_min_p(std::size_t n) {
  return std::ldexp(1.0, -static_cast<int>(n));
}

const char* to_string(Correction c) {
  switch (c) {
    case Correction::holm:
      return "holm";
    case Correction::bh:
      return "bh";
    case Correction::none:
      return "none";
  }
  return "?";
}

bool parse_correction(const std::string& s, Correction& out) {
  if (s == "holm")
    out = Correction::holm;
  else if (s == "bh" || s == "benjamini-hochberg")
    out = Correction::bh;
  else if (s == "none")
    out = Correction::none;
  else
    return false;
  return true;
}

std::string describe(Correction c) {
  switch (c) {
    case Correction::holm:
      return "Holm-Bonferroni (family-wise error rate)";
    case Correction::bh:
      return "Benjamini-Hochberg (false discovery rate)";
    case Correction::none:
      return "none (per-row level)";
  }
  return "?";
}

std::vector<double> adjust_p(const std::vector<double>& p, Correction c) {
  const std::size_t n = p.size();
  std::vector<double> out(p);
  if (c == Correction::none || n == 0) return out;
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t x, std::size_t y) { return p[x] < p[y]; });
  const double nn = static_cast<double>(n);
  if (c == Correction::holm) {
    double run = 0;
    for (std::size_t r = 0; r < n; ++r) {
      run = std::max(run, std::min(1.0, (nn - static_cast<double>(r)) * p[order[r]]));
      out[order[r]] = run;
    }
  } else {
    double run = 1;
    for (std::size_t r = n; r-- > 0;) {
      run = std::min(run, std::min(1.0, nn * p[order[r]] / static_cast<double>(r + 1)));
      out[order[r]] = run;
    }
  }
  return out;
}

double median(std::vector<double> v) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

BetweenRuns between_runs(const std::vector<double>& x) {
  BetweenRuns b;
  b.rows = x.size();
  if (x.empty()) return b;
  b.shift = median(x);
  std::vector<double> dev;
  for (double v : x) {
    dev.push_back(std::fabs(v - b.shift));
    b.above += v > 0;
  }
  b.sigma = 1.482602218505602 * median(dev);  // 1 / Phi^-1(3/4): sigma of a normal
  return b;
}

double normal_upper_quantile(double p) {
  // Bisection on the tail: monotonic, and 200 steps reach double precision from [-40, 40].
  double lo = -40, hi = 40;
  for (int i = 0; i < 200; ++i) {
    const double mid = 0.5 * (lo + hi);
    (upper_tail(mid) > p ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

double t3_upper_quantile(double p) {
  // P(T >= t) = 1/2 - (1/pi) (t / (sqrt(3) (1 + t^2/3)) + atan(t / sqrt(3))), decreasing in t.
  auto tail = [](double t) {
    const double r3 = std::sqrt(3.0);
    return 0.5 - (t / (r3 * (1 + t * t / 3)) + std::atan(t / r3)) / 3.14159265358979323846;
  };
  double lo = -1e6, hi = 1e6;
  for (int i = 0; i < 300; ++i) {
    const double mid = 0.5 * (lo + hi);
    (tail(mid) > p ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

double sign_test_greater(int k, int n) {
  if (n <= 0 || k <= 0) return 1;
  if (k > n) return 0;
  // Sum of C(n, i) / 2^n for i = k..n, in logs (n may be in the hundreds).
  double p = 0;
  for (int i = k; i <= n; ++i)
    p += std::exp(std::lgamma(n + 1.0) - std::lgamma(i + 1.0) - std::lgamma(n - i + 1.0) - n * std::log(2.0));
  return std::min(1.0, p);
}

}  // namespace attnbench
