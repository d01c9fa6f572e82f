// The emulator tests' calls (tests/mma_emulation, tests/hopper_emulation): an implementation
// compiled against a CPU emulator, or a CPU implementation, run on host buffers (their "device"
// memory is host memory) with poisoned outputs and workspace, and held to the project's rule
// against a naive baseline.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "attnbench/implementation.hpp"
#include "attnbench/tensors.hpp"
#include "attnbench/verify.hpp"

namespace attnbench::test {

// The cases an emulator test's arguments name: N (case N) or N-M (cases N to M); none: all.
class CaseSelection {
 public:
  CaseSelection(int argc, char** argv) {
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      const std::size_t dash = a.find('-');
      const int lo = std::atoi(a.substr(0, dash).c_str());
      ranges_.emplace_back(lo, dash == std::string::npos ? lo : std::atoi(a.substr(dash + 1).c_str()));
    }
  }
  bool operator()(int ci) const {
    if (ranges_.empty()) return true;
    for (const auto& [lo, hi] : ranges_)
      if (ci >= lo && ci <= hi) return true;
    return false;
  }

 private:
  std::vector<std::pair<int, int>> ranges_;
};

// Bytes by which run_on_host's backward misaligns O, dQ, dK and dV (0: as allocated). A kernel
// that reads O or writes dQ, dK or dV 16 bytes at a time (or by TMA) must check the alignment and
// fall back (dO, Q, K and V go through TMA, which needs 16-byte aligned tensors anyway).
inline std::size_t& bwd_misalign() {
  static std::size_t bytes = 0;
  return bytes;
}

// How many times run_on_host's forward runs on one workspace, its outputs poisoned again before
// each call (the last call's are checked): 2 shows whether a call leaves the workspace's zeroed
// prefix (Implementation::workspace_zeroed_bytes) as the next call needs it.
inline int& fwd_calls() {
  static int calls = 1;
  return calls;
}

// Calls impl's pass on host buffers (the emulator's and the CPU's device memory is host memory).
// For the backward, O and LSE come from the reference's forward, as check_impl does.
inline Outputs run_on_host(const Implementation& impl, const Problem& p, Pass pass,
                           const CaseInputs& in, const Reference& ref, const Options& opts) {
  Outputs out;
  impl.prepare(p, pass, opts);
  const SequenceMetadata meta = sequence_metadata(p);  // varlen/paged: host "device" copies
  auto meta_at = [&](std::int64_t off) { return off < 0 ? nullptr : meta.data.data() + off; };
  std::vector<float> ws(impl.workspace_bytes(p, pass, opts) / 4 + 4);
  poison_nan(ws.data(), ws.size(), DType::f32);
  // ... except the prefix the implementation asks to find zeroed, as the harness zeroes it.
  std::memset(ws.data(), 0, std::min(ws.size() * 4, impl.workspace_zeroed_bytes(p, pass, opts)));
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
    a.cu_seqlens_q = meta_at(meta.cu_seqlens_q);
    a.cu_seqlens_kv = meta_at(meta.cu_seqlens_kv);
    a.seqlens_kv = meta_at(meta.seqlens_kv);
    a.block_table = meta_at(meta.block_table);
    for (int call = 0; call < fwd_calls(); ++call) {
      poison_nan(out.o.data(), static_cast<std::size_t>(out.o.numel), p.dtype);
      poison_nan(out.lse.data(), out.lse.size(), DType::f32);
      impl.forward(a);
    }
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
  a.cu_seqlens_q = meta_at(meta.cu_seqlens_q);
  a.cu_seqlens_kv = meta_at(meta.cu_seqlens_kv);
  const std::size_t mis = bwd_misalign();
  std::vector<std::uint8_t> o_buf, dq_buf, dk_buf, dv_buf;  // 16-byte aligned starts + mis
  // A copy of t in buf, starting mis bytes past a 16-byte boundary.
  auto shifted = [&](std::vector<std::uint8_t>& buf, const auto& t) {
    buf.assign(t.nbytes() + 16 + mis, 0);
    const auto at = reinterpret_cast<std::uintptr_t>(buf.data());
    std::uint8_t* start = buf.data() + (16 - at % 16) % 16 + mis;
    std::memcpy(start, t.data(), t.nbytes());
    return start;
  };
  if (mis != 0) {
    a.o = shifted(o_buf, ref.o_in);
    a.dq = shifted(dq_buf, out.dq);  // the poison
    a.dk = shifted(dk_buf, out.dk);
    a.dv = shifted(dv_buf, out.dv);
  }
  impl.backward(a);
  if (mis != 0) {
    std::memcpy(out.dq.data(), a.dq, out.dq.nbytes());
    std::memcpy(out.dk.data(), a.dk, out.dk.nbytes());
    std::memcpy(out.dv.data(), a.dv, out.dv.nbytes());
  }
  return out;
}

// Checks one pass of impl; prints its verdict; returns false on a failure.
inline bool check_on_host(const Implementation& impl, const Implementation& naive, const Problem& p,
                          Pass pass, const CaseInputs& in, const Reference& ref,
                          const Options& opts) {
  const Support s = impl.supports(p, pass);
  if (!s) {
    std::printf("  %s %s: SKIP %s\n", impl.name().c_str(), std::string(to_string(pass)).c_str(),
                s.reason.c_str());
    return false;
  }
  const auto t0 = std::chrono::steady_clock::now();
  const Outputs out = run_on_host(impl, p, pass, in, ref, opts);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const Outputs base = run_on_host(naive, p, pass, in, ref, {});
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

}  // namespace attnbench::test
