// Measuring rows of a results file again with an attnbench binary (rerun.hpp).
#include "attnbench/rerun.hpp"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <set>
#include <stdexcept>
#include <vector>

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
  return WIFEXITED(status) ? WEXITSTATUS(status)
                           : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

}  // namespace

Rerunner::Rerunner(const std::string& binary, const ResultsFile& origin) : binary_(binary) {
  const auto cfg = origin.context.find("config");
  if (cfg == origin.context.end() || !cfg->is_object()) {
    throw std::runtime_error(origin.path +
                             ": its context has no \"config\": it cannot be run again");
  }
  if (::access(binary.c_str(), X_OK) != 0) {
    throw std::runtime_error("--rerun: '" + binary + "' is not an executable file");
  }
  char tmpl[] = "/tmp/attnbench-rerun-XXXXXX";
  if (!::mkdtemp(tmpl)) {
    throw std::runtime_error(std::string("--rerun: cannot create a folder in /tmp: ") +
                             std::strerror(errno));
  }
  dir_ = tmpl;
  config_ = dir_ / "config.json";
  out_ = dir_ / "rerun.json";
  write_file_atomic(config_.string(), cfg->dump(2) + "\n");
}

Rerunner::~Rerunner() {
  std::error_code ec;
  fs::remove_all(dir_, ec);
}

std::map<std::string, ResultRow> Rerunner::measure(const std::vector<const ResultRow*>& rows,
                                                   int repetitions) {
  std::map<std::string, ResultRow> got;
  if (rows.empty()) return got;
  const std::string exe = fs::absolute(binary_).string();
  std::vector<std::string> argv{exe, "run", config_.string()};
  // The rows' cases, implementations and passes (each once) choose what the invocation runs; the
  // filter times exactly the rows (the other combinations of those run once, untimed). A row read
  // under a former name goes by the name its file wrote, which is the name its binary knows.
  std::set<std::string> cases, impls, passes;
  std::vector<std::string> names;
  for (const ResultRow* r : rows) {
    if (cases.insert(r->case_label).second) argv.insert(argv.end(), {"--case", r->case_label});
    const std::string& impl = r->impl_in_file.empty() ? r->impl : r->impl_in_file;
    if (impls.insert(impl).second) argv.insert(argv.end(), {"--impl", impl});
    const std::string pass(to_string(r->pass));
    if (passes.insert(pass).second) argv.insert(argv.end(), {"--pass", pass});
    names.push_back(r->nvtx);
  }
  argv.push_back("--benchmark_filter=" + exact_filter(names));
  argv.push_back("--benchmark_repetitions=" + std::to_string(repetitions));
  argv.insert(argv.end(), {"--verify", "off", "--quiet", "--out", out_.string()});
  std::error_code ec;
  fs::remove(out_, ec);
  const int rc = run_quietly(argv);
  ++runs_;
  if (rc < 0 || rc == 127) throw std::runtime_error("--rerun: cannot run '" + binary_ + "'");
  if (rc == 2) {
    throw std::runtime_error("--rerun: '" + binary_ + "' refused to measure " +
                             std::to_string(rows.size()) +
                             " rows again (exit 2; its message is above)");
  }
  if (!fs::exists(out_)) {
    throw std::runtime_error("--rerun: '" + binary_ + "' exited " + std::to_string(rc) +
                             " without a results file");
  }
  const ResultsFile f = load_results(out_.string());
  if (revision_.empty()) {
    const auto it = f.context.find("git_revision");
    revision_ = it != f.context.end() && it->is_string() ? it->get<std::string>() : "unknown";
  }
  std::set<std::string> wanted;
  for (const ResultRow* r : rows) wanted.insert(r->key());
  for (const ResultRow& r : f.rows)
    if (wanted.count(r.key()) && !got.count(r.key())) got.emplace(r.key(), r);
  return got;
}

}  // namespace attnbench
