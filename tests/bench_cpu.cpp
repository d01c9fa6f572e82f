// bench_cpu: throughput of the CPU implementations against the machine's GEMM ceiling.
//
//   bench_cpu                       forward (and backward) GFLOP/s of every CPU implementation,
//                                   f32, batch 1, 8 heads, seq 2048 and 4096, head_dim 64 and 128,
//                                   and Eigen float32 GEMM 1024^3 as the ceiling
//   bench_cpu --tile_sweep          adds cpu.flash_fwd / cpu.flash_bwd over block_r x block_c
//   (any Google Benchmark flag, e.g. --benchmark_filter=flash, --benchmark_format=json)
//
// Every implementation runs on all OpenMP threads, parallel over independent heads or tiles, so
// the ceiling is the same: each thread multiplies its own 1024^3 pair of matrices (Eigen's
// single-threaded GEMM), and the rate is the sum over threads. Rates use wall-clock time
// (UseRealTime); the CPU column is the whole process's CPU time, so on a shared machine
// GFLOP/s * Time / CPU * threads estimates the rate the run would reach with the cores to itself.
// FLOPs follow the FlashAttention convention (Problem::flops_fwd, flops_bwd = 2.5x forward),
// whatever an implementation actually computes.
#define EIGEN_DONT_PARALLELIZE  // one GEMM per thread, as the implementations do
#include <benchmark/benchmark.h>
#include <omp.h>

#if defined(__GNUC__) && !defined(__clang__)  // GCC bug 105593 in AVX-512 intrinsics
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <Eigen/Core>
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "attnbench/implementation.hpp"
#include "attnbench/tensors.hpp"

namespace {

using namespace attnbench;

void gemm_ceiling(benchmark::State& state) {
  const int n = 1024;
  const int threads = omp_get_max_threads();
  using Mat = Eigen::MatrixXf;
  std::vector<Mat> a(static_cast<std::size_t>(threads), Mat::Random(n, n));
  std::vector<Mat> b(a.size(), Mat::Random(n, n)), c(a.size(), Mat::Zero(n, n));
  for (auto _ : state) {
#pragma omp parallel num_threads(threads)
    {
      const auto t = static_cast<std::size_t>(omp_get_thread_num());
      c[t].noalias() = a[t] * b[t];
    }
    benchmark::DoNotOptimize(c[0].data());
    benchmark::ClobberMemory();
  }
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * n * n * n * threads * 1e-9,
                                                 benchmark::Counter::kIsIterationInvariantRate);
  state.counters["threads"] = threads;
}

Problem bench_problem(int seq, int d) {
  Problem p;
  p.batch = 1;
  p.heads_q = p.heads_kv = 8;
  p.seq_q = p.seq_kv = seq;
  p.head_dim = d;
  p.dtype = DType::f32;
  return p;
}

// One implementation, one pass (fwd or bwd), on seeded inputs; the backward reads O and LSE
// from cpu.flash_fwd (or the implementation's own forward).
void run_impl(benchmark::State& state, const Implementation* impl, Problem p, Pass pass, Options opts) {
  const CaseInputs in = make_inputs(p, 1);
  HostTensor o(p.dtype, p.q_elems()), dq(p.dtype, p.q_elems()), dk(p.dtype, p.kv_elems()), dv(p.dtype, p.kv_elems());
  std::vector<float> lse(static_cast<std::size_t>(p.lse_elems()));
  std::vector<std::uint8_t> ws(impl->workspace_bytes(p, pass, opts));
  FwdArgs f;
  f.p = p;
  f.q = in.q.data();
  f.k = in.k.data();
  f.v = in.v.data();
  f.o = o.data();
  f.lse = lse.data();
  f.options = &opts;
  BwdArgs b;
  b.p = p;
  b.q = in.q.data();
  b.k = in.k.data();
  b.v = in.v.data();
  b.o = o.data();
  b.lse = lse.data();
  b.dout = in.dout.data();
  b.dq = dq.data();
  b.dk = dk.data();
  b.dv = dv.data();
  b.options = &opts;
  if (pass == Pass::bwd) {
    const Capabilities c = impl->capabilities();
    const Implementation* fwd = c.forward ? impl : Registry::instance().find(c.fwd_partner);
    std::vector<std::uint8_t> fws(fwd->workspace_bytes(p, Pass::fwd, {}));
    FwdArgs ff = f;
    ff.options = nullptr;
    ff.workspace = fws.data();
    ff.workspace_bytes = fws.size();
    fwd->forward(ff);
  }
  f.workspace = b.workspace = ws.data();
  f.workspace_bytes = b.workspace_bytes = ws.size();
  for (auto _ : state) {
    if (pass == Pass::fwd) {
      impl->forward(f);
    } else {
      impl->backward(b);
    }
    benchmark::ClobberMemory();
  }
  const double flops = pass == Pass::fwd ? p.flops_fwd() : p.flops_bwd();
  state.counters["GFLOP/s"] = benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["ws_MiB"] = static_cast<double>(ws.size()) / (1 << 20);
}

std::string bench_name(const Implementation* impl, Pass pass, const Problem& p, const Options& opts) {
  std::string s = impl->name() + "/" + std::string(to_string(pass)) + "/seq" + std::to_string(p.seq_q) + "/d" +
                  std::to_string(p.head_dim);
  for (const auto& [k, v] : opts) s += "/" + k + std::to_string(v);
  return s;
}

void add(const Implementation* impl, Pass pass, const Problem& p, const Options& opts) {
  const Capabilities c = impl->capabilities();
  if (!(pass == Pass::fwd ? c.forward : c.backward) || !impl->supports(p, pass)) return;
  benchmark::RegisterBenchmark(bench_name(impl, pass, p, opts).c_str(), run_impl, impl, p, pass, opts)
      ->Unit(benchmark::kMillisecond)
      ->MeasureProcessCPUTime()
      ->UseRealTime();
}

}  // namespace

int main(int argc, char** argv) {
  bool sweep = false;
  std::vector<char*> args;
  for (int i = 0; i < argc; ++i) {
    if (std::strcmp(argv[i], "--tile_sweep") == 0) {
      sweep = true;
    } else {
      args.push_back(argv[i]);
    }
  }
  int n = static_cast<int>(args.size());

  benchmark::RegisterBenchmark("eigen_gemm_f32/1024", gemm_ceiling)
      ->Unit(benchmark::kMillisecond)
      ->MeasureProcessCPUTime()
      ->UseRealTime();
  for (int seq : {2048, 4096}) {
    for (int d : {64, 128}) {
      for (const auto* impl : Registry::instance().all()) {
        if (impl->device() != Device::cpu) continue;
        add(impl, Pass::fwd, bench_problem(seq, d), {});
        add(impl, Pass::bwd, bench_problem(seq, d), {});
      }
    }
  }
  if (sweep) {
    const Implementation* fwd = Registry::instance().find("cpu.flash_fwd");
    const Implementation* bwd = Registry::instance().find("cpu.flash_bwd");
    for (int d : {64, 128}) {
      for (int br : {32, 64, 128, 192}) {
        for (int bc : {64, 128, 256}) {
          const Options o{{"block_r", br}, {"block_c", bc}};
          if (fwd) add(fwd, Pass::fwd, bench_problem(2048, d), o);
          if (bwd) add(bwd, Pass::bwd, bench_problem(2048, d), o);
        }
      }
    }
  }
  benchmark::Initialize(&n, args.data());
  if (benchmark::ReportUnrecognizedArguments(n, args.data())) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
