// The tensor-core kernels' logic on a machine without a GPU: cuda.flash_fwd_mma and
// cuda.flash_bwd_mma, compiled as C++ against the CPU emulator of their PTX
// (impls/cuda/mma/emulation/, fwd_wrap.cpp and bwd_wrap.cpp) and run warp by warp on odd shapes:
// sequence tails, GQA/MQA, causal with seq_q < and > seq_kv (empty rows and blocks), every
// head_dim tile and head_dims padded into one (40, 80, 96, 200), f16 and bf16, both backward
// modes, large logits and FlashAttention-3's outlier inputs.
//
// Checked as every implementation is: the harness's seeded inputs, the float64 reference
// (reference/, through compute_reference), and the project's verification rule (verify(): error
// <= k * naive error + atol, no NaN/Inf, no unwritten element) against cpu.naive_3pass, the
// naive baseline that stores S and P in the dtype as cuda.naive_3pass does. The emulated
// implementations register under their CUDA names but are called directly on host buffers, so
// this test links attn_harness and attn_impls_cpu, never attn_impls_cuda (the names would be
// registered twice).
// Exit code: the number of failed cases (0 = pass). An argument N runs case N only.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "attnbench/implementation.hpp"
#include "attnbench/tensors.hpp"
#include "attnbench/verify.hpp"

namespace {

using namespace attnbench;

constexpr std::uint64_t kSeed = 1234;

struct Case {
  int b, hq, hkv, sq, skv, d;
  bool causal;
  DType t;
  bool bwd;
  double scale = 0;
  Distribution dist = Distribution::normal;
};

// Calls impl's pass on host buffers (the emulator's and the CPU's device memory is host memory).
// For the backward, O and LSE come from the reference's forward, as check_impl does.
Outputs run(const Implementation& impl, const Problem& p, Pass pass, const CaseInputs& in,
            const Reference& ref, const Options& opts) {
  Outputs out;
  impl.prepare(p, pass, opts);
  std::vector<float> ws(impl.workspace_bytes(p, pass, opts) / 4 + 4);
  poison_nan(ws.data(), ws.size(), DType::f32);
  if (pass == Pass::fwd) {
    out.o = HostTensor(p.dtype, p.q_elems());
    out.lse.assign(static_cast<std::size_t>(p.lse_elems()), 0.f);
    poison_nan(out.o.data(), static_cast<std::size_t>(out.o.numel), p.dtype);
    poison_nan(out.lse.data(), out.lse.size(), DType::f32);
    FwdArgs a;
    a.p = p;
    a.q = in.q.data();
    a.k = in.k.data();
    a.v = in.v.data();
    a.o = out.o.data();
    a.lse = out.lse.data();
    a.workspace = ws.data();
    a.workspace_bytes = ws.size() * 4;
    a.options = &opts;
    impl.forward(a);
    return out;
  }
  out.dq = HostTensor(p.dtype, p.q_elems());
  out.dk = HostTensor(p.dtype, p.kv_elems());
  out.dv = HostTensor(p.dtype, p.kv_elems());
  for (HostTensor* t : {&out.dq, &out.dk, &out.dv})
    poison_nan(t->data(), static_cast<std::size_t>(t->numel), p.dtype);
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
  a.workspace_bytes = ws.size() * 4;
  a.options = &opts;
  impl.backward(a);
  return out;
}

// Checks one pass of impl; prints its verdict; returns false on a failure.
bool check(const Implementation& impl, const Implementation& naive, const Problem& p, Pass pass,
           const CaseInputs& in, const Reference& ref, const Options& opts) {
  const Support s = impl.supports(p, pass);
  if (!s) {
    std::printf("  %s %s: SKIP %s\n", impl.name().c_str(), std::string(to_string(pass)).c_str(),
                s.reason.c_str());
    return false;
  }
  const auto t0 = std::chrono::steady_clock::now();
  const Outputs out = run(impl, p, pass, in, ref, opts);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const Outputs base = run(naive, p, pass, in, ref, {});
  const Verdict v = verify(p, pass, out, &base, ref);
  std::string opt;
  for (const auto& [k, x] : opts) opt += " " + k + "=" + std::to_string(x);
  std::printf("  %s %s%s (%.1f s): %s\n", impl.name().c_str(), std::string(to_string(pass)).c_str(),
              opt.c_str(), secs, v.ok ? "ok" : "FAIL");
  for (const OutputReport& r : v.outputs) {
    std::printf("    %-3s max_abs %.3g  bound %.3g  naive %.3g  ratio %.2f  rel_l2 %.3g%s%s\n",
                r.name.c_str(), r.max_abs, r.bound, r.naive_max_abs, r.ratio, r.rel_l2,
                r.ok ? "" : "  FAIL: ", r.ok ? "" : r.why.c_str());
  }
  return v.ok;
}

}  // namespace

int main(int argc, char** argv) {
  const int only = argc > 1 ? std::atoi(argv[1]) : -1;
  const std::vector<Case> cases = {
      {1, 2, 1, 70, 90, 64, true, DType::bf16, true},
      {1, 2, 2, 130, 40, 128, true, DType::f16, true},
      {2, 1, 1, 33, 200, 64, false, DType::f16, true},
      {1, 1, 1, 20, 150, 256, true, DType::bf16, true},
      {1, 4, 1, 65, 129, 128, false, DType::bf16, true},
      {1, 1, 1, 256, 256, 128, true, DType::bf16, true},
      {1, 2, 1, 1, 1, 64, true, DType::bf16, true},
      {1, 1, 1, 300, 17, 256, false, DType::f16, true},
      {1, 1, 1, 300, 10, 64, true, DType::bf16, true},
      {1, 2, 2, 100, 300, 64, true, DType::f16, true},
      {2, 3, 1, 200, 333, 128, true, DType::bf16, true},
      {1, 2, 1, 129, 257, 256, true, DType::f16, true},
      // head_dims padded into a tile: the columns past head_dim are zero-filled and never stored.
      {1, 2, 1, 70, 90, 40, true, DType::bf16, true},
      {1, 1, 1, 129, 65, 80, false, DType::f16, true},
      {2, 2, 1, 33, 130, 96, true, DType::bf16, true},
      {1, 1, 1, 65, 70, 200, true, DType::bf16, true},
      {1, 2, 2, 17, 33, 8, false, DType::f16, true},
      // Large logits (scaled scores near 1e9) and outlier inputs.
      {1, 2, 1, 64, 100, 64, true, DType::bf16, true, 1e8},
      {1, 1, 1, 40, 70, 96, false, DType::bf16, true, 1e8},
      {2, 4, 2, 1, 300, 128, false, DType::bf16, true, 0, Distribution::outlier},
      {1, 2, 2, 77, 100, 80, true, DType::f16, true, 0, Distribution::outlier},
  };
  const Implementation* fwd = Registry::instance().find("cuda.flash_fwd_mma");
  const Implementation* bwd = Registry::instance().find("cuda.flash_bwd_mma");
  const Implementation* naive = Registry::instance().find("cpu.naive_3pass");
  if (!fwd || !bwd || !naive) {
    std::printf("implementations not registered\n");
    return 1;
  }
  int failures = 0, ran = 0;
  for (std::size_t ci = 0; ci < cases.size(); ++ci) {
    if (only >= 0 && static_cast<int>(ci) != only) continue;
    const Case& c = cases[ci];
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
    std::printf("case %zu: %s%s\n", ci, p.label().c_str(),
                c.dist == Distribution::outlier ? " outlier" : "");
    const CaseInputs in = make_inputs(p, kSeed + ci, c.dist);
    const Reference ref = compute_reference(in, VerifyMode::full, true, c.bwd, kSeed + ci);
    bool ok = check(*fwd, *naive, p, Pass::fwd, in, ref, {});
    ++ran;
    if (c.bwd) {
      for (int det = 0; det < 2; ++det) {
        ok = check(*bwd, *naive, p, Pass::bwd, in, ref, {{"deterministic", det}}) && ok;
      }
    }
    failures += ok ? 0 : 1;
  }
  std::printf("%d passed, %d failed\n", ran - failures, failures);
  return failures;
}
