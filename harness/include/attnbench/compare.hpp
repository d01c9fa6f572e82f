// `attnbench compare BASE.json NEW.json`: a regression gate for CI that holds across many rows on
// a noisy machine.
//
// Rows are matched on (case, impl, pass, options, device). For each match it prints the base and
// new median times, new/base, the noise of each (cv), the p-value of the change, the worst error
// growth over the outputs and the status change. A matched row REGRESSED when any of these holds:
//
//  1. Slower. With every repetition's time in both files (time.samples_ms), the row is slower
//     when
//         new.median > base.median * (1 + threshold)                        and
//         the one-sided Mann–Whitney U test (stats.hpp) of "NEW's repetitions are slower than
//         BASE's" is significant at level alpha after the correction for the number of rows
//         tested (Holm by default: the chance that any row of the comparison is flagged by
//         noise alone stays below alpha).
//     The report says which test, correction and level were used. Rows without samples (files
//     written before samples_ms), or with too few for the test to ever reach the level after
//     the correction (1 / C(n+m, n) > alpha / N over the N rows tested; alpha without a
//     correction: e.g. 3 against 3 among 6 rows), are judged by the earlier rule, printed as such:
//         new.median > base.median * (1 + threshold)                        and
//         new.median - base.median > spread(base) + spread(new),
//     spread(r) = max(cv * median_ms, median_ms - min_ms).
//     Rows without timing in either file are not time-checked.
//  2. The status got worse: base "pass" and new "fail" or "skip".
//  3. An error grew: for an output present in both, new.max_abs > error_factor * max(base.max_abs,
//     base.atol / 4). The floor keeps a baseline with (near-)zero error, e.g. identical
//     arithmetic, from turning any rounding difference into a regression: a quarter of the
//     tolerance is below the dtype's own rounding of the reference.
//
// Faster is the mirror image (base.median > new.median * (1 + threshold), significant the other
// way) and is reported, never a failure.
//
// The noise between the runs. A row's repetitions share its run's machine state (its clocks, its
// neighbours, where its memory landed), so the test above measures the noise within one run, and
// two runs of the same code differ by more: on a 2-core machine rows of identical builds came out
// x0.84 to x1.17 apart, at p = 2e-4 each. With at least 8 timed rows, compare estimates that noise
// from the rows themselves: x = log(new/base) per row, their median (the shift of the whole file)
// and 1.4826 times their median absolute deviation (sigma, at least 0.5%; robust while fewer than
// half the rows really changed). Then
//   - a row slower by rule 1 is REGRESSED only when its x is also beyond the noise: more than
//     z * MAD / 0.7649 above the shift, z the quantile of Student's t with 3 degrees of freedom at
//     alpha / rows (Bonferroni; timing noise has heavy tails: a normal model flagged identical
//     builds in 3 of 10 pairs on the 2-core machine, t3 in none). Within that it is SUSPECT:
//     listed, with the --rerun command that decides it, and no failure. A faster row likewise.
//   - the whole file is SHIFTED (exit 3) when the shift is above log(1 + threshold) and the rows
//     agree (the one-sided sign test of the rows slower, at alpha): the machine or the code, which
//     only a rerun of both sides can tell apart (the report prints the command). A file faster as a
//     whole is said, and is no failure.
// With fewer rows the noise is not estimated, and rule 1 alone decides (the report says so).
//
// --rerun BINARY: the rows found slower (rule 1) are measured again by BINARY, a build of NEW's
// code (rerun.hpp), and decided on those measurements instead: a slowdown that was another
// process's burst is not confirmed. The rerun goes in rounds; a round is one invocation of each
// side timing every rerun row with rerun_repetitions repetitions, BASE NEW in even rounds and NEW
// BASE in odd ones, so that both sides see the same machine within seconds and an order effect
// cancels. Each invocation's median is one sample (the repetitions inside one invocation share
// the machine's state of that second, and a test that counted them as independent flagged rows of
// identical builds), the two of a round are a pair, and the row is decided by the one-sided
// Wilcoxon signed-rank test on log(NEW / BASE) over the rounds, with the correction over the
// rerun rows (one family), and by its ratio, the median of the rounds' ratios, against the
// threshold. rerun_rounds 0 (the default) takes enough rounds for the test to reach the level
// (rerun_rounds_for); fewer leave the rows to the spread rule, with a warning.
// Two stages (the default; rerun_more_rounds 0 turns the second off): those rounds decide every
// row at alpha / 2; a row they leave beyond the threshold but not significant (slower within the
// noise, or faster so) is measured rerun_more_rounds rounds more (-1: three times the first
// stage's) and decided again on all its rounds, at alpha / 2 with the correction over the rows of
// the second stage. The two looks at alpha / 2 keep the chance that a row of identical builds is
// called slower at alpha (Bonferroni), and the second stage's rounds go only where the first ran
// short: on the 2-core machine, 10 rounds caught a 1.15x slowdown of one implementation in 3 of
// 10 pairs, 30 rounds in about 9 of 10 (docs/gate_figures.md). The BASE side
// needs --rerun-base BASE_BINARY; without it NEW's invocations are paired with BASE's recorded
// median, which a machine busier now than then still turns into a "slower". Status and error
// regressions are not measured again.
// rerun_rows chooses the rows measured again: "slower" (those found slower, the default),
// "suspect" (new/base above the threshold, significant or not) or "all" (every timed row). On a
// machine whose load drifts between the two runs a real slowdown can look like no change, or
// faster, in the files: only "all" with --rerun-base (every row measured again, both sides
// alternating) sees it then.
//
// A row of BASE missing from NEW is its own verdict, MISSING (exit 4), unless allow_missing; the
// report names --allow-missing. A row only in NEW is reported as information. A "WARNING:" line
// says when the two contexts differ in what affects timing: host, device name, SM or memory clock,
// CPU model, build type, compiler, CUDA driver or runtime, Google Benchmark's library build, OpenMP
// threads, a test slowdown, the load average (by at least half the cores, at the start or the end
// of either run); when either run was made from a dirty tree or is incomplete; or when matched rows
// were timed hot in one run and with flushed caches in the other.
//
// Output: the report as text (a markdown table; --only-changed leaves out the rows whose verdict
// is "ok") or, with format "json", one JSON object (schema "attnbench.compare/1") with the method,
// the warnings, every row and the summary.
//
// Exit code (the first that applies): 1 a regression (a row slower beyond both noises, a status or
// an error regression); 3 the whole file slower (SHIFTED); 4 rows of BASE missing from NEW (not
// allow_missing); 0 none of these (SUSPECT rows may be listed); 2 bad input (unreadable, not JSON,
// wrong schema, a bad option, a rerun that cannot run). With --rerun, the rows measured again are
// decided by the rerun's paired rounds, which measure the noise between runs directly; with
// --rerun-rows all and --rerun-base every row is, and the file's shift no longer decides.
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

#include "attnbench/results.hpp"
#include "attnbench/stats.hpp"

namespace attnbench {

struct CompareOptions {
  std::string base, next;      // paths of the two results files
  double threshold = 0.05;     // relative slowdown tolerated (on top of the test)
  bool allow_missing = false;  // rows of base absent in next are not a failure
  double error_factor = 2.0;   // max_abs growth tolerated
  double alpha = 0.05;         // the level of the test, over all the rows (after the correction)
  Correction correction = Correction::holm;
  bool only_changed = false;          // text: leave out the rows whose verdict is "ok"
  std::string format = "text";        // text | json
  std::string rerun;                  // NEW's binary: re-measure the rows found slower
  std::string rerun_base;             // BASE's binary: re-measure them on BASE's side too
  std::string rerun_rows = "slower";  // which rows the rerun measures: slower | suspect | all
  int rerun_rounds = 0;               // rounds of the rerun (one invocation a side); 0: enough
  int rerun_repetitions = 5;          // repetitions in each of those invocations
  int rerun_more_rounds = -1;  // the second stage's rounds: -1 3x the first's, 0 no second stage
};

// Whether the rerun has its second stage (rerun_more_rounds != 0): then each stage tests at
// alpha / 2.
bool rerun_two_stages(const CompareOptions& opts);

// The rounds a rerun of `rows` rows takes (its first stage): opts.rerun_rounds when set,
// otherwise the fewest R with 2^-R (the signed-rank test's smallest p-value) at or below the
// correction's first level (alpha / rows; alpha without a correction; alpha / 2 in place of alpha
// with two stages), plus 2, and at least 6.
int rerun_rounds_for(std::size_t rows, const CompareOptions& opts);

// What compare found, for callers that want more than the printed report.
struct CompareSummary {
  int matched = 0, regressed = 0, improved = 0, missing = 0, added = 0;
  int suspect = 0;             // slower by the row's repetitions, within the noise between runs
  int shifted = 0;             // the whole NEW file: +1 slower, -1 faster (beyond the threshold)
  bool missing_fails = false;  // rows of BASE missing from NEW, and not allow_missing
  int tested = 0;                     // rows decided by the test (the family of the correction)
  int spread_rule = 0;                // timed rows decided by the spread rule (too few samples)
  int rerun = 0, confirmed = 0;       // rows measured again, and those still slower
  int rerun_rounds = 0;               // the rounds the rerun took (its first stage)
  int rerun_more = 0, rerun_more_rounds = 0;  // rows measured in the second stage, its rounds
  std::vector<std::string> warnings;  // context differences, without the "WARNING: " prefix
  // 1 a regression; else 3 the whole file slower; else 4 rows missing; else 0 (compare.hpp).
  int exit_code() const {
    return regressed > 0 ? 1 : shifted > 0 ? 3 : missing_fails ? 4 : 0;
  }
};

// Compares two parsed files; prints the report on out (log: the reruns' progress lines).
// Throws std::runtime_error when a rerun cannot run.
CompareSummary compare_results(const ResultsFile& base, const ResultsFile& next,
                               const CompareOptions& opts, std::ostream& out, std::ostream& log);

// Loads both files, compares, prints. Returns the exit code (0, 1 or 2; messages on err).
int run_compare(const CompareOptions& opts, std::ostream& out, std::ostream& err);

}  // namespace attnbench
