// Signals during a run (interrupt.hpp): the first SIGINT, SIGTERM or SIGHUP is a request to stop
// after the current row; a second one stops at once, writing the results file as it stood at
// its last save with a stop_reason saying so.
//
// The handler may run on any thread (OpenMP workers included) and may only make
// async-signal-safe calls (open, write, fsync, close, rename, unlink, _exit): so the text it
// writes is prepared by the run loop after every save, in two buffers, the one complete and the
// one being prepared, switched by an index the handler reads once.
#include "attnbench/interrupt.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <csignal>
#include <cstring>
#include <filesystem>

namespace attnbench {

namespace {

volatile std::sig_atomic_t g_signal = 0;      // the first signal, 0 before it
volatile std::sig_atomic_t g_count = 0;       // signals under the guard
volatile std::sig_atomic_t g_saving = 0;      // a SavingScope is alive
volatile std::sig_atomic_t g_stop_after = 0;  // second signal during a save: its number
volatile std::sig_atomic_t g_active = -1;     // the complete stop text, or -1 for none

struct StopText {
  std::string out, tmp, lock, head, tail;
};
StopText g_text[2];

const char* name_of(int sig) {
  switch (sig) {
    case SIGINT:
      return "SIGINT";
    case SIGTERM:
      return "SIGTERM";
    case SIGHUP:
      return "SIGHUP";
  }
  return "a signal";
}

void write_all(int fd, const char* p, std::size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return;
    }
    p += w;
    n -= static_cast<std::size_t>(w);
  }
}

void write_str(int fd, const char* s) {
  write_all(fd, s, std::strlen(s));
}

// Async-signal-safe from here to _exit.
[[noreturn]] void stop_now(int sig) {
  const int b = g_active;
  if (b == 0 || b == 1) {
    const StopText& t = g_text[b];
    const int fd = ::open(t.tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd >= 0) {
      write_all(fd, t.head.data(), t.head.size());
      write_str(fd, "stopped at once by a second signal (");
      write_str(fd, name_of(sig));
      write_str(fd, " after ");
      write_str(fd, name_of(g_signal));
      write_str(fd,
                "): the row in progress was abandoned; the rows here are those saved before it");
      write_all(fd, t.tail.data(), t.tail.size());
      const bool ok = ::fsync(fd) == 0;
      ::close(fd);
      if (ok)
        ::rename(t.tmp.c_str(), t.out.c_str());
      else
        ::unlink(t.tmp.c_str());
    }
    if (!t.lock.empty()) ::unlink(t.lock.c_str());
  }
  ::_exit(128 + sig);
}

extern "C" void on_signal(int sig) {
  const int n = g_count;
  g_count = n + 1;
  if (n == 0) {
    g_signal = sig;
    return;
  }
  if (g_saving) {  // the results file is being written: stop when that is done
    g_stop_after = sig;
    return;
  }
  stop_now(sig);
}

}  // namespace

InterruptGuard::InterruptGuard() {
  g_signal = 0;
  g_count = 0;
  g_saving = 0;
  g_stop_after = 0;
  g_active = -1;
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  // Blocked while the handler runs, so that two signals at once still count as first and second.
  sigaddset(&sa.sa_mask, SIGINT);
  sigaddset(&sa.sa_mask, SIGTERM);
  sigaddset(&sa.sa_mask, SIGHUP);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGINT, &sa, &old_int_);
  sigaction(SIGTERM, &sa, &old_term_);
  sigaction(SIGHUP, &sa, &old_hup_);
}

InterruptGuard::~InterruptGuard() {
  sigaction(SIGINT, &old_int_, nullptr);
  sigaction(SIGTERM, &old_term_, nullptr);
  sigaction(SIGHUP, &old_hup_, nullptr);
  g_active = -1;
}

bool interrupted() {
  return g_signal != 0;
}

int interrupt_signal() {
  return g_signal;
}

std::string signal_name(int sig) {
  if (sig == SIGINT || sig == SIGTERM || sig == SIGHUP) return name_of(sig);
  return "signal " + std::to_string(sig);
}

void set_stop_file(const std::string& out_path, const std::string& lock_path,
                   const std::string& head, const std::string& tail) {
  // Prepared in the buffer the handler is not reading, then published.
  const int next = g_active == 0 ? 1 : 0;
  StopText& t = g_text[next];
  t.out = out_path;
  const std::filesystem::path p(out_path);
  std::string name = ".";  // appended, not '+'-chained: GCC 12 false -Wrestrict
  name.append(p.filename().string()).append(".stopped");
  t.tmp = (p.parent_path() / name).string();
  t.lock = lock_path;
  t.head = head;
  t.tail = tail;
  g_active = next;
}

void clear_stop_file() {
  g_active = -1;
}

SavingScope::SavingScope() {
  g_saving = 1;
}

SavingScope::~SavingScope() {
  g_saving = 0;
  if (const int sig = g_stop_after; sig != 0) stop_now(sig);
}

}  // namespace attnbench
