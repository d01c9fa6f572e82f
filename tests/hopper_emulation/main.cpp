// The Hopper kernels' logic on a machine without a GPU: cuda.flash_fwd_wgmma and
// cuda.flash_bwd_wgmma run on the CPU emulator of TMA, mbarriers and wgmma
// (impls/cuda/hopper/emulation/) and are held to the project's verification rule (harness
// verify(): the float64 reference, the CPU naive 3-pass as the error baseline) on the odd shapes:
// sequence tails, seq 1, causal with seq_q < and > seq_kv (rows and whole blocks that see no key),
// GQA 8:2, MQA, every head_dim tile (padded ones too), both 16-bit dtypes, normal and outlier
// inputs, several K/V tiles (the stage ring wraps). The backward reads the reference's O and LSE
// rounded to the dtype, as the harness's standalone backward does. Exit code: the number of failed
// cases.
//
// Linked with attn_harness and the CPU implementations only: the emulated kernel registers
// "cuda.flash_fwd_wgmma" itself, and attn_impls_cuda must not be linked as well.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "attnbench/implementation.hpp"
#include "attnbench/make_problem.hpp"
#include "attnbench/tensors.hpp"
#include "attnbench/verify.hpp"
#include "emulated_call.hpp"
// The emulator itself (emu::sched_seed, the SM count): found first on this test's include path.
#include "hopper/host.cuh"
#include "mma/ptx.cuh"

using namespace attnbench;
using attnbench::test::check_on_host;

namespace {

struct Case {
  int b, hq, hkv, sq, skv, d;
  bool causal;
  DType t;
  Distribution dist;
  double scale = 0;  // 0: 1/sqrt(head_dim)
  int wl = -1, wr = -1;  // window_left, window_right (-1: unbounded)
  double softcap = 0;
  std::vector<int> lq = {}, lkv = {};  // varlen: per-sequence lengths (b, sq, skv ignored)
};

Problem problem(const Case& c) {
  Problem p = make_problem(c.b, c.hq, c.hkv, c.sq, c.skv, c.d, c.causal, c.t, c.scale);
  p.window_left = c.wl;
  p.window_right = c.wr;
  p.softcap = c.softcap;
  if (!c.lq.empty()) p.set_seqlens(c.lq, c.lkv);
  return p;
}

// One pass of impl on the emulator with its threads interleaved by `seed` (0: in index order;
// see impls/cuda/mma/emulation/mma/ptx.cuh); the naive baseline runs on the CPU.
bool check_emulated(const Implementation& impl, const Implementation& naive, const Problem& p,
                    Pass pass, const CaseInputs& in, const Reference& ref, const Options& opts,
                    uint64_t seed) {
  std::printf("%s%s\n", p.label().c_str(), seed ? " (threads shuffled)" : "");
  emu::sched_seed = seed;
  const bool ok = check_on_host(impl, naive, p, pass, in, ref, opts);
  emu::sched_seed = 0;
  return ok;
}

}  // namespace

int main() {
  const Implementation* fwd = Registry::instance().find("cuda.flash_fwd_wgmma");
  const Implementation* bwd = Registry::instance().find("cuda.flash_bwd_wgmma");
  const Implementation* naive = Registry::instance().find("cpu.naive_3pass");
  if (!fwd || !bwd || !naive) {
    std::fprintf(stderr, "implementations not registered\n");
    return 100;
  }
  const DType bf = DType::bf16, hf = DType::f16;
  const Distribution nrm = Distribution::normal, out = Distribution::outlier;
  const std::vector<Case> fwd_cases = {
      {1, 2, 2, 130, 200, 128, false, bf, nrm},  // tails in q and kv, 2 kv tiles
      {1, 2, 2, 129, 129, 128, true, bf, nrm},   // causal, diagonal tiles, m tail
      {2, 8, 2, 70, 300, 64, true, hf, nrm},     // GQA 8:2, causal seq_q < seq_kv, ring wraps
      {1, 3, 1, 200, 60, 64, true, bf, out},     // MQA, causal seq_q > seq_kv: rows see nothing
      {1, 1, 1, 1, 17, 256, false, hf, nrm},     // seq_q 1, d256 (80-key tiles)
      {1, 2, 1, 65, 170, 256, true, bf, out},    // d256 causal, 3 kv tiles
      // Causal square: the first warpgroups of a diagonal block skip the tiles none of their
      // rows sees (192-row d64 blocks over 128-key tiles, d256 over 80-key ones: step 17).
      {1, 2, 1, 300, 300, 64, true, bf, nrm},
      {1, 1, 1, 150, 150, 256, true, hf, out},
      {1, 2, 2, 17, 33, 40, false, bf, nrm},     // padded head_dim 40 -> 64
      {1, 2, 2, 33, 140, 96, true, hf, out},     // padded head_dim 96 -> 128
      {1, 1, 1, 64, 64, 80, false, bf, nrm},     // padded head_dim 80 -> 128
      {1, 2, 2, 40, 520, 128, false, hf, out},   // 5 kv tiles: stages reused twice
      {2, 4, 2, 300, 300, 128, true, bf, nrm},   // persistent: 24 tiles of varied length in a row
      {1, 2, 2, 64, 200, 128, true, bf, nrm, 1e8},  // huge logits: no overflow in ex2
      {1, 2, 2, 64, 130, 64, false, hf, nrm, 500},  // large f16 logits
      // Windows (issue 30): tiles skipped on both sides, edges crossing tiles, rows that see
      // nothing, causal folded in, seq_q != seq_kv both ways, GQA and MQA.
      {1, 2, 2, 300, 300, 128, false, bf, nrm, 0, 70, 40},  // symmetric-ish window
      {2, 8, 2, 150, 400, 64, true, hf, nrm, 0, 100, -1},   // causal + left window, GQA 8:2
      {1, 3, 1, 260, 90, 128, true, bf, out, 0, 0, -1},     // window 0: the diagonal only, MQA
      {1, 2, 2, 90, 260, 256, false, bf, nrm, 0, -1, 1},    // right window only, d256
      {1, 2, 2, 200, 120, 64, false, hf, out, 0, 5, 3},     // narrow window, seq_q > seq_kv
      {1, 1, 1, 70, 70, 128, false, bf, nrm, 0, 500, 500},  // window wider than the sequence
      // Soft cap, alone and with masks; outliers and a large scale push t to +-1.
      {1, 2, 2, 130, 200, 128, false, bf, out, 0, -1, -1, 30},
      {2, 8, 2, 70, 300, 64, true, hf, nrm, 0, -1, -1, 50},
      {1, 2, 1, 65, 170, 256, true, bf, out, 1e4, -1, -1, 30},
      {1, 2, 2, 150, 150, 128, true, hf, nrm, 0, 64, -1, 20},  // soft cap + window
      // Soft cap 50 (Gemma 2's) in bf16: the bound with the exponent shifted (forward step 16).
      // Three keys at scale 1e4 leave rows whose every key caps at -1: unshifted, their P
      // (2^-144) flushes to 0 and the row looks empty.
      {1, 2, 1, 65, 3, 128, false, bf, out, 1e4, -1, -1, 50},
      {1, 4, 2, 40, 90, 64, true, bf, nrm, 0, -1, -1, 50},
      // Varlen (packed THD): sequences without queries or keys, blocks past their sequence, tails
      // whose keys are the next sequence's, causal bottom-right per sequence both ways.
      {0, 2, 1, 0, 0, 64, false, bf, nrm, 0, -1, -1, 0, {50, 25, 0, 33}, {20, 0, 17, 40}},
      {0, 2, 1, 0, 0, 64, true, hf, out, 0, -1, -1, 0, {50, 25, 0, 33}, {20, 0, 17, 40}},
      {0, 8, 2, 0, 0, 128, true, bf, nrm, 0, -1, -1, 0, {130, 1, 70, 200}, {200, 70, 0, 129}},
      {0, 3, 1, 0, 0, 256, true, bf, out, 0, -1, -1, 0, {65, 17}, {170, 80}},  // MQA, d256
      {0, 2, 2, 0, 0, 96, false, hf, nrm, 0, 20, 10, 0, {100, 40, 0}, {120, 60, 33}},  // window
      {0, 2, 2, 0, 0, 128, false, bf, out, 0, -1, -1, 30, {80, 0, 33}, {90, 45, 40}},  // soft cap
  };
  const std::vector<Case> bwd_cases = {
      {1, 2, 2, 130, 200, 128, false, bf, nrm},  // tails, 2 key blocks, 3 query tiles (ring wraps)
      {1, 2, 2, 129, 129, 128, true, bf, nrm},   // causal diagonal, tails
      {2, 8, 2, 70, 300, 64, true, hf, nrm},     // GQA 8:2 (group loop), causal seq_q < seq_kv
      {1, 3, 1, 200, 60, 64, true, bf, out},     // MQA, causal seq_q > seq_kv: rows see nothing
      {1, 2, 2, 17, 33, 40, false, bf, nrm},     // padded head_dim 40 -> 64
      {1, 2, 2, 33, 140, 96, true, hf, out},     // padded head_dim 96 -> 128
      {1, 1, 1, 1, 17, 128, false, hf, nrm},     // seq_q 1
      {1, 2, 2, 260, 130, 64, false, bf, out},   // 3 query tiles of 128 at d64
      {1, 2, 1, 64, 100, 64, true, bf, nrm, 1e8},  // large logits (LSE·log2e near 1e9)
      // d256: the consumers split dK/dV by columns, 64-key blocks, one Q/dO stage.
      {1, 2, 2, 130, 150, 256, false, bf, nrm},  // tails, 3 key blocks, 3 query tiles
      {2, 4, 1, 70, 129, 256, true, hf, out},    // GQA 4:1 (MQA), causal seq_q < seq_kv
      {1, 2, 2, 150, 65, 256, true, bf, nrm},    // causal seq_q > seq_kv: rows see nothing
      {1, 1, 1, 1, 17, 200, false, hf, nrm},     // seq_q 1, padded head_dim 200 -> 256
      // Windows (issue 30): query tiles skipped on both sides of a key block, edges crossing
      // tiles, rows that see nothing, causal folded in, seq_q != seq_kv both ways, GQA and MQA;
      // deterministic: a tile's key blocks add from its last one down (kLastFirst), not from 0.
      {1, 2, 2, 300, 300, 128, false, bf, nrm, 0, 70, 40},  // both sides
      {2, 8, 2, 150, 400, 64, true, hf, nrm, 0, 100, -1},   // causal + left window, GQA 8:2
      {1, 3, 1, 260, 90, 128, true, bf, out, 0, 0, -1},     // window 0: the diagonal only, MQA
      {1, 2, 2, 90, 260, 256, false, bf, nrm, 0, -1, 1},    // right window only, d256
      {1, 2, 2, 200, 120, 64, false, hf, out, 0, 5, 3},     // narrow window, seq_q > seq_kv
      {1, 1, 1, 70, 70, 128, false, bf, nrm, 0, 500, 500},  // window wider than the sequence
      {1, 2, 2, 300, 300, 256, true, bf, nrm, 0, 100, -1},  // causal + left window, d256
      // Soft cap (the 1 - t^2 factor), alone and with masks; outliers and a large scale.
      {1, 2, 2, 130, 200, 128, false, bf, out, 0, -1, -1, 30},
      {2, 8, 2, 70, 300, 64, true, hf, nrm, 0, -1, -1, 50},
      {1, 2, 1, 65, 170, 256, true, bf, out, 1e4, -1, -1, 30},
      {1, 2, 2, 150, 150, 128, true, hf, nrm, 0, 64, -1, 20},  // soft cap + window
      // Varlen (packed THD): sequences without queries or keys, key blocks past their sequence,
      // tiles whose rows run into the next sequence's, causal bottom-right per sequence.
      {0, 2, 1, 0, 0, 64, false, bf, nrm, 0, -1, -1, 0, {50, 25, 0, 33}, {20, 0, 17, 40}},
      {0, 2, 1, 0, 0, 64, true, hf, out, 0, -1, -1, 0, {50, 25, 0, 33}, {20, 0, 17, 40}},
      {0, 8, 2, 0, 0, 128, true, bf, nrm, 0, -1, -1, 0, {130, 1, 70, 200}, {200, 70, 0, 129}},
      {0, 3, 1, 0, 0, 256, true, bf, out, 0, -1, -1, 0, {65, 17}, {170, 80}},  // MQA, d256
      {0, 2, 2, 0, 0, 96, false, hf, nrm, 0, 20, 10, 0, {100, 40, 0}, {120, 60, 33}},  // window
      {0, 2, 2, 0, 0, 128, false, bf, out, 0, -1, -1, 30, {80, 0, 33}, {90, 45, 40}},  // soft cap
  };
  int failed = 0, runs = 0;
  for (const Case& c : fwd_cases) {
    const Problem p = problem(c);
    const CaseInputs in = make_inputs(p, 1234, c.dist);
    const Reference ref = compute_reference(in, VerifyMode::full, true, false, 1);
    // Both schedules (a block per tile; the persistent grid taking tiles from a counter), each
    // with the threads in index order and shuffled every round; a window also on the wide tiles
    // (wide_tiles=1: a narrow window runs on 64 x 64 tiles by default, persistent=1 on the wide).
    std::vector<Options> option_sets = {Options{{"persistent", 0}}, Options{{"persistent", 1}}};
    if (p.has_window()) option_sets.push_back(Options{{"wide_tiles", 1}});
    // The tile's tail scheduled with its exponentials (fused_tail=1: dense, causal and soft cap),
    // and after them (fused_tail=0; the default for dense and causal d128 is 1 since forward
    // step 28 and for d64 since step 29, so the sets above run the fused kernel there).
    if (!p.has_window() && !p.varlen()) {
      option_sets.push_back(Options{{"fused_tail", 1}});
      option_sets.push_back(Options{{"fused_tail", 0}});
    }
    // A soft cap with the running maxima (cap_max=0; the default takes the cap's bound as the
    // maximum in bf16 up to softcap 51.9: forward step 16).
    if (p.softcap > 0) option_sets.push_back(Options{{"cap_max", 0}});
    // Every tile of a block computed by each warpgroup, masked (skip_hidden=0, forward step 17's
    // A/B), where the default skips some: causal and windows.
    if (p.causal || p.has_window()) option_sets.push_back(Options{{"skip_hidden", 0}});
    // Each tile's K and V loaded together (k_ahead=0, forward step 18's A/B; the default loads K
    // one tile ahead of V), on the causal and dense cases.
    if (!p.has_window() && !p.varlen() && p.softcap == 0)
      option_sets.push_back(Options{{"k_ahead", 0}});
    // O stored from registers instead of by TMA (o_tma=0, forward steps 20 and 24's A/B), in both
    // schedules: the persistent kernel holds its Q stage for the store since step 24, and varlen
    // stores its full warpgroups by TMA.
    option_sets.push_back(Options{{"o_tma", 0}});
    option_sets.push_back(Options{{"o_tma", 0}, {"persistent", 1}});
    // The persistent kernel without its own O region (o_buf=0: step 24's held Q stage; the
    // default since forward step 26 stages O apart where it fits, d64 and 128-key d128 tiles).
    option_sets.push_back(Options{{"o_buf", 0}, {"persistent", 1}});
    // One Q barrier for the whole tile (q_split=0; the default since forward step 22 gives each
    // consumer's rows their own, K_0 between them), in both schedules and with K and V loaded
    // together (no early K_0).
    option_sets.push_back(Options{{"q_split", 0}});
    option_sets.push_back(Options{{"q_split", 0}, {"persistent", 1}});
    if (!p.has_window() && !p.varlen() && p.softcap == 0)
      option_sets.push_back(Options{{"k_ahead", 0}, {"q_split", 0}});
    // d128 non-causal on 128 x 176 tiles (keys128=0; the default since forward step 23 runs it
    // on 128 x 128, the persistent kernel too since step 25; other head_dims and masks ignore
    // it): the dense non-causal cases, in both schedules.
    if (!p.causal && !p.has_window() && !p.varlen() && p.softcap == 0) {
      option_sets.push_back(Options{{"keys128", 0}});
      option_sets.push_back(Options{{"keys128", 0}, {"persistent", 1}});
    }
    // Every set above without a schedule runs a block per tile (persistent=0): the default's
    // schedule depends on the problem (persistent_auto: persistent at most 1024 queries and keys,
    // forward step 27, so every dense and causal case here), and each option must be checked in
    // both. The default itself (no option) is the last set.
    for (Options& o : option_sets)
      if (o.find("persistent") == o.end()) o["persistent"] = 0;
    option_sets.push_back(Options{});
    for (const Options& opts : option_sets)
      for (const uint64_t seed : {uint64_t{0}, uint64_t{7}}) {
        ++runs;
        if (!check_emulated(*fwd, *naive, p, Pass::fwd, in, ref, opts, seed)) ++failed;
      }
  }
  for (const Case& c : bwd_cases) {
    const Problem p = problem(c);
    const CaseInputs in = make_inputs(p, 4321, c.dist);
    const Reference ref = compute_reference(in, VerifyMode::full, true, true, 1);
    // A window also on the narrow tiles (wide_tiles=0: a narrow window at d128 on 64-key blocks;
    // the default keeps 128-key ones).
    std::vector<Options> option_sets = {Options{}, Options{{"deterministic", 1}}};
    if (p.has_window()) option_sets.push_back(Options{{"wide_tiles", 0}});
    for (const Options& opts : option_sets) {
      ++runs;
      if (!check_emulated(*bwd, *naive, p, Pass::bwd, in, ref, opts, 11)) ++failed;
    }
  }
  // Option m_tile=80 (backward step 27): the dense non-causal d128 problems (head_dim 80, 96 and
  // 128 on the 128 tile) on 80-row query tiles; seq_q not a multiple of 80 or 128 (1, 17, 79, 81,
  // 129, 200, 257: partial tiles, the Q/dO ring wrapping, 320-row padded workspaces), GQA 8:2,
  // MQA, batch 2, key tails over several blocks; in both thread orders and beside
  // deterministic=1 (which ignores it: 64-row tiles on the 128-row padding). The causal, window
  // and soft-cap cases above run with it too, where it must change nothing.
  const std::vector<Case> m80_cases = {
      {1, 2, 2, 1, 17, 128, false, bf, nrm},
      {1, 2, 2, 17, 200, 128, false, hf, nrm},
      {1, 1, 1, 79, 130, 128, false, bf, out},
      {1, 2, 2, 81, 129, 96, false, hf, nrm},
      {2, 8, 2, 129, 140, 128, false, bf, nrm},  // GQA 8:2, batch 2
      {1, 3, 1, 200, 60, 80, false, bf, out},    // MQA, head_dim 80
      {2, 2, 1, 257, 300, 128, false, hf, nrm},  // 4 query tiles (ring wraps twice), 3 key blocks
      {1, 2, 2, 160, 128, 128, false, bf, nrm, 1e8},  // whole tiles; huge logits
  };
  {
    // The option is listed, and a value other than 64 or 80 is refused with a message naming
    // the option and the value.
    const Problem p = problem(m80_cases[0]);
    const auto& names = bwd->capabilities().options;
    const Support bad = bwd->supports_options(p, Pass::bwd, Options{{"m_tile", 96}});
    const bool listed = std::find(names.begin(), names.end(), "m_tile") != names.end();
    const bool refused = !bad.ok && bad.reason.find("m_tile") != std::string::npos &&
                         bad.reason.find("96") != std::string::npos;
    const bool accepted = bwd->supports_options(p, Pass::bwd, Options{{"m_tile", 80}}).ok &&
                          bwd->supports_options(p, Pass::bwd, Options{{"m_tile", 64}}).ok;
    std::printf("m_tile option: listed %d, m_tile=96 refused (%s) %d, 64 and 80 accepted %d\n",
                listed, bad.reason.c_str(), refused, accepted);
    ++runs;
    if (!listed || !refused || !accepted) ++failed;
    // Unset (backward step 28): the 80-row tiles from 2048 query rows up, the 64-row ones below,
    // seen in the workspace (rows padded to 320 a (sequence, head) for the 80-row tiles, 128
    // otherwise); a causal problem keeps the 64-row tiles whatever its length.
    auto ws = [&](int sq, bool causal, const Options& o) {
      return bwd->workspace_bytes(problem({2, 4, 2, sq, sq, 128, causal, bf, nrm}), Pass::bwd, o);
    };
    const Options unset{}, m64{{"m_tile", 64}}, m80{{"m_tile", 80}};
    struct Rule { int sq; bool causal; bool want80; };
    bool rule_ok = true;
    for (const Rule r : {Rule{1024, false, false}, Rule{2047, false, false},
                         Rule{2048, false, true}, Rule{4096, false, true},
                         Rule{4096, true, false}}) {
      const std::size_t got = ws(r.sq, r.causal, unset);
      const std::size_t w64 = ws(r.sq, r.causal, m64), w80 = ws(r.sq, r.causal, m80);
      const bool ok = r.causal ? (got == w64 && got == w80)
                               : (w64 != w80 && got == (r.want80 ? w80 : w64));
      std::printf("m_tile unset at seq %d%s: workspace %zu (64: %zu, 80: %zu) %s\n", r.sq,
                  r.causal ? " causal" : "", got, w64, w80, ok ? "ok" : "WRONG");
      rule_ok = rule_ok && ok;
    }
    ++runs;
    if (!rule_ok) ++failed;
  }
  for (const Case& c : m80_cases) {
    const Problem p = problem(c);
    const CaseInputs in = make_inputs(p, 4321, c.dist);
    const Reference ref = compute_reference(in, VerifyMode::full, true, true, 1);
    for (const Options& opts :
         {Options{{"m_tile", 80}}, Options{{"m_tile", 80}, {"deterministic", 1}}})
      for (const uint64_t seed : {uint64_t{0}, uint64_t{11}}) {
        ++runs;
        if (!check_emulated(*bwd, *naive, p, Pass::bwd, in, ref, opts, seed)) ++failed;
      }
  }
  for (const Case& c : bwd_cases) {
    if (!(c.causal || c.wl >= 0 || c.wr >= 0 || c.softcap > 0 || !c.lq.empty()) || c.d != 128)
      continue;
    const Problem p = problem(c);
    const CaseInputs in = make_inputs(p, 4321, c.dist);
    const Reference ref = compute_reference(in, VerifyMode::full, true, true, 1);
    ++runs;
    if (!check_emulated(*bwd, *naive, p, Pass::bwd, in, ref, Options{{"m_tile", 80}}, 11))
      ++failed;
  }
  // The launch order (common/shape.hpp's grouped_order) on a device of 10 SMs: groups of
  // several (head, sequence) pairs, block by block within a group, the last group smaller. The
  // forward (causal d > 64 without a window; 2-3 query blocks: groups of 3-5 pairs), both
  // schedules; the backward (3 key blocks: groups of 3 pairs, 4 pairs: 3 + 1); deterministic,
  // every pair's blocks must still add into dQ in their launch order (ascending; causal or a
  // window: descending), or the emulator's sequential blocks wait forever.
  auto grouped = [&](const std::vector<Case>& cases, auto several_blocks, Pass pass,
                     const Implementation& impl, const Options& option, uint64_t input_seed,
                     uint64_t sched_seed) {
    for (const Case& c : cases) {
      if (!c.lq.empty() || !several_blocks(c) || c.b * (pass == Pass::fwd ? c.hq : c.hkv) < 2)
        continue;
      const Problem p = problem(c);
      const CaseInputs in = make_inputs(p, input_seed, c.dist);
      const Reference ref = compute_reference(in, VerifyMode::full, true, pass == Pass::bwd, 1);
      std::printf("(10 SMs: blocks grouped)\n");
      // The forward's first schedule a block per tile, given (the default is persistent here).
      const Options first = pass == Pass::fwd ? Options{{"persistent", 0}} : Options{};
      for (const Options& opts : {first, option}) {
        ++runs;
        if (!check_emulated(impl, *naive, p, pass, in, ref, opts, sched_seed)) ++failed;
      }
    }
  };
  attn_hopper::emulated_multiprocessors() = 10;
  // The forward groups only causal problems with head_dim > 64 and no window (forward step 10).
  grouped(fwd_cases,
          [](const Case& c) { return c.sq > 128 && c.causal && c.d > 64 && c.wl < 0 && c.wr < 0; },
          Pass::fwd, *fwd, Options{{"persistent", 1}}, 1234, 7);
  grouped(bwd_cases, [](const Case& c) { return c.skv > (c.d == 256 ? 64 : 128); }, Pass::bwd,
          *bwd, Options{{"deterministic", 1}}, 4321, 11);
  attn_hopper::emulated_multiprocessors() = 3;
  // O, dQ, dK and dV 4 bytes off 16-byte alignment (a caller's slices): the preprocess and
  // postprocess fall back from 16-byte to 4-byte accesses, and a dense or causal problem runs in
  // the kLocal kernel, which stores dK and dV from registers, not by TMA: d40 (5 groups of 8
  // columns), d200 (25), varlen.
  attnbench::test::bwd_misalign() = 4;
  auto first = [&](auto pred) {
    for (const Case& c : bwd_cases)
      if (pred(c)) return c;
    std::fprintf(stderr, "no such backward case\n");
    std::exit(2);
  };
  const Case misaligned[] = {first([](const Case& c) { return c.d == 40; }),
                             first([](const Case& c) { return c.d == 200; }),
                             first([](const Case& c) { return !c.lq.empty() && c.d == 128; })};
  for (const Case& c : misaligned) {
    const Problem p = problem(c);
    const CaseInputs in = make_inputs(p, 4321, c.dist);
    const Reference ref = compute_reference(in, VerifyMode::full, true, true, 1);
    std::printf("(O, dQ, dK and dV misaligned by 4 bytes)\n");
    ++runs;
    if (!check_emulated(*bwd, *naive, p, Pass::bwd, in, ref, Options{}, 11)) ++failed;
  }
  // m_tile=80 with dK and dV misaligned: the kLocal kernel (64-row tiles) on the 320-row padded
  // workspaces, and the 16-byte-aligned-or-not postprocess; then the 80-row kernel itself with O
  // and dQ misaligned (dK, dV aligned is what selects it: not here, so only the first).
  // Cases 4 (129 rows: two 80-row tiles, three 64-row tiles, so the 64-row kernel needs more than
  // the 160 rows a pad to a multiple of 80 alone would give each (sequence, head)) and 6 (257).
  for (const int i : {4, 6}) {
    const Case c = m80_cases[i];
    const Problem p = problem(c);
    const CaseInputs in = make_inputs(p, 4321, c.dist);
    const Reference ref = compute_reference(in, VerifyMode::full, true, true, 1);
    std::printf("(O, dQ, dK and dV misaligned by 4 bytes)\n");
    ++runs;
    if (!check_emulated(*bwd, *naive, p, Pass::bwd, in, ref, Options{{"m_tile", 80}}, 11))
      ++failed;
  }
  attnbench::test::bwd_misalign() = 0;
  std::printf("%d of %d emulated runs failed\n", failed, runs);
  return failed;
}
