// Planted implementations: deliberately wrong or faulty implementations that prove the harness
// catches what it claims to catch (docs/reliability.md). They are compiled into the test
// executables only (test_planted, test_faults), never into attnbench.
//
// Most of them share one simple, correct algorithm (simple.cpp) with one bug switched on. The
// same algorithm with no bug is registered as cpu.planted_control and must pass every shape the
// planted bugs fail on, so each failure is the bug's and nothing else's.
#pragma once

#include <cstddef>
#include <string>
#include <utility>

#include "attnbench/implementation.hpp"

namespace attnbench::planted {

enum class Bug {
  none,
  causal_off_by_one,  // row i also sees key first_invisible_key(i) (one key too many)
  gqa_mapping,        // query head h reads kv head h % heads_kv instead of h / group
  lse_unwritten,      // LSE left as it was (the harness's NaN poison)
  lse_garbage,        // LSE = the row maximum (the log of the sum forgotten)
  unscaled_grads,     // dQ and dK without the softmax scale
  unwritten_tile,     // one 16 x 16 tile of O never written (batch 0, head 0, rows and cols 16..31)
  far_row,            // one row of O off by +0.5: (last batch, last head, row seq_q / 2)
  window_off_by_one,  // a sliding window one key too wide on the left (row i also sees lo - 1)
  softcap_ignored,    // the soft cap left out (forward and backward)
  softcap_no_derivative,  // the backward's dS without the soft cap's factor 1 - tanh^2 (the
                          // forward is right)
  varlen_wrong_offset,  // varlen: sequence b > 0 reads its keys and values at sequence b - 1's
                        // offset
  paged_wrong_page,     // paged: the block table ignored, logical page lp of sequence b read at
                        // physical page (b * pages_per_seq + lp) % num_pages
};

// The row far_row corrupts, for tests that check it is not among the sampled rows.
struct FarRow {
  int batch, head, row;
};
FarRow far_row_of(const Problem& p);

// Simple loops in double precision, single-threaded, no allocation beyond the workspace.
// (Varlen: the packed THD layout of problem.hpp.)
// forward:  q: [B, Sq, Hq, D], k, v: [B, Skv, Hkv, D] -> o: [B, Sq, Hq, D], lse: [B, Hq, Sq].
// backward: q, o, dout: [B, Sq, Hq, D], k, v: [B, Skv, Hkv, D], lse (unused: P is recomputed)
//           -> dq: [B, Sq, Hq, D], dk, dv: [B, Skv, Hkv, D].
std::size_t simple_workspace_bytes(const Problem& p, Pass pass);
void simple_forward(const FwdArgs& a, Bug bug);
void simple_backward(const BwdArgs& a, Bug bug);

// The simple algorithm as a CPU implementation with one bug planted.
class Simple : public Implementation {
 public:
  Simple(std::string name, Bug bug, std::string what) : name_(std::move(name)), bug_(bug), what_(std::move(what)) {}
  std::string name() const override { return name_; }
  Device device() const override { return Device::cpu; }
  std::string summary() const override { return "planted: " + what_; }
  Capabilities capabilities() const override {
    Capabilities c;
    c.backward = true;
    c.window = true;
    c.softcap = true;
    c.varlen = true;
    c.paged = true;
    return c;
  }
  std::size_t workspace_bytes(const Problem& p, Pass pass, const Options&) const override {
    return simple_workspace_bytes(p, pass);
  }
  void forward(const FwdArgs& a) const override { simple_forward(a, bug_); }
  void backward(const BwdArgs& a) const override { simple_backward(a, bug_); }

 private:
  std::string name_;
  Bug bug_;
  std::string what_;
};

// cpu.planted_race: after its last call, how many per-thread partial results of the racy row
// were lost (0: the row is right). The ground truth a test compares the harness's verdict with.
inline constexpr int kRaceThreads = 4;
int race_last_lost();

}  // namespace attnbench::planted
