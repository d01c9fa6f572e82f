#include "attnbench/results.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <stdexcept>

namespace attnbench {

const char* to_string(Status s) {
  switch (s) {
    case Status::pass: return "pass";
    case Status::fail: return "fail";
    case Status::skip: return "skip";
  }
  return "?";
}

double pass_flops(const Problem& p, Pass pass) {
  switch (pass) {
    case Pass::fwd: return p.flops_fwd();
    case Pass::bwd: return p.flops_bwd();
    case Pass::fwd_bwd: return p.flops_fwd() + p.flops_bwd();
  }
  return 0;
}

double RowResult::max_ratio() const {
  double m = 0;
  for (const auto& o : outputs) m = std::max(m, o.ratio);
  return m;
}

std::optional<double> RowResult::tflops() const {
  if (!time || !(time->median_ms > 0)) return std::nullopt;
  return flops / (time->median_ms * 1e-3) / 1e12;
}

namespace {

// JSON has no NaN or Inf: store them as null (table.cpp reads null back as NaN).
nlohmann::ordered_json num(double x) {
  if (!std::isfinite(x)) return nullptr;
  return x;
}

}  // namespace

nlohmann::ordered_json problem_to_json(const Problem& p) {
  nlohmann::ordered_json j;
  j["batch"] = p.batch;
  j["heads_q"] = p.heads_q;
  j["heads_kv"] = p.heads_kv;
  j["seq_q"] = p.seq_q;
  j["seq_kv"] = p.seq_kv;
  j["head_dim"] = p.head_dim;
  j["causal"] = p.causal;
  j["scale"] = p.effective_scale();
  j["dtype"] = std::string(to_string(p.dtype));
  return j;
}

nlohmann::ordered_json row_to_json(const RowResult& r) {
  nlohmann::ordered_json j;
  j["case"] = r.case_label;
  j["case_index"] = r.case_index;
  j["problem"] = problem_to_json(r.problem);
  j["params"] = nlohmann::ordered_json::object();
  for (const auto& [k, v] : r.params) j["params"][k] = v;
  j["impl"] = r.impl;
  j["device"] = r.device;
  j["pass"] = std::string(to_string(r.pass));
  j["status"] = to_string(r.status);
  j["reason"] = r.reason;
  if (r.verified) {
    nlohmann::ordered_json v;
    v["mode"] = to_string(r.verify_mode);
    v["baseline"] = r.baseline;
    v["outputs"] = nlohmann::ordered_json::array();
    for (const auto& o : r.outputs) {
      nlohmann::ordered_json oj;
      oj["name"] = o.name;
      oj["checked"] = o.checked;
      oj["nonfinite"] = o.nonfinite;
      oj["max_abs"] = num(o.max_abs);
      oj["rel_l2"] = num(o.rel_l2);
      oj["naive_max_abs"] = num(o.naive_max_abs);
      oj["atol"] = num(o.atol);
      oj["bound"] = num(o.bound);
      oj["ratio"] = num(o.ratio);
      oj["ok"] = o.ok;
      if (!o.why.empty()) oj["why"] = o.why;
      v["outputs"].push_back(std::move(oj));
    }
    j["verify"] = std::move(v);
  }
  if (r.time) {
    nlohmann::ordered_json t;
    t["median_ms"] = num(r.time->median_ms);
    t["min_ms"] = num(r.time->min_ms);
    t["mean_ms"] = num(r.time->mean_ms);
    t["cv"] = num(r.time->cv);
    t["repetitions"] = r.time->repetitions;
    t["iterations"] = r.time->iterations;
    t["hot"] = r.time->hot;
    j["time"] = std::move(t);
  }
  j["flops"] = r.flops;
  if (auto tf = r.tflops()) j["tflops"] = num(*tf);
  if (r.memory) {
    nlohmann::ordered_json m;
    m["io_bytes"] = r.memory->io_bytes;
    m["workspace_bytes"] = r.memory->workspace_bytes;
    if (r.memory->peak_bytes) m["peak_bytes"] = *r.memory->peak_bytes;
    m["peak_method"] = r.memory->peak_method;
    j["memory"] = std::move(m);
  }
  j["nvtx"] = r.nvtx;
  return j;
}

void measurements_from_json(const nlohmann::json& j, RowResult& r) {
  const auto number = [](const nlohmann::json& o, const char* k) {
    return o.contains(k) && o[k].is_number() ? o[k].get<double>() : std::numeric_limits<double>::quiet_NaN();
  };
  const std::string status = j.value("status", "");
  r.status = status == "pass" ? Status::pass : status == "skip" ? Status::skip : Status::fail;
  r.reason = j.value("reason", "");
  if (j.contains("verify") && j["verify"].is_object()) {
    const nlohmann::json& v = j["verify"];
    r.verified = true;
    const std::string mode = v.value("mode", "off");
    r.verify_mode = mode == "full" ? VerifyMode::full : mode == "sampled" ? VerifyMode::sampled : VerifyMode::off;
    r.baseline = v.value("baseline", "");
    if (v.contains("outputs") && v["outputs"].is_array()) {
      for (const nlohmann::json& o : v["outputs"]) {
        OutputReport rep;
        rep.name = o.value("name", "");
        rep.checked = o.value("checked", std::int64_t{0});
        rep.nonfinite = o.value("nonfinite", std::int64_t{0});
        rep.max_abs = number(o, "max_abs");
        rep.rel_l2 = number(o, "rel_l2");
        rep.naive_max_abs = number(o, "naive_max_abs");
        rep.atol = number(o, "atol");
        rep.bound = number(o, "bound");
        rep.ratio = number(o, "ratio");
        rep.ok = o.value("ok", false);
        rep.why = o.value("why", "");
        r.outputs.push_back(std::move(rep));
      }
    }
  }
  if (j.contains("time") && j["time"].is_object()) {
    const nlohmann::json& t = j["time"];
    TimeResult tr;
    tr.median_ms = number(t, "median_ms");
    tr.min_ms = number(t, "min_ms");
    tr.mean_ms = number(t, "mean_ms");
    tr.cv = number(t, "cv");
    tr.repetitions = t.value("repetitions", 1);
    tr.iterations = t.value("iterations", std::int64_t{0});
    tr.hot = t.value("hot", false);
    r.time = tr;
  }
  if (j.contains("memory") && j["memory"].is_object()) {
    const nlohmann::json& m = j["memory"];
    MemoryResult mr;
    mr.io_bytes = m.value("io_bytes", std::int64_t{0});
    mr.workspace_bytes = m.value("workspace_bytes", std::int64_t{0});
    if (m.contains("peak_bytes") && m["peak_bytes"].is_number()) mr.peak_bytes = m["peak_bytes"].get<std::int64_t>();
    mr.peak_method = m.value("peak_method", "");
    r.memory = mr;
  }
}

nlohmann::ordered_json results_to_json(const RunResults& r) {
  nlohmann::ordered_json j;
  j["schema"] = kResultsSchema;
  j["complete"] = r.complete;
  j["stop_reason"] = r.stop_reason;
  j["context"] = r.context;
  j["rows"] = nlohmann::ordered_json::array();
  int pass = 0, fail = 0, skip = 0;
  for (const auto& row : r.rows) {
    j["rows"].push_back(row_to_json(row));
    (row.status == Status::pass ? pass : row.status == Status::fail ? fail : skip)++;
  }
  j["summary"] = {{"pass", pass}, {"fail", fail}, {"skip", skip}};
  return j;
}

namespace {

[[noreturn]] void io_error(const std::string& what, const std::string& path) {
  throw std::runtime_error(what + " '" + path + "': " + std::strerror(errno));
}

}  // namespace

void write_file_atomic(const std::string& path, const std::string& text) {
  namespace fs = std::filesystem;
  const fs::path target(path);
  fs::path dir = target.parent_path();
  if (dir.empty()) dir = ".";
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw std::runtime_error("cannot create folder '" + dir.string() + "': " + ec.message());
  // mkstemp: a unique name in the same folder, so the rename stays on one file system.
  std::string name = ".";  // appended, not '+'-chained: GCC 12 false -Wrestrict
  name.append(target.filename().string()).append(".XXXXXX");
  std::string tmpl = (dir / name).string();
  const int fd = ::mkstemp(tmpl.data());
  if (fd < 0) io_error("cannot create a temporary file next to", path);
  const char* p = text.data();
  std::size_t left = text.size();
  while (left > 0) {
    const ssize_t n = ::write(fd, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int e = errno;
      ::close(fd);
      ::unlink(tmpl.c_str());
      errno = e;
      io_error("cannot write", tmpl);
    }
    p += n;
    left -= static_cast<std::size_t>(n);
  }
  // mkstemp creates 0600; results are ordinary files.
  ::fchmod(fd, 0644);
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    const int e = errno;
    ::unlink(tmpl.c_str());
    errno = e;
    io_error("cannot flush", tmpl);
  }
  if (std::rename(tmpl.c_str(), path.c_str()) != 0) {
    const int e = errno;
    ::unlink(tmpl.c_str());
    errno = e;
    io_error("cannot rename the temporary file onto", path);
  }
  // Make the rename itself durable; failure here leaves a complete file, so it is not an error.
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

void write_results(const std::string& path, const RunResults& r) {
  // replace: a command line or host name with invalid UTF-8 must not lose the results.
  write_file_atomic(path, results_to_json(r).dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n");
}

nlohmann::json read_results_json(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw std::runtime_error("cannot open '" + path + "'");
  std::stringstream ss;
  ss << f.rdbuf();
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(ss.str());
  } catch (const nlohmann::json::parse_error& e) {
    throw std::runtime_error("'" + path + "' is not JSON: " + e.what());
  }
  if (!j.is_object() || !j.contains("schema") || j["schema"] != kResultsSchema) {
    throw std::runtime_error("'" + path + "' is not an attnbench results file (schema " +
                             std::string(kResultsSchema) + ")");
  }
  return j;
}

}  // namespace attnbench
