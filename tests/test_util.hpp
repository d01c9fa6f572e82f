// Helpers shared by the test executables.
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

#include "attnbench/make_problem.hpp"

namespace attnbench::test {

using attnbench::make_problem;  // attnbench/make_problem.hpp

#ifdef ATTNBENCH_EXE
struct CliResult {
  int code = -1;
  std::string output;  // stdout and stderr
};

// Runs the attnbench binary with `args` (shell syntax) and captures its output and exit code.
inline CliResult run_cli(const std::string& args) {
  CliResult r;
  const std::string cmd = std::string(ATTNBENCH_EXE) + " " + args + " 2>&1";
  FILE* f = ::popen(cmd.c_str(), "r");
  if (!f) return r;
  std::array<char, 4096> buf{};
  std::size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), f)) > 0) r.output.append(buf.data(), n);
  const int status = ::pclose(f);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}
#endif

}  // namespace attnbench::test
