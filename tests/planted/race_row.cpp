// cpu.planted_race: a lost-update race that corrupts one row of O (and its LSE) only sometimes.
//
// All rows come from the simple algorithm (simple.cpp). Then the last row of (batch 0, head 0),
// which sees every key, is recomputed by kRaceThreads std::threads: each takes a contiguous
// chunk of the keys and computes its partial online-softmax state (max m, sum l, acc = sum of
// exp(s - m) V) in double, then merges it into a shared state with an unsynchronised
// read-modify-write: load the current state, build the merged state, wait a little, store it.
// Two threads that load the same state lose one of their chunks; the row is then wrong, by a
// quarter of its softmax mass or so. Random jitter before each merge makes that happen in some
// calls and not in others. The states are immutable nodes behind a std::atomic pointer (plain
// load and store, no compare-exchange), so the race is a logical lost update and not undefined
// behaviour: sanitizers stay quiet and the result is well defined either way.
// race_last_lost() reports how many chunks the last call lost, counted exactly: each state
// carries the number of chunks merged into it.
// Option "force" = 1 makes threads 0 and 1 both load before either stores: a lost chunk in
// every call, for tests that need one deterministically.
// Extra memory: the simple forward's, plus 2 kRaceThreads + 1 states of head_dim + 3 doubles.
// Limits: forward only; starts threads in the call (a planted implementation may).
#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <thread>

#include "planted.hpp"

namespace attnbench::planted {
namespace {

std::atomic<int> g_last_lost{0};

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// A state: [m, l, merged, acc[0..d)], in the workspace.
std::size_t state_doubles(const Problem& p) { return static_cast<std::size_t>(p.head_dim) + 3; }

// Sleeps, not spins: the interleaving then comes from the scheduler even on a single free core
// (OpenMP threads left spinning by an earlier parallel region may hold the others). Two threads
// whose windows overlap lose a chunk; with these values (and the sleeps' timer slack) that is
// about half the calls: 6 to 14 of 20 measured on a busy 2-core machine.
constexpr int kJitterUs = 2000;  // before the read-modify-write, uniform in [0, kJitterUs]
constexpr int kWindowUs = 20;    // between its load and its store

// out = merge(a, b): the online-softmax combination of two partial states.
void merge(const double* a, const double* b, double* out, int d) {
  const double m = std::max(a[0], b[0]);
  const double wa = a[0] == kNegInf ? 0.0 : std::exp(a[0] - m);
  const double wb = b[0] == kNegInf ? 0.0 : std::exp(b[0] - m);
  out[0] = m;
  out[1] = wa * a[1] + wb * b[1];
  out[2] = a[2] + b[2];
  for (int c = 0; c < d; ++c) out[3 + c] = wa * a[3 + c] + wb * b[3 + c];
}

class Race final : public Implementation {
 public:
  std::string name() const override { return "cpu.planted_race"; }
  Device device() const override { return Device::cpu; }
  std::string summary() const override { return "planted: a lost-update race corrupts one row of O sometimes"; }
  Capabilities capabilities() const override {
    Capabilities c;
    c.options = {"force"};
    return c;
  }
  std::size_t workspace_bytes(const Problem& p, Pass, const Options&) const override {
    return simple_workspace_bytes(p, Pass::fwd) + sizeof(double) * (2 * kRaceThreads + 1) * state_doubles(p);
  }

  // q, o: [B, Sq, Hq, D]; k, v: [B, Skv, Hkv, D]; lse: [B, Hq, Sq].
  void forward(const FwdArgs& a) const override {
    simple_forward(a, Bug::none);
    const Problem& p = a.p;
    const DType t = p.dtype;
    const int d = p.head_dim, hq = p.heads_q, hkv = p.heads_kv, row = p.seq_q - 1;
    const int nv = p.first_invisible_key(row);  // every key: bottom-right causal or none
    const int chunks = std::min(kRaceThreads, nv);
    const std::size_t sd = state_doubles(p);
    double* states = reinterpret_cast<double*>(static_cast<char*>(a.workspace) + simple_workspace_bytes(p, Pass::fwd));
    double* init = states;                     // the empty state
    double* partial = states + sd;             // [chunks] one per thread
    double* merged = partial + kRaceThreads * sd;  // [chunks] what each thread publishes
    init[0] = kNegInf;
    for (std::size_t e = 1; e < sd; ++e) init[e] = 0;
    std::atomic<const double*> shared{init};
    std::atomic<int> loaded{0};
    const bool force = a.option("force", 0) != 0;
    const double scale = p.effective_scale();
    std::random_device rd;
    std::array<unsigned, kRaceThreads> jitter_seed{};
    for (auto& s : jitter_seed) s = rd();

    auto work = [&](int tid) {
      const int j0 = nv * tid / chunks, j1 = nv * (tid + 1) / chunks;
      double* st = partial + static_cast<std::size_t>(tid) * sd;
      st[0] = kNegInf;
      st[1] = 0;
      st[2] = 1;  // one chunk
      for (std::size_t e = 3; e < sd; ++e) st[e] = 0;
      for (int j = j0; j < j1; ++j) {
        double s = 0;
        for (int c = 0; c < d; ++c) {
          s += static_cast<double>(load_as_float(a.q, static_cast<std::size_t>(row * hq) * d + c, t)) *
               load_as_float(a.k, static_cast<std::size_t>(j * hkv) * d + c, t);
        }
        s *= scale;
        const double m = std::max(st[0], s);
        const double r = st[0] == kNegInf ? 0.0 : std::exp(st[0] - m), e = std::exp(s - m);
        st[0] = m;
        st[1] = r * st[1] + e;
        for (int c = 0; c < d; ++c) {
          st[3 + c] = r * st[3 + c] + e * load_as_float(a.v, static_cast<std::size_t>(j * hkv) * d + c, t);
        }
      }
      std::mt19937 rng(jitter_seed[static_cast<std::size_t>(tid)]);
      std::this_thread::sleep_for(std::chrono::microseconds(std::uniform_int_distribution<int>(0, kJitterUs)(rng)));
      // The unsynchronised read-modify-write.
      const double* cur = shared.load(std::memory_order_acquire);
      double* mine = merged + static_cast<std::size_t>(tid) * sd;
      merge(cur, st, mine, d);
      if (force && tid < 2) {
        loaded.fetch_add(1);
        while (loaded.load() < 2) std::this_thread::yield();
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(kWindowUs));
      }
      shared.store(mine, std::memory_order_release);
    };
    std::array<std::thread, kRaceThreads> threads;
    for (int tid = 0; tid < chunks; ++tid) threads[static_cast<std::size_t>(tid)] = std::thread(work, tid);
    for (int tid = 0; tid < chunks; ++tid) threads[static_cast<std::size_t>(tid)].join();

    const double* fin = shared.load();
    g_last_lost = chunks - static_cast<int>(fin[2]);
    for (int c = 0; c < d; ++c) {
      store_from_float(a.o, static_cast<std::size_t>(row * hq) * d + c, static_cast<float>(fin[3 + c] / fin[1]), t);
    }
    a.lse[row] = static_cast<float>(fin[0] + std::log(fin[1]));
  }
};

}  // namespace

int race_last_lost() { return g_last_lost.load(); }

}  // namespace attnbench::planted

ATTNBENCH_REGISTER(attnbench::planted::Race)
