// Re-measuring rows of a results file with an attnbench binary (rerun.hpp).
#include "attnbench/rerun.hpp"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <ostream>
#include <set>
#include <stdexcept>

namespace attnbench {

namespace fs = std::filesystem;

std::string exact_filter(const std::vector<std::string>& names) {
  std::string re = "^(";
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (i) re += '|';
    for (const char c : names[i]) {
      if (std::strchr(".[]{}()\\*+?^$|", c)) re += '\\';
      re += c;
    }
  }
  return re + ")(/|$)";
}

namespace {

// Runs argv with stdout to /dev/null (the rerun's table; its messages stay on stderr). The exit
// code, or -1 when it could not start.
int run_quietly(const std::vector<std::string>& argv) {
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    const int null = ::open("/dev/null", O_WRONLY);
    if (null >= 0) ::dup2(null, STDOUT_FILENO);
    ::execv(args[0], args.data());
    _exit(127);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return -1;
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

}  // namespace

ResultsFile remeasure(const std::string& binary, const ResultsFile& origin,
                      const std::vector<const ResultRow*>& rows, const std::string& tag,
                      std::ostream& log) {
  const auto cfg = origin.context.find("config");
  if (cfg == origin.context.end() || !cfg->is_object()) {
    throw std::runtime_error(origin.path + ": its context has no \"config\": it cannot be run again");
  }
  const fs::path exe = fs::absolute(binary);
  if (::access(exe.c_str(), X_OK) != 0) {
    throw std::runtime_error("--rerun: '" + binary + "' is not an executable file");
  }
  char tmpl[] = "/tmp/attnbench-rerun-XXXXXX";
  if (!::mkdtemp(tmpl)) throw std::runtime_error(std::string("--rerun: cannot create a folder in /tmp: ") + std::strerror(errno));
  const fs::path dir(tmpl);
  struct Cleanup {
    fs::path d;
    ~Cleanup() {
      std::error_code ec;
      fs::remove_all(d, ec);
    }
  } cleanup{dir};
  const fs::path config = dir / "config.json";
  const fs::path out = dir / ("rerun-" + tag + ".json");
  write_file_atomic(config.string(), cfg->dump(2) + "\n");

  std::set<std::string> cases, impls, passes;
  std::vector<std::string> names;
  int repetitions = 0;
  for (const ResultRow* r : rows) {
    cases.insert(r->case_label);
    impls.insert(r->impl);
    passes.insert(std::string(to_string(r->pass)));
    names.push_back(r->nvtx);
    if (r->time) repetitions = std::max(repetitions, r->time->repetitions);
  }
  std::vector<std::string> argv{exe.string(), "run", config.string()};
  for (const auto& c : cases) argv.insert(argv.end(), {"--case", c});
  for (const auto& i : impls) argv.insert(argv.end(), {"--impl", i});
  for (const auto& p : passes) argv.insert(argv.end(), {"--pass", p});
  argv.push_back("--benchmark_filter=" + exact_filter(names));
  if (repetitions > 0) argv.push_back("--benchmark_repetitions=" + std::to_string(repetitions));
  argv.insert(argv.end(), {"--quiet", "--out", out.string()});

  log << "rerun " << tag << ": " << binary << ", " << rows.size() << " rows ("
      << cases.size() << " cases)" << std::endl;
  const int rc = run_quietly(argv);
  if (rc < 0 || rc == 127) throw std::runtime_error("--rerun: cannot run '" + binary + "'");
  if (rc == 2) throw std::runtime_error("--rerun: '" + binary + "' refused the rerun (exit 2; its message is above)");
  if (!fs::exists(out)) {
    throw std::runtime_error("--rerun: '" + binary + "' exited " + std::to_string(rc) + " without a results file");
  }
  ResultsFile f = load_results(out.string());
  f.path = binary + " (" + tag + ")";
  return f;
}

}  // namespace attnbench
