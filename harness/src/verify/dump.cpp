// --dump: a row's tensors as .npy files (dump.hpp).
#include "attnbench/dump.hpp"

#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <vector>

#include "attnbench/npy.hpp"

namespace attnbench {

namespace {

std::string safe_file_part(std::string s) {
  for (char& c : s) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-' &&
        c != '=' && c != '+')
      c = '_';
  }
  return s;
}

}  // namespace

void prepare_dump_dir(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec)
    throw std::runtime_error("--dump = " + dir + ": cannot create the folder: " + ec.message());
  if (!fs::is_directory(dir, ec)) throw std::runtime_error("--dump = " + dir + ": not a folder");
  // A probe file, as a dump file would be made (access(2) says yes to root on a read-only mount).
  std::string probe = (fs::path(dir) / ".attnbench-dump-probe.XXXXXX").string();
  const int fd = ::mkstemp(probe.data());
  if (fd < 0) {
    throw std::runtime_error("--dump = " + dir +
                             ": cannot create files in the folder: " + std::strerror(errno));
  }
  ::close(fd);
  ::unlink(probe.c_str());
}

void dump_row(const std::string& dir_name, const Problem& p, const CaseInputs& in,
              const Reference& ref, bool with_inputs, const std::string& impl,
              const Options& options, Pass pass, const Outputs& outs) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(dir_name) / p.label();
  fs::create_directories(dir);
  // Varlen: the packed THD shapes (problem.hpp).
  const std::vector<std::int64_t> qs =
      p.varlen() ? std::vector<std::int64_t>{p.total_q(), p.heads_q, p.head_dim}
                 : std::vector<std::int64_t>{p.batch, p.seq_q, p.heads_q, p.head_dim};
  // Paged: K and V are the pool of pages (the block table follows from the results row's problem).
  const std::vector<std::int64_t> ks =
      p.paged()    ? std::vector<std::int64_t>{p.num_pages, p.page_size, p.heads_kv, p.head_dim}
      : p.varlen() ? std::vector<std::int64_t>{p.total_kv(), p.heads_kv, p.head_dim}
                   : std::vector<std::int64_t>{p.batch, p.seq_kv, p.heads_kv, p.head_dim};
  const std::vector<std::int64_t> ls = p.varlen()
                                           ? std::vector<std::int64_t>{p.heads_q, p.total_q()}
                                           : std::vector<std::int64_t>{p.batch, p.heads_q, p.seq_q};
  if (with_inputs) {
    write_npy((dir / "Q.npy").string(), in.q.data(), p.dtype, qs);
    write_npy((dir / "K.npy").string(), in.k.data(), p.dtype, ks);
    write_npy((dir / "V.npy").string(), in.v.data(), p.dtype, ks);
    write_npy((dir / "dO.npy").string(), in.dout.data(), p.dtype, qs);
    // The float64 reference, rounded to float32, where it was computed in full.
    auto ref_out = [&](const RefOutput& r, const char* name,
                       const std::vector<std::int64_t>& shape) {
      if (r.empty() || !r.idx.empty()) return;
      std::vector<float> f(r.val.begin(), r.val.end());
      write_npy((dir / name).string(), f.data(), DType::f32, shape);
    };
    ref_out(ref.o, "ref_O.npy", qs);
    ref_out(ref.lse, "ref_LSE.npy", ls);
    ref_out(ref.dq, "ref_dQ.npy", qs);
    ref_out(ref.dk, "ref_dK.npy", ks);
    ref_out(ref.dv, "ref_dV.npy", ks);
  }
  std::string stem = impl;
  for (const auto& [k, v] : options) stem += "+" + k + "=" + std::to_string(v);
  stem = safe_file_part(stem) + "." + std::string(to_string(pass)) + ".";
  if (outs.o.numel > 0) write_npy((dir / (stem + "O.npy")).string(), outs.o.data(), p.dtype, qs);
  if (!outs.lse.empty())
    write_npy((dir / (stem + "LSE.npy")).string(), outs.lse.data(), DType::f32, ls);
  if (outs.dq.numel > 0) write_npy((dir / (stem + "dQ.npy")).string(), outs.dq.data(), p.dtype, qs);
  if (outs.dk.numel > 0) write_npy((dir / (stem + "dK.npy")).string(), outs.dk.data(), p.dtype, ks);
  if (outs.dv.numel > 0) write_npy((dir / (stem + "dV.npy")).string(), outs.dv.data(), p.dtype, ks);
}

}  // namespace attnbench
