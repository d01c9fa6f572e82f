// Planted CPU faults for tests/test_faults.cpp: implementations that fail in the ways a run must
// survive, each as one FAIL or SKIP row with its reason, the run going on to the next row.
//   cpu.planted_throws         forward and backward throw std::runtime_error (a failed call);
//   cpu.planted_nan            the simple algorithm (simple.cpp), then one NaN written into O
//                              and one into dQ;
//   cpu.planted_host_oom       asks for a 1 PiB workspace: the allocation fails (SKIP);
//   cpu.planted_throws_timed   correct on the first call after prepare() (the validation call),
//                              throws on every later one, i.e. while Google Benchmark times it;
//   cpu.planted_tile_limit     the simple algorithm with an option "tile" whose values above 64
//                              it refuses through supports_options() (a SKIP row); calling it
//                              with such a value anyway throws.
//   cpu.planted_zeroed_ws      asks for a zeroed workspace prefix (workspace_zeroed_bytes, the
//                              harness's contract): each call throws unless the prefix is zero,
//                              dirties it while it works and leaves it zero again;
//   cpu.planted_dirty_ws       the same, but it leaves the prefix dirty: right on the first call
//                              (the validation call), throws on the next (a timed one);
//   cpu.planted_zeroed_ws_bwd  backward only, its forward partner cpu.planted_zeroed_ws: the
//                              harness refuses its fwd_bwd rows (both passes share the workspace).
// Memory, passes and limits: as simple.cpp, except the 1 PiB request.
#include <atomic>
#include <cstring>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>

#include "planted.hpp"

namespace attnbench::planted {
namespace {

class Throws final : public Simple {
 public:
  Throws() : Simple("cpu.planted_throws", Bug::none, "throws from every call") {}
  void forward(const FwdArgs&) const override { throw std::runtime_error("planted: forward threw on purpose"); }
  void backward(const BwdArgs&) const override { throw std::runtime_error("planted: backward threw on purpose"); }
};

class WritesNan final : public Simple {
 public:
  WritesNan() : Simple("cpu.planted_nan", Bug::none, "writes one NaN into O and one into dQ") {}
  void forward(const FwdArgs& a) const override {
    simple_forward(a, Bug::none);
    store_from_float(a.o, static_cast<std::size_t>(a.p.q_elems() / 2), std::numeric_limits<float>::quiet_NaN(), a.p.dtype);
  }
  void backward(const BwdArgs& a) const override {
    simple_backward(a, Bug::none);
    store_from_float(a.dq, static_cast<std::size_t>(a.p.q_elems() / 2), std::numeric_limits<float>::quiet_NaN(), a.p.dtype);
  }
};

class HostOom final : public Simple {
 public:
  HostOom() : Simple("cpu.planted_host_oom", Bug::none, "asks for a 1 PiB workspace") {}
  std::size_t workspace_bytes(const Problem&, Pass, const Options&) const override { return std::size_t{1} << 50; }
};

class ThrowsWhenTimed final : public Simple {
 public:
  ThrowsWhenTimed() : Simple("cpu.planted_throws_timed", Bug::none, "right once, then throws (fails while timed)") {}
  void prepare(const Problem&, Pass, const Options&) const override { calls_ = 0; }
  void forward(const FwdArgs& a) const override {
    if (calls_.fetch_add(1) > 0) throw std::runtime_error("planted: timed call threw on purpose");
    simple_forward(a, Bug::none);
  }

 private:
  mutable std::atomic<int> calls_{0};
};

class TileLimit final : public Simple {
 public:
  TileLimit() : Simple("cpu.planted_tile_limit", Bug::none, "option tile <= 64, larger ones refused") {}
  Capabilities capabilities() const override {
    Capabilities c = Simple::capabilities();
    c.options = {"tile"};
    return c;
  }
  Support supports_options(const Problem&, Pass, const Options& o) const override {
    const auto it = o.find("tile");
    if (it != o.end() && it->second > 64) return Support::no("tile " + std::to_string(it->second) + " exceeds 64");
    return Support::yes();
  }
  void forward(const FwdArgs& a) const override {
    if (a.options && a.options->count("tile") && a.options->at("tile") > 64)
      throw std::logic_error("planted: called with a tile it refused");
    simple_forward(a, Bug::none);
  }
};

// The simple algorithm behind a zeroed prefix of kPrefix bytes at the start of its workspace.
class ZeroedWorkspace : public Simple {
 public:
  static constexpr std::size_t kPrefix = 192;
  ZeroedWorkspace(std::string name, bool leave_dirty, std::string what)
      : Simple(std::move(name), Bug::none, std::move(what)), leave_dirty_(leave_dirty) {}
  std::size_t workspace_bytes(const Problem& p, Pass pass, const Options&) const override {
    return kPrefix + simple_workspace_bytes(p, pass);
  }
  std::size_t workspace_zeroed_bytes(const Problem&, Pass, const Options&) const override { return kPrefix; }
  void forward(const FwdArgs& a) const override {
    auto* prefix = static_cast<unsigned char*>(a.workspace);
    for (std::size_t i = 0; i < kPrefix; ++i)
      if (prefix[i] != 0) throw std::runtime_error("planted: workspace prefix byte " + std::to_string(i) + " not zero");
    std::memset(prefix, 0xab, kPrefix);  // state while the call runs (a counter, say)
    FwdArgs rest = a;
    rest.workspace = prefix + kPrefix;
    rest.workspace_bytes = a.workspace_bytes - kPrefix;
    simple_forward(rest, Bug::none);
    if (!leave_dirty_) std::memset(prefix, 0, kPrefix);
  }
  void backward(const BwdArgs& a) const override {  // its own fwd_bwd: the prefix left alone
    BwdArgs rest = a;
    rest.workspace = static_cast<unsigned char*>(a.workspace) + kPrefix;
    rest.workspace_bytes = a.workspace_bytes - kPrefix;
    simple_backward(rest, Bug::none);
  }

 private:
  bool leave_dirty_;
};

class ZeroedWs final : public ZeroedWorkspace {
 public:
  ZeroedWs() : ZeroedWorkspace("cpu.planted_zeroed_ws", false, "needs a zeroed workspace prefix, leaves it zero") {}
};

class DirtyWs final : public ZeroedWorkspace {
 public:
  DirtyWs() : ZeroedWorkspace("cpu.planted_dirty_ws", true, "needs a zeroed workspace prefix, leaves it dirty") {}
};

class ZeroedWsBwd final : public Simple {
 public:
  ZeroedWsBwd() : Simple("cpu.planted_zeroed_ws_bwd", Bug::none, "backward only; forward partner cpu.planted_zeroed_ws") {}
  Capabilities capabilities() const override {
    Capabilities c = Simple::capabilities();
    c.forward = false;
    c.fwd_partner = "cpu.planted_zeroed_ws";
    return c;
  }
};

}  // namespace
}  // namespace attnbench::planted

ATTNBENCH_REGISTER(attnbench::planted::Throws)
ATTNBENCH_REGISTER(attnbench::planted::WritesNan)
ATTNBENCH_REGISTER(attnbench::planted::HostOom)
ATTNBENCH_REGISTER(attnbench::planted::ThrowsWhenTimed)
ATTNBENCH_REGISTER(attnbench::planted::TileLimit)
ATTNBENCH_REGISTER(attnbench::planted::ZeroedWs)
ATTNBENCH_REGISTER(attnbench::planted::DirtyWs)
ATTNBENCH_REGISTER(attnbench::planted::ZeroedWsBwd)
