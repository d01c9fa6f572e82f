// The SIGINT guard of a run (interrupt.hpp).
#include "attnbench/interrupt.hpp"

#include <csignal>

namespace attnbench {

namespace {

volatile std::sig_atomic_t g_interrupted = 0;

extern "C" void on_sigint(int) {
  g_interrupted = 1;
}

}  // namespace

SigintGuard::SigintGuard() {
  g_interrupted = 0;
  struct sigaction sa {};
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESETHAND;
  sigaction(SIGINT, &sa, &old_);
}

SigintGuard::~SigintGuard() {
  sigaction(SIGINT, &old_, nullptr);
}

bool interrupted() {
  return g_interrupted != 0;
}

}  // namespace attnbench
