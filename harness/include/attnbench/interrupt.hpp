// Ctrl-C during a run: the row being measured finishes, the rows not started are left out, and
// the results file is written with complete=false (run_config then returns 130).
#pragma once

#include <signal.h>

namespace attnbench {

// Installs the SIGINT handler for its lifetime (and restores the previous one after). A second
// Ctrl-C kills at once (SA_RESETHAND), for a row that does not finish.
class SigintGuard {
 public:
  SigintGuard();
  ~SigintGuard();
  SigintGuard(const SigintGuard&) = delete;
  SigintGuard& operator=(const SigintGuard&) = delete;

 private:
  struct sigaction old_ {};
};

// True once SIGINT arrived under the current guard.
bool interrupted();

}  // namespace attnbench
