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
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "attnbench/implementation.hpp"
#include "attnbench/tensors.hpp"
#include "attnbench/verify.hpp"
// The emulator itself (emu::sched_seed): found first on this test's include path.
#include "mma/ptx.cuh"

using namespace attnbench;

namespace {

Outputs run_fwd(const Implementation& impl, const CaseInputs& in, const Options& opts = {}) {
  const Problem& p = in.p;
  Outputs out;
  out.o = HostTensor(p.dtype, p.q_elems());
  std::memset(out.o.data(), 0xFF, out.o.nbytes());  // NaN poison: unwritten elements fail
  out.lse.assign(static_cast<size_t>(p.lse_elems()), std::nanf(""));
  std::vector<unsigned char> ws(impl.workspace_bytes(p, Pass::fwd, opts));
  std::memset(ws.data(), 0xFF, ws.size());  // the kernel must initialise what it reads
  FwdArgs a;
  a.p = p;
  a.workspace = ws.data();
  a.workspace_bytes = ws.size();
  a.q = in.q.data();
  a.k = in.k.data();
  a.v = in.v.data();
  a.o = out.o.data();
  a.lse = out.lse.data();
  impl.prepare(p, Pass::fwd, {});
  impl.forward(a);
  return out;
}

Outputs run_bwd(const Implementation& impl, const CaseInputs& in, const Reference& ref,
                const Options& opts = {}) {
  const Problem& p = in.p;
  Outputs out;
  out.dq = HostTensor(p.dtype, p.q_elems());
  out.dk = HostTensor(p.dtype, p.kv_elems());
  out.dv = HostTensor(p.dtype, p.kv_elems());
  for (HostTensor* t : {&out.dq, &out.dk, &out.dv}) std::memset(t->data(), 0xFF, t->nbytes());
  std::vector<unsigned char> ws(impl.workspace_bytes(p, Pass::bwd, opts));
  std::memset(ws.data(), 0xFF, ws.size());  // the kernel must initialise what it reads
  BwdArgs a;
  a.p = p;
  a.q = in.q.data();
  a.k = in.k.data();
  a.v = in.v.data();
  a.o = ref.o_in.data();
  a.lse = ref.lse_in.data();
  a.dout = in.dout.data();
  a.dq = out.dq.data();
  a.dk = out.dk.data();
  a.dv = out.dv.data();
  a.workspace = ws.data();
  a.workspace_bytes = ws.size();
  a.options = &opts;
  impl.prepare(p, Pass::bwd, opts);
  impl.backward(a);
  return out;
}

struct Case {
  int b, hq, hkv, sq, skv, d;
  bool causal;
  DType t;
  Distribution dist;
  double scale = 0;  // 0: 1/sqrt(head_dim)
};

}  // namespace

int main() {
  const Implementation* impl = Registry::instance().find("cuda.flash_fwd_wgmma");
  const Implementation* naive = Registry::instance().find("cpu.naive_3pass");
  if (!impl || !naive) {
    std::fprintf(stderr, "implementations not registered\n");
    return 100;
  }
  const DType bf = DType::bf16, hf = DType::f16;
  const Distribution nrm = Distribution::normal, out = Distribution::outlier;
  const std::vector<Case> cases = {
      {1, 2, 2, 130, 200, 128, false, bf, nrm},   // tails in q and kv, 2 kv tiles
      {1, 2, 2, 129, 129, 128, true, bf, nrm},    // causal, diagonal tiles, m tail
      {2, 8, 2, 70, 300, 64, true, hf, nrm},      // GQA 8:2, causal seq_q < seq_kv, ring wraps
      {1, 3, 1, 200, 60, 64, true, bf, out},      // MQA, causal seq_q > seq_kv: rows see nothing
      {1, 1, 1, 1, 17, 256, false, hf, nrm},      // seq_q 1, d256 (80-key tiles)
      {1, 2, 1, 65, 170, 256, true, bf, out},     // d256 causal, 3 kv tiles
      {1, 2, 2, 17, 33, 40, false, bf, nrm},      // padded head_dim 40 -> 64
      {1, 2, 2, 33, 140, 96, true, hf, out},      // padded head_dim 96 -> 128
      {1, 1, 1, 64, 64, 80, false, bf, nrm},      // padded head_dim 80 -> 128
      {1, 2, 2, 40, 520, 128, false, hf, out},    // 5 kv tiles: stages reused twice
      {2, 4, 2, 300, 300, 128, true, bf, nrm},    // persistent: 20 tiles of varied length in a row
      {1, 2, 2, 64, 200, 128, true, bf, nrm, 1e8},  // huge logits: no overflow in ex2
      {1, 2, 2, 64, 130, 64, false, hf, nrm, 500},  // large f16 logits
  };
  int failed = 0;
  for (const Case& c : cases) {
    Problem p;
    p.batch = c.b;
    p.heads_q = c.hq;
    p.heads_kv = c.hkv;
    p.seq_q = c.sq;
    p.seq_kv = c.skv;
    p.head_dim = c.d;
    p.causal = c.causal;
    p.dtype = c.t;
    p.scale = c.scale;
    const std::string label = p.label() + (c.dist == out ? "_outlier" : "");
    if (const Support s = impl->supports(p, Pass::fwd); !s) {
      std::printf("FAIL %s: not supported: %s\n", label.c_str(), s.reason.c_str());
      ++failed;
      continue;
    }
    const auto t0 = std::chrono::steady_clock::now();
    const CaseInputs in = make_inputs(p, 1234, c.dist);
    const Reference ref = compute_reference(in, VerifyMode::full, true, false, 1);
    const Outputs base = run_fwd(*naive, in);
    // Both schedules (a block per tile; the persistent grid taking tiles from a counter), each
    // with the emulator's threads in index order and in a random order every round.
    for (const Options& opts : {Options{}, Options{{"persistent", 1}}})
    for (const uint64_t seed : {uint64_t{0}, uint64_t{7}}) {
      emu::sched_seed = seed;
      const Outputs got = run_fwd(*impl, in, opts);
      emu::sched_seed = 0;
      const Verdict v = verify(p, Pass::fwd, got, &base, ref);
      const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::printf("%s %s%s%s (%.1f s)", v.ok ? "ok  " : "FAIL", label.c_str(),
                  opts.empty() ? "" : " persistent=1", seed ? " shuffled" : "", secs);
      for (const OutputReport& r : v.outputs)
        std::printf("  %s max_abs %.3g bound %.3g", r.name.c_str(), r.max_abs, r.bound);
      std::printf("%s%s\n", v.ok ? "" : "  : ", v.failure().c_str());
      if (!v.ok) ++failed;
    }
  }
  // The backward (head_dim <= 128): the forward's odd shapes that fit, and two more.
  const Implementation* bwd = Registry::instance().find("cuda.flash_bwd_wgmma");
  if (!bwd) {
    std::fprintf(stderr, "cuda.flash_bwd_wgmma not registered\n");
    return 100;
  }
  const std::vector<Case> bwd_cases = {
      {1, 2, 2, 130, 200, 128, false, bf, nrm},  // tails, 2 key blocks, 3 query tiles (ring wraps)
      {1, 2, 2, 129, 129, 128, true, bf, nrm},   // causal diagonal, tails
      {2, 8, 2, 70, 300, 64, true, hf, nrm},     // GQA 8:2 (group loop), causal seq_q < seq_kv
      {1, 3, 1, 200, 60, 64, true, bf, out},     // MQA, causal seq_q > seq_kv: rows see nothing
      {1, 2, 2, 17, 33, 40, false, bf, nrm},     // padded head_dim 40 -> 64
      {1, 2, 2, 33, 140, 96, true, hf, out},     // padded head_dim 96 -> 128
      {1, 1, 1, 1, 17, 128, false, hf, nrm},     // seq_q 1
      {1, 2, 2, 260, 130, 64, false, bf, out},   // 3 query tiles of 128 at d64
  };
  int bwd_failed = 0;
  for (const Case& c : bwd_cases) {
    Problem p;
    p.batch = c.b;
    p.heads_q = c.hq;
    p.heads_kv = c.hkv;
    p.seq_q = c.sq;
    p.seq_kv = c.skv;
    p.head_dim = c.d;
    p.causal = c.causal;
    p.dtype = c.t;
    const std::string label = "bwd " + p.label() + (c.dist == out ? "_outlier" : "");
    if (const Support s = bwd->supports(p, Pass::bwd); !s) {
      std::printf("FAIL %s: not supported: %s\n", label.c_str(), s.reason.c_str());
      ++bwd_failed;
      continue;
    }
    const auto t0 = std::chrono::steady_clock::now();
    const CaseInputs in = make_inputs(p, 4321, c.dist);
    const Reference ref = compute_reference(in, VerifyMode::full, true, true, 1);
    const Outputs base = run_bwd(*naive, in, ref);
    for (const Options& opts : {Options{}, Options{{"deterministic", 1}}}) {
      emu::sched_seed = 11;  // a random interleaving of the emulated threads (see ptx.cuh)
      const Outputs got = run_bwd(*bwd, in, ref, opts);
      emu::sched_seed = 0;
      const Verdict v = verify(p, Pass::bwd, got, &base, ref);
      const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::printf("%s %s%s (%.1f s)", v.ok ? "ok  " : "FAIL", label.c_str(),
                  opts.empty() ? "" : " deterministic=1", secs);
      for (const OutputReport& r : v.outputs)
        std::printf("  %s max_abs %.3g bound %.3g", r.name.c_str(), r.max_abs, r.bound);
      std::printf("%s%s\n", v.ok ? "" : "  : ", v.failure().c_str());
      if (!v.ok) ++bwd_failed;
    }
  }
  std::printf("%d of %zu forward and %d of %zu backward cases failed\n", failed, 4 * cases.size(),
              bwd_failed, 2 * bwd_cases.size());
  return failed + bwd_failed;
}
