// Paged KV caches (issue 29): the Problem's fields, block tables, validation, label and bytes; the
// float64 reference through a block table against the same data laid out contiguously;
// cpu.naive_3pass and cpu.flash_fwd against the reference; forward-only SKIPs; the device
// metadata; the results JSON, the C API's problem reader and the config keys.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <variant>
#include <vector>

#include "attnbench/ceilings.hpp"
#include "attnbench/config.hpp"
#include "attnbench/context.hpp"
#include "attnbench/reference.hpp"
#include "attnbench/render.hpp"
#include "attnbench/results.hpp"
#include "attnbench/tensors.hpp"
#include "attnbench/verify_outputs.hpp"
#include "check_impl.hpp"
#include "test_util.hpp"

namespace attnbench {
namespace {

using test::make_problem;
constexpr std::uint64_t kSeed = 20261229;
constexpr double kInf = std::numeric_limits<double>::infinity();

Problem paged(Problem p, int page_size, PageOrder order, int num_pages = 0) {
  p.page_size = page_size;
  p.page_order = order;
  p.num_pages = num_pages;
  p.make_block_table();
  return p;
}
Problem ragged(Problem p, std::vector<int> q, std::vector<int> kv) {
  p.set_seqlens(std::move(q), std::move(kv));
  return p;
}
Problem with_table(Problem p, int page_size, const std::vector<std::vector<int>>& rows) {
  p.page_size = page_size;
  p.set_block_table(rows);
  p.make_block_table();
  return p;
}

// The problems every test below runs: context 1, contexts that are not multiples of the page
// size, a shuffled pool with unused pages, an explicit table with pages repeated within a sequence
// and shared between two, a ragged batch with a context of 0, speculative decoding (seq_q 4,
// causal) against a cache, seq_q > context, GQA 16:1, a window and a soft cap.
std::vector<Problem> problems(DType t = DType::f32) {
  Problem windowed = paged(ragged(make_problem(1, 8, 2, 1, 1, 64, true, t), {16, 5, 16}, {16, 200, 3}),
                           64, PageOrder::shuffled, 20);
  windowed.window_left = 40;
  windowed.softcap = 30;
  windowed.make_block_table();
  return {
      paged(make_problem(1, 2, 2, 1, 1, 32, true, t), 16, PageOrder::sequential),
      paged(make_problem(3, 4, 2, 4, 37, 32, true, t), 8, PageOrder::shuffled, 20),
      with_table(make_problem(2, 2, 2, 3, 40, 40, true, t), 16, {{5, 2, 5}, {2, 0, 3}}),
      paged(ragged(make_problem(1, 4, 4, 1, 1, 32, true, t), {1, 1, 1, 1}, {1, 0, 300, 33}), 16,
            PageOrder::shuffled),
      paged(make_problem(2, 16, 1, 4, 77, 64, true, t), 8, PageOrder::shuffled),
      windowed,
  };
}

std::vector<double> randn(std::int64_t n, std::mt19937_64& rng) {
  std::normal_distribution<double> d;
  std::vector<double> v(static_cast<std::size_t>(n));
  for (double& x : v) x = d(rng);
  return v;
}

// The same problem with K and V laid out contiguously (dense BSHD or packed THD), and the pool's
// keys gathered into that layout by the block table's rows (indexed here independently of
// Problem::kv_row).
struct Contiguous {
  Problem p;
  std::vector<double> k, v;
};
Contiguous contiguous(const Problem& p, const std::vector<double>& k, const std::vector<double>& v) {
  Contiguous c;
  c.p = p;
  c.p.page_size = 0;
  c.p.page_order = PageOrder::sequential;
  c.p.num_pages = 0;
  c.p.pages_per_seq = 0;
  c.p.block_table.reset();
  const auto rows = p.block_table_rows();
  const std::int64_t w = std::int64_t{p.heads_kv} * p.head_dim;
  for (int b = 0; b < p.batch; ++b) {
    for (int j = 0; j < p.seq_kv_of(b); ++j) {
      const std::int64_t row =
          std::int64_t{rows[static_cast<std::size_t>(b)][static_cast<std::size_t>(j / p.page_size)]} *
              p.page_size +
          j % p.page_size;
      c.k.insert(c.k.end(), k.begin() + row * w, k.begin() + (row + 1) * w);
      c.v.insert(c.v.end(), v.begin() + row * w, v.begin() + (row + 1) * w);
    }
  }
  EXPECT_EQ(static_cast<std::int64_t>(c.k.size()), c.p.kv_elems());
  return c;
}

// The reference through the block table equals, bit for bit, the reference on the same keys laid
// out contiguously; forward_rows equals the full call's rows; a sequence without keys has O = 0
// and LSE = -inf.
TEST(PagedReference, EqualsTheContiguousLayout) {
  for (const Problem& p : problems()) {
    SCOPED_TRACE(p.label());
    ASSERT_EQ(validate(p), "");
    std::mt19937_64 rng(kSeed);
    const auto q = randn(p.q_elems(), rng), k = randn(p.kv_elems(), rng), v = randn(p.kv_elems(), rng);
    const double nan = std::numeric_limits<double>::quiet_NaN();
    std::vector<double> o(q.size(), nan), lse(static_cast<std::size_t>(p.lse_elems()), nan);
    reference::forward(p, q.data(), k.data(), v.data(), o.data(), lse.data());
    const Contiguous c = contiguous(p, k, v);
    ASSERT_EQ(validate(c.p), "");
    std::vector<double> co(q.size(), nan), clse(lse.size(), nan);
    reference::forward(c.p, q.data(), c.k.data(), c.v.data(), co.data(), clse.data());
    EXPECT_EQ(o, co);
    EXPECT_EQ(lse, clse);
    for (double e : o) ASSERT_TRUE(std::isfinite(e));
    for (int b = 0; b < p.batch; ++b) {
      for (int h = 0; h < p.heads_q; h += 3) {
        std::vector<int> rows;
        for (int i = 0; i < p.seq_q_of(b); ++i) rows.push_back(i);
        std::vector<double> orow(rows.size() * static_cast<std::size_t>(p.head_dim)), lrow(rows.size());
        reference::forward_rows(p, q.data(), k.data(), v.data(), b, h, rows, orow.data(), lrow.data());
        for (std::size_t r = 0; r < rows.size(); ++r) {
          const std::int64_t at = ((p.q_start(b) + rows[r]) * p.heads_q + h) * p.head_dim;
          for (int x = 0; x < p.head_dim; ++x)
            EXPECT_EQ(orow[r * static_cast<std::size_t>(p.head_dim) + static_cast<std::size_t>(x)],
                      o[static_cast<std::size_t>(at + x)]);
          EXPECT_EQ(lrow[r], lse[static_cast<std::size_t>(p.lse_start(b, h) + rows[r])]);
        }
      }
      if (p.seq_kv_of(b) == 0) {  // no key: O = 0, LSE = -inf
        for (int h = 0; h < p.heads_q; ++h) {
          for (int i = 0; i < p.seq_q_of(b); ++i) {
            EXPECT_EQ(lse[static_cast<std::size_t>(p.lse_start(b, h) + i)], -kInf);
            const std::int64_t at = ((p.q_start(b) + i) * p.heads_q + h) * p.head_dim;
            for (int x = 0; x < p.head_dim; ++x) EXPECT_EQ(o[static_cast<std::size_t>(at + x)], 0.0);
          }
        }
      }
    }
  }
  // The ragged batch above has a sequence of context 0; the last batch rows that see no key.
  EXPECT_EQ(problems()[3].seq_kv_of(1), 0);
}

// Repeated pages are read as the same keys: two sequences over one shared page agree where their
// queries and keys do.
TEST(PagedReference, SharedPagesAreTheSameKeys) {
  const Problem p = with_table(make_problem(2, 2, 1, 1, 16, 32, false), 16, {{3}, {3}});
  EXPECT_EQ(validate(p), "");
  EXPECT_EQ(p.num_pages, 4);
  std::mt19937_64 rng(kSeed);
  auto q = randn(p.q_elems(), rng);
  std::copy(q.begin(), q.begin() + 64, q.begin() + 64);  // sequence 1's query = sequence 0's
  const auto k = randn(p.kv_elems(), rng), v = randn(p.kv_elems(), rng);
  std::vector<double> o(q.size()), lse(static_cast<std::size_t>(p.lse_elems()));
  reference::forward(p, q.data(), k.data(), v.data(), o.data(), lse.data());
  for (int x = 0; x < 64; ++x) EXPECT_EQ(o[static_cast<std::size_t>(x)], o[static_cast<std::size_t>(64 + x)]);
  EXPECT_EQ(lse[0], lse[2]);
  EXPECT_EQ(lse[1], lse[3]);
}

TEST(PagedReference, BackwardIsRefused) {
  const Problem p = problems()[1];
  std::vector<double> x(static_cast<std::size_t>(std::max(p.q_elems(), p.kv_elems())));
  EXPECT_THROW(reference::backward(p, x.data(), x.data(), x.data(), x.data(), x.data(), x.data(),
                                   x.data()),
               std::invalid_argument);
}

// cpu.naive_3pass (the baseline) and cpu.flash_fwd (default tiles, and tiles of 16 x 24 keys,
// which cross pages of 8 and 16) pass the rule on every problem above in every dtype.
TEST(PagedCpu, NaiveAndFlashPassVerification) {
  const Implementation* naive = Registry::instance().find("cpu.naive_3pass");
  const Implementation* flash = Registry::instance().find("cpu.flash_fwd");
  ASSERT_NE(naive, nullptr);
  ASSERT_NE(flash, nullptr);
  EXPECT_TRUE(naive->capabilities().paged);
  EXPECT_TRUE(flash->capabilities().paged);
  for (DType t : {DType::f32, DType::f16, DType::bf16}) {
    for (const Problem& p : problems(t)) {
      SCOPED_TRACE(p.label());
      const Verdict vn = test::check_impl(*naive, p, Pass::fwd, kSeed);
      EXPECT_TRUE(vn.ok) << vn.failure();
      for (const Options& o : {Options{}, Options{{"block_r", 16}, {"block_c", 24}}}) {
        const Verdict vf = test::check_impl(*flash, p, Pass::fwd, kSeed, VerifyMode::full, o);
        EXPECT_TRUE(vf.ok) << vf.failure();
      }
    }
  }
}

// Undeclared: SKIP with the reason. Declared: the backward passes SKIP (forward-only).
TEST(PagedCapability, SkipsWithReasons) {
  const Problem p = problems()[1];
  const Implementation* online = Registry::instance().find("cpu.online_2pass");
  ASSERT_NE(online, nullptr);
  EXPECT_FALSE(online->capabilities().paged);
  EXPECT_EQ(online->supports(p, Pass::fwd).reason, "paged KV caches not supported");
  const Implementation* naive = Registry::instance().find("cpu.naive_3pass");
  EXPECT_TRUE(naive->supports(p, Pass::fwd).ok);
  for (Pass pass : {Pass::bwd, Pass::fwd_bwd}) {
    const Support s = naive->supports(p, pass);
    EXPECT_FALSE(s.ok);
    EXPECT_EQ(s.reason, "paged KV caches are forward-only (inference): no backward");
  }
}

TEST(PagedProblem, TablesSizesLabelAndBytes) {
  // Sequential: pages in sequence order, rows padded with 0 to the longest.
  const Problem s = paged(ragged(make_problem(1, 4, 2, 1, 1, 64, true, DType::bf16), {1, 2, 1},
                                 {17, 0, 40}),
                          16, PageOrder::sequential);
  EXPECT_EQ(s.pages_of(0), 2);
  EXPECT_EQ(s.pages_of(1), 0);
  EXPECT_EQ(s.pages_of(2), 3);
  EXPECT_EQ(s.pages_needed(), 5);
  EXPECT_EQ(s.num_pages, 5);
  EXPECT_EQ(s.pages_per_seq, 3);
  EXPECT_EQ(s.block_table_rows(), (std::vector<std::vector<int>>{{0, 1, 0}, {0, 0, 0}, {2, 3, 4}}));
  EXPECT_EQ(s.kv_row(2, 33), 4 * 16 + 1);
  EXPECT_EQ(s.kv_elems(), 5 * 16 * 2 * 64);
  EXPECT_EQ(validate(s), "");
  EXPECT_EQ(s.label().substr(s.label().size() - 7), "_page16");
  // Bytes: the contexts' K and V once (57 keys), Q and O (4 queries), bf16.
  EXPECT_EQ(s.hbm_bytes_fwd(), 2 * 57 * 2 * 64 * 2 + 2 * 4 * 4 * 64 * 2);
  EXPECT_TRUE(s.memory_bound());
  EXPECT_TRUE(make_problem(8, 4, 2, 16, 4096, 64, true).memory_bound());
  EXPECT_FALSE(make_problem(8, 4, 2, 17, 4096, 64, true).memory_bound());

  // Shuffled: the same pages, fixed-seed order, a permutation drawn from a larger pool.
  const Problem sh = paged(make_problem(3, 4, 2, 1, 100, 64, false), 16, PageOrder::shuffled, 40);
  std::set<int> used;
  for (const auto& row : sh.block_table_rows())
    for (int x : row) used.insert(x);
  EXPECT_EQ(used.size(), 21u);  // 3 x 7 pages, all distinct
  EXPECT_EQ(*used.rbegin() < 40, true);
  EXPECT_EQ(sh.block_table_rows(),
            paged(make_problem(3, 4, 2, 1, 100, 64, false), 16, PageOrder::shuffled, 40).block_table_rows());
  EXPECT_NE(sh.block_table_rows(),
            paged(make_problem(3, 4, 2, 1, 100, 64, false), 16, PageOrder::sequential, 40).block_table_rows());
  EXPECT_EQ(sh.label(), "b3_hq4_hkv2_sq1_skv100_d64_f32_page16_shuffled_pool40");
  // An explicit table: its hash in the label; another table, another label.
  const Problem t = problems()[2];
  EXPECT_EQ(t.page_order, PageOrder::table);
  EXPECT_EQ(t.num_pages, 6);
  EXPECT_NE(t.label().find("_page16_table"), std::string::npos) << t.label();
  EXPECT_NE(with_table(make_problem(2, 2, 2, 3, 40, 40, true), 16, {{5, 2, 5}, {2, 0, 4}}).label(),
            t.label());
  // Contiguous problems: no suffix, no table.
  EXPECT_EQ(make_problem(2, 4, 2, 1, 33, 64, true).label(), "b2_hq4_hkv2_sq1_skv33_d64_causal_f32");
}

TEST(PagedProblem, ValidationNamesTheFieldAndValue) {
  const Problem base = make_problem(2, 2, 2, 1, 40, 32, true);
  Problem neg = base;
  neg.page_size = -1;
  EXPECT_EQ(validate(neg), "page_size = -1: must be >= 0 (0: K and V contiguous, not paged)");
  Problem zero = base;
  zero.page_order = PageOrder::shuffled;
  EXPECT_EQ(validate(zero), "page_size = 0: a block table (page_order shuffled) needs pages of at least one token");
  Problem none = base;
  none.page_size = 16;
  none.num_pages = 6;
  EXPECT_EQ(validate(none), "block_table: none for page_size = 16 (Problem::make_block_table builds it)");
  EXPECT_EQ(validate(paged(base, 16, PageOrder::sequential, 5)),
            "num_pages = 5: fewer than the 6 pages of 16 keys the contexts fill");
  // A row shorter than its context: padding is not a page.
  EXPECT_EQ(validate(with_table(base, 16, {{0, 1, 2}, {3, 4}})),
            "block_table[1]: 2 pages of 16 keys hold 32 keys, fewer than its seq_kv = 40");
  EXPECT_EQ(with_table(base, 16, {{0, 1, 2}, {3, 4}}).block_table_rows(),
            (std::vector<std::vector<int>>{{0, 1, 2}, {3, 4}}));
  Problem short_row = with_table(base, 16, {{0, 1}, {3, 4}});
  EXPECT_EQ(validate(short_row),
            "block_table[0]: 2 pages of 16 keys hold 32 keys, fewer than its seq_kv = 40");
  Problem out = with_table(base, 16, {{0, 1, 2}, {3, 4, 5}});
  out.num_pages = 5;
  EXPECT_EQ(validate(out), "block_table[1][2] = 5: not a page of the pool [0, 5)");
  const Problem r = paged(ragged(make_problem(1, 2, 2, 1, 1, 32, true), {1, 1}, {20, 3}), 8,
                          PageOrder::sequential);
  Problem r_short = with_table(ragged(make_problem(1, 2, 2, 1, 1, 32, true), {1, 1}, {20, 3}), 8,
                               {{0, 1}, {2}});
  EXPECT_EQ(validate(r), "");
  EXPECT_EQ(validate(r_short),
            "block_table[0]: 2 pages of 8 keys hold 16 keys, fewer than its seqlens_kv[0] = 20");
  Problem q0 = paged(base, 16, PageOrder::sequential);
  q0.seq_q = 0;
  EXPECT_EQ(validate(q0), "seq_q = 0: must be positive");
}

// The int32 arrays the harness uploads for a device (FwdArgs).
TEST(PagedProblem, SequenceMetadata) {
  EXPECT_TRUE(sequence_metadata(make_problem(2, 2, 2, 3, 40, 32, true)).data.empty());
  const Problem d = paged(make_problem(2, 2, 2, 1, 20, 32, true), 8, PageOrder::sequential);
  const SequenceMetadata md = sequence_metadata(d);
  EXPECT_EQ(md.cu_seqlens_q, -1);
  EXPECT_EQ(md.cu_seqlens_kv, -1);
  EXPECT_EQ(md.data, (std::vector<std::int32_t>{20, 20, 0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(md.seqlens_kv, 0);
  EXPECT_EQ(md.block_table, 2);
  const Problem r = paged(ragged(make_problem(1, 2, 2, 1, 1, 32, true), {1, 4}, {9, 3}), 8,
                          PageOrder::sequential);
  const SequenceMetadata mr = sequence_metadata(r);
  EXPECT_EQ(mr.data, (std::vector<std::int32_t>{0, 1, 5, 9, 3, 0, 1, 2, 0}));
  EXPECT_EQ(mr.cu_seqlens_q, 0);
  EXPECT_EQ(mr.seqlens_kv, 3);
  EXPECT_EQ(mr.block_table, 5);
}

// make_inputs: K and V are the pool of pages.
TEST(PagedInputs, ThePool) {
  const Problem p = problems()[1];
  const CaseInputs a = make_inputs(p, kSeed);
  EXPECT_EQ(a.k.numel, std::int64_t{20} * 8 * p.heads_kv * p.head_dim);
  EXPECT_EQ(a.v.numel, a.k.numel);
  EXPECT_EQ(a.q.numel, std::int64_t{3} * 4 * p.heads_q * p.head_dim);
}

// A timed forward row of p (cpu.naive_3pass) with its hbm_bytes, as a run writes it.
ResultRow timed_fwd_row(const Problem& p, double median_ms) {
  ResultRow r;
  r.problem = p;
  r.case_label = p.label();
  r.impl = "cpu.naive_3pass";
  r.device = "cpu";
  r.hbm_bytes = pass_hbm_bytes(p, Pass::fwd);
  r.time = TimeStats{};
  r.time->median_ms = median_ms;
  return r;
}

// Results JSON: page_order for a generated table, the rows for an explicit one; both readers
// rebuild the same problem.
TEST(PagedResults, RoundTrip) {
  for (const Problem& p : {problems()[1], problems()[2], problems()[3]}) {
    SCOPED_TRACE(p.label());
    const auto j = problem_to_json(p);
    EXPECT_EQ(j["page_size"], p.page_size);
    EXPECT_EQ(j["num_pages"], p.num_pages);
    EXPECT_EQ(j.contains("block_table"), p.page_order == PageOrder::table);
    EXPECT_EQ(j.contains("page_order"), p.page_order != PageOrder::table);
    const ResultRow r = timed_fwd_row(p, 2);
    ResultsFile f;
    f.context["config_hash"] = "0";
    f.rows = {r};
    const auto written = results_to_json(f);
    EXPECT_EQ(written["rows"][0]["hbm_bytes"], p.hbm_bytes_fwd());
    EXPECT_DOUBLE_EQ(written["rows"][0]["gbps"].get<double>(), p.hbm_bytes_fwd() / 2e-3 / 1e9);
    const ResultsFile back = parse_results(nlohmann::ordered_json::parse(written.dump()), "<written>");
    ASSERT_EQ(back.rows.size(), 1u);
    const Problem& b = back.rows[0].problem;
    Problem used = p;  // the files write the scale used
    used.scale = p.effective_scale();
    EXPECT_EQ(b.label(), used.label());
    EXPECT_EQ(b.block_table_rows(), p.block_table_rows());
    EXPECT_EQ(back.rows[0].hbm_bytes, p.hbm_bytes_fwd());
    EXPECT_EQ(results_to_json(back), written);
    const Problem c = problem_from_json(nlohmann::json::parse(j.dump()));
    EXPECT_EQ(c.label(), used.label());
    EXPECT_EQ(c.block_table_rows(), p.block_table_rows());
  }
  EXPECT_EQ(pass_hbm_bytes(make_problem(2, 2, 2, 64, 64, 32, true), Pass::fwd), 0);
  EXPECT_EQ(pass_hbm_bytes(problems()[1], Pass::bwd), 0);
  auto refused = [](const std::string& text) {
    try {
      problem_from_json(nlohmann::json::parse(text));
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  const std::string head = R"({"batch": 2, "heads_q": 2, "heads_kv": 2, "seq_q": 1, "seq_kv": 20,
                               "head_dim": 32, "dtype": "f32", )";
  EXPECT_EQ(refused(head + R"("page_size": 8, "page_order": "shuffled"})"), "");
  EXPECT_EQ(refused(head + R"("page_size": 8, "block_table": [[0, 1, 2], [2, 1, 0]]})"), "");
  EXPECT_EQ(refused(head + R"("page_size": 8, "page_order": "random"})"),
            "problem.page_order = \"random\": must be \"sequential\" or \"shuffled\"");
  EXPECT_EQ(refused(head + R"("page_size": 8, "block_table": [[0, 1], [2, 1, 0]]})"),
            "problem: block_table[0]: 2 pages of 8 keys hold 16 keys, fewer than its seq_kv = 20");
  EXPECT_EQ(refused(head + R"("page_size": 8, "num_pages": 3, "block_table": [[0, 1, 2], [2, 1, 3]]})"),
            "problem: block_table[1][2] = 3: not a page of the pool [0, 3)");
}

// The read curve (context.ceilings.read_curve): a read of a row's own bytes, interpolated with the
// time of a call linear in its bytes, and the run table's column of that fraction.
TEST(PagedResults, ReadCurveAtSize) {
  // Calls of t = 10 us + bytes / (4 TB/s): the interpolation is exact on such a line.
  auto t_of = [](double b) { return 10e-6 + b / 4e12; };
  nlohmann::json ceil = {{"read_tbps", 4.0}, {"read_curve", nlohmann::json::array()}};
  for (const double mib : {8.0, 16.0, 32.0, 64.0, 1024.0}) {
    const double b = mib * (1 << 20);
    ceil["read_curve"].push_back({{"bytes", b}, {"tbps", b / t_of(b) / 1e12}});
  }
  for (const double b : {1e6, 8.0 * (1 << 20), 30e6, 67e6, 500e6, 4e9}) {
    SCOPED_TRACE(b);
    const auto at = read_tbps_at(ceil, b);
    ASSERT_TRUE(at.has_value());
    EXPECT_NEAR(*at, b / t_of(b) / 1e12, 1e-9);
  }
  // 67 MB: 16.75 us of reading at 4 TB/s plus the 10 us: 0.63 of the asymptote.
  EXPECT_NEAR(*read_tbps_at(ceil, 67e6) / 4.0, 16.75 / 26.75, 1e-9);
  EXPECT_FALSE(read_tbps_at(ceil, 0).has_value());
  EXPECT_FALSE(read_tbps_at(nlohmann::json::object(), 1e6).has_value());
  using J = nlohmann::json;
  EXPECT_FALSE(read_tbps_at(J{{"read_curve", J::array()}}, 1e6).has_value());
  EXPECT_FALSE(read_tbps_at(J{{"read_curve", {{{"bytes", 0}, {"tbps", 1}}}}}, 1e6).has_value());
  // One point: its rate at every size.
  EXPECT_NEAR(*read_tbps_at(J{{"read_curve", {{{"bytes", 1e9}, {"tbps", 3.0}}}}}, 5e6), 3.0, 1e-12);
  // Out of order, and a malformed point skipped.
  nlohmann::json shuffled = {{"read_curve", {ceil["read_curve"][3], "x", ceil["read_curve"][0],
                                             ceil["read_curve"][4], ceil["read_curve"][1]}}};
  EXPECT_NEAR(*read_tbps_at(shuffled, 67e6), *read_tbps_at(ceil, 67e6), 1e-9);

  // The run table: GB/s (of the 1 GiB read) and, with a curve, the fraction of a same-size read.
  const Problem p = problems()[1];
  const double b = static_cast<double>(pass_hbm_bytes(p, Pass::fwd));
  const ResultRow r = timed_fwd_row(p, 2 * t_of(b) * 1e3);  // half the rate of a same-size read
  ResultsFile f;
  f.rows = {r};
  f.context["ceilings"] = ceil;
  std::ostringstream with_curve;
  print_run_table(f, with_curve);
  EXPECT_NE(with_curve.str().find("of read at size"), std::string::npos) << with_curve.str();
  EXPECT_NE(with_curve.str().find(" 50% "), std::string::npos) << with_curve.str();
  f.context["ceilings"].erase("read_curve");
  std::ostringstream without;
  print_run_table(f, without);
  EXPECT_NE(without.str().find("GB/s (of read)"), std::string::npos) << without.str();
  EXPECT_EQ(without.str().find("of read at size"), std::string::npos) << without.str();
}

// Config keys: page_size, page_order, num_pages, block_table and the ragged distribution; their
// errors name the key and value (exit 2 in the CLI: test_config checks the mapping).
TEST(PagedConfig, KeysAndErrors) {
  auto parse = [](const std::string& problem) {
    return parse_config(R"({"implementations": ["cpu.naive_3pass"], "passes": ["fwd"], "problem": {)" +
                        problem + "}}");
  };
  auto cases = [&](const std::string& problem) {
    const ConfigResult r = parse(problem);
    if (const auto* e = std::get_if<ConfigError>(&r)) ADD_FAILURE() << e->text();
    return std::holds_alternative<Config>(r) ? std::get<Config>(r).groups.at(0).cases
                                             : std::vector<Problem>{};
  };
  auto error = [&](const std::string& problem) {
    const ConfigResult r = parse(problem);
    return std::holds_alternative<ConfigError>(r) ? std::get<ConfigError>(r).text() : std::string();
  };
  const auto a = cases(R"("seq_kv": 100, "batch": 3, "page_size": 16, "page_order": "shuffled")");
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].block_table_rows(),
            paged(make_problem(3, 1, 1, 1, 100, 64, false), 16, PageOrder::shuffled).block_table_rows());
  const auto t = cases(R"("seq_kv": 20, "batch": 2, "page_size": 8, "block_table": [[4, 1, 4], [0, 2, 3]])");
  ASSERT_EQ(t.size(), 1u);
  EXPECT_EQ(t[0].num_pages, 5);
  EXPECT_EQ(t[0].page(0, 2), 4);
  const auto g = cases(R"("ragged": {"batch": 5, "seq_q": 4, "min": 0, "max": 100, "seed": 3}, "page_size": 64)");
  ASSERT_EQ(g.size(), 1u);
  EXPECT_EQ(g[0].seqlens_q, (std::vector<int>(5, 4)));
  EXPECT_EQ(g[0].seqlens_kv.size(), 5u);
  for (int n : g[0].seqlens_kv) EXPECT_LE(n, 100);
  EXPECT_EQ(g[0].seqlens_kv, cases(R"("ragged": {"batch": 5, "seq_q": 4, "min": 0, "max": 100, "seed": 3})")[0].seqlens_kv);
  EXPECT_TRUE(g[0].paged());

  EXPECT_NE(error(R"("page_size": -1)").find("/problem/page_size = -1: must be an integer >= 0"), std::string::npos);
  EXPECT_NE(error(R"("page_size": 8, "page_order": "random")").find("/problem/page_order = \"random\": must be"),
            std::string::npos);
  EXPECT_NE(error(R"("page_order": "shuffled")").find("page_size = 0: a block table (page_order shuffled)"),
            std::string::npos);
  EXPECT_NE(error(R"("seq_kv": 20, "page_size": 8, "num_pages": 2)")
                .find("/problem/num_pages = 2: num_pages = 2: fewer than the 3 pages"),
            std::string::npos)
      << error(R"("seq_kv": 20, "page_size": 8, "num_pages": 2)");
  EXPECT_NE(error(R"("seq_kv": 20, "batch": 1, "page_size": 8, "num_pages": 3, "block_table": [[0, 1, 7]])")
                .find("/problem/block_table = [[0,1,7]]: block_table[0][2] = 7: not a page of the pool"),
            std::string::npos)
      << error(R"("seq_kv": 20, "batch": 1, "page_size": 8, "num_pages": 3, "block_table": [[0, 1, 7]])");
  EXPECT_NE(error(R"("seq_kv": 20, "batch": 1, "page_size": 8, "block_table": [[0, 1]])")
                .find("block_table[0]: 2 pages of 8 keys hold 16 keys, fewer than its seq_kv = 20"),
            std::string::npos);
  EXPECT_NE(error(R"("page_size": 8, "page_order": "shuffled", "block_table": [[0]])")
                .find("block_table and page_order (at /problem/page_order) both say where the pages are"),
            std::string::npos);
  EXPECT_NE(error(R"("ragged": {"batch": 2, "min": 1, "max": 4}, "seq_q": 3)")
                .find("leave seq_q out"),
            std::string::npos);
  EXPECT_NE(error(R"("ragged": {"batch": 2, "min": 1, "max": 4}, "varlen": {"total_tokens": 5, "min": 1, "max": 4})")
                .find("both set the lengths"),
            std::string::npos);
  EXPECT_NE(error(R"("ragged": {"batch": 0, "min": 1, "max": 4})").find("/problem/ragged/batch = 0"),
            std::string::npos);
  EXPECT_NE(error(R"("ragged": {"batch": 2, "max": 4})").find("needs \"min\""), std::string::npos);
}

std::string read_config(const char* name) {
  std::ifstream f(std::filesystem::path(source_dir()) / "configs" / name);
  EXPECT_TRUE(f) << name;
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

bool cuda_built() {
  for (const auto* i : Registry::instance().all()) {
    if (i->device() == Device::cuda) return true;
  }
  return false;
}

// The shipped decode configs: decode_ragged runs on the CPU too; decode_grid(_full) and flash_decoding
// are CUDA-only (nothing to run without CUDA), their cases counted where CUDA is built.
TEST(PagedConfig, ShippedConfigs) {
  const ConfigResult r = parse_config(read_config("decode_ragged.json"));
  ASSERT_TRUE(std::holds_alternative<Config>(r)) << std::get<ConfigError>(r).text();
  const Config& c = std::get<Config>(r);
  ASSERT_EQ(c.case_count(), 4u);  // page size 16, 64 x seq_q 1, 4
  for (const Problem& p : c.groups.at(0).cases) {
    EXPECT_TRUE(p.paged());
    EXPECT_EQ(p.batch, 64);
    EXPECT_EQ(p.page_order, PageOrder::shuffled);
    EXPECT_EQ(validate(p), "");
  }
  for (const auto& [name, count] : {std::pair{"decode_grid.json", 63u}, std::pair{"decode_grid_full.json", 291u},
                                     std::pair{"flash_decoding.json", 10u}}) {
    const ConfigResult g = parse_config(read_config(name));
    if (cuda_built()) {
      ASSERT_TRUE(std::holds_alternative<Config>(g)) << name << ": " << std::get<ConfigError>(g).text();
      EXPECT_EQ(std::get<Config>(g).case_count(), count) << name;
      // CUDA-only in every group, so the CPU-only build's "nothing to run" holds (checked here
      // too: the CPU-only build runs only under sanitize.sh, in CI).
      for (const ConfigGroup& group : std::get<Config>(g).groups) {
        for (const ImplRun& run : group.impls) {
          EXPECT_EQ(run.impl->device(), Device::cuda) << name << ": " << run.impl->name();
        }
      }
    } else {
      ASSERT_TRUE(std::holds_alternative<ConfigError>(g)) << name;
      EXPECT_NE(std::get<ConfigError>(g).message.find("nothing to run"), std::string::npos) << name;
    }
  }
}

}  // namespace
}  // namespace attnbench
