// The results file's row model and its writer (docs/results_schema.md); the readers and the
// --resume checks are in results_reader.cpp.
#include "attnbench/results.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include "attnbench/output_file.hpp"
#include "attnbench/stats.hpp"

namespace attnbench {

TimeStats summarize_samples(const std::vector<double>& samples_ms) {
  TimeStats t;
  t.samples_ms = samples_ms;
  const std::size_t n = samples_ms.size();
  t.repetitions = static_cast<int>(n);
  if (n == 0) return t;
  t.median_ms = median(samples_ms);
  t.min_ms = *std::min_element(samples_ms.begin(), samples_ms.end());
  double sum = 0, var = 0;
  for (double x : samples_ms) sum += x;
  t.mean_ms = sum / static_cast<double>(n);
  for (double x : samples_ms) var += (x - t.mean_ms) * (x - t.mean_ms);
  t.cv = n > 1 && t.mean_ms > 0 ? std::sqrt(var / static_cast<double>(n - 1)) / t.mean_ms : 0;
  return t;
}

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

double ResultRow::max_ratio() const {
  double m = 0;
  for (const auto& o : outputs) m = std::max(m, o.ratio);
  return m;
}

std::int64_t pass_hbm_bytes(const Problem& p, Pass pass) {
  return pass == Pass::fwd && p.memory_bound() ? p.hbm_bytes_fwd() : 0;
}

std::optional<double> ResultRow::gbps() const {
  if (!time || !(time->median_ms > 0) || hbm_bytes <= 0) return std::nullopt;
  return static_cast<double>(hbm_bytes) / (time->median_ms * 1e-3) / 1e9;
}

std::optional<double> ResultRow::tflops() const {
  if (tflops_in_file) return tflops_in_file;
  if (!time || !(time->median_ms > 0) || !(flops > 0)) return std::nullopt;
  return flops / (time->median_ms * 1e-3) / 1e12;
}

std::string ResultRow::key() const {
  return case_label + "|" + impl + "|" + std::string(to_string(pass)) + "|" +
         nlohmann::json(options).dump() + "|" + device_kind();
}

std::string ResultRow::device_kind() const { return device.substr(0, device.find(':')); }

std::string ResultRow::impl_label() const {
  if (options.empty()) return impl;
  std::string s = impl + " [";
  bool first = true;
  for (const auto& [k, v] : options) {
    s += (first ? "" : ", ") + k + "=" + std::to_string(v);
    first = false;
  }
  return s + "]";
}

namespace {

// JSON has no NaN or Inf: store them as null (the reader reads null back as NaN).
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
  // Written only when set, so that dense rows keep their shape of older files.
  if (p.window_left >= 0) j["window_left"] = p.window_left;
  if (p.window_right >= 0) j["window_right"] = p.window_right;
  if (p.softcap != 0) j["softcap"] = p.softcap;
  // Varlen only: the lengths (batch, seq_q and seq_kv above are their count and maxima).
  if (p.varlen()) {
    j["seqlens_q"] = p.seqlens_q;
    j["seqlens_kv"] = p.seqlens_kv;
  }
  // Paged only: the page size, the pool, and how the table was made (an explicit one in full; a
  // generated one is rebuilt from page_order by Problem::make_block_table).
  if (p.page_size != 0) {
    j["page_size"] = p.page_size;
    j["num_pages"] = p.num_pages;
    if (p.page_order == PageOrder::table)
      j["block_table"] = p.block_table_rows();
    else
      j["page_order"] = std::string(to_string(p.page_order));
  }
  return j;
}

nlohmann::ordered_json row_to_json(const ResultRow& r) {
  nlohmann::ordered_json j;
  j["case"] = r.case_label;
  j["case_index"] = r.case_index;
  j["problem"] = problem_to_json(r.problem);
  j["options"] = nlohmann::ordered_json::object();
  for (const auto& [k, v] : r.options) j["options"][k] = v;
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
      oj["abs_bound"] = num(o.abs_bound);
      oj["naive_ok"] = o.naive_ok;
      oj["naive_nonfinite"] = o.naive_nonfinite;
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
    if (!r.time->flush.empty()) t["flush"] = r.time->flush;
    if (!r.time->samples_ms.empty()) {
      t["samples_ms"] = nlohmann::ordered_json::array();
      for (const double x : r.time->samples_ms) t["samples_ms"].push_back(num(x));
    }
    if (r.time->others_cores) t["others_cores"] = num(*r.time->others_cores);
    j["time"] = std::move(t);
  }
  j["flops"] = r.flops;
  if (auto tf = r.tflops()) j["tflops"] = num(*tf);
  if (r.hbm_bytes > 0) {  // memory-bound rows only (so other rows keep their shape)
    j["hbm_bytes"] = r.hbm_bytes;
    if (auto bw = r.gbps()) j["gbps"] = num(*bw);
  }
  if (r.memory) {
    nlohmann::ordered_json m;
    m["io_bytes"] = r.memory->io_bytes;
    m["workspace_bytes"] = r.memory->workspace_bytes;
    if (r.memory->peak_bytes) m["peak_bytes"] = *r.memory->peak_bytes;
    m["peak_method"] = r.memory->peak_method;
    j["memory"] = std::move(m);
  }
  j["nvtx"] = r.nvtx;
  if (!r.extra.empty()) j["extra"] = r.extra;
  return j;
}

nlohmann::ordered_json results_to_json(const ResultsFile& r) {
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

void write_file_atomic(const std::string& out_path, const std::string& text) {
  namespace fs = std::filesystem;
  // Never replace a device, FIFO, socket, directory or read-only file (output_file.hpp); through
  // a symlink, replace its target and keep the link.
  if (const std::string why = output_refusal(out_path); !why.empty()) {
    throw std::runtime_error("'" + out_path + "' " + why);
  }
  const std::string path = resolved_output_path(out_path);
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

void write_results(const std::string& path, const ResultsFile& r) {
  // replace: a command line or host name with invalid UTF-8 must not lose the results.
  write_file_atomic(path, results_to_json(r).dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n");
}

}  // namespace attnbench
