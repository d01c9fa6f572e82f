// Signals during a run: SIGINT (Ctrl-C), SIGTERM (kill, a batch system's time limit) and SIGHUP
// (the terminal went away) all stop a run the same way. The first one lets the row being
// measured finish, leaves the rows not started out, and the results file is written with
// complete=false and a stop_reason naming the signal; run_config then returns 128 + the signal
// (130, 143, 129). A second signal stops at once: the row in progress is abandoned and the
// results file as it stood at its last save is written with a stop_reason that says so (from a
// text prepared at that save, by async-signal-safe calls only), then the process exits with
// 128 + the second signal.
#pragma once

#include <signal.h>

#include <string>

namespace attnbench {

// Installs the handlers for its lifetime (and restores the previous ones after).
class InterruptGuard {
 public:
  InterruptGuard();
  ~InterruptGuard();
  InterruptGuard(const InterruptGuard&) = delete;
  InterruptGuard& operator=(const InterruptGuard&) = delete;

 private:
  struct sigaction old_int_ {
  }, old_term_{}, old_hup_{};
};

// True once a signal arrived under the current guard; interrupt_signal() is its number (0 none).
bool interrupted();
int interrupt_signal();

// "SIGINT", "SIGTERM", "SIGHUP", else "signal N".
std::string signal_name(int sig);

// What a second signal writes: `text` split around its stop_reason, i.e. the results file as it
// stands with stop_reason = "" between head and tail (the handler puts its reason there), into
// out_path (through tmp_path and a rename), and the lock file to remove. Called after every save;
// clear_stop_file() after the last one (a second signal then only exits).
void set_stop_file(const std::string& out_path, const std::string& lock_path,
                   const std::string& head, const std::string& tail);
void clear_stop_file();

// While one lives, a second signal does not write the stop file (the results file is being
// written): it is written when the scope ends, and the process exits then.
class SavingScope {
 public:
  SavingScope();
  ~SavingScope();
  SavingScope(const SavingScope&) = delete;
  SavingScope& operator=(const SavingScope&) = delete;
};

}  // namespace attnbench
