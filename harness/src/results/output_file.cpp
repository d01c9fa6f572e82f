// Output paths that destroy nothing, and the lock of a run's output (output_file.hpp).
#include "attnbench/output_file.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <sstream>

#include "attnbench/context.hpp"

namespace attnbench {

namespace fs = std::filesystem;

std::string resolved_output_path(const std::string& path) {
  fs::path p(path);
  // A chain of links, each relative to the folder of the link; 40 as the kernel's own limit.
  for (int hops = 0; hops < 40; ++hops) {
    std::error_code ec;
    if (!fs::is_symlink(fs::symlink_status(p, ec)) || ec) break;
    const fs::path target = fs::read_symlink(p, ec);
    if (ec) break;
    p = target.is_absolute() ? target : p.parent_path() / target;
  }
  return p.string();
}

namespace {

std::string what_kind(mode_t m) {
  if (S_ISDIR(m)) return "a directory";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISSOCK(m)) return "a socket";
  return "not a regular file";
}

// Absolute and normal, for comparing paths of which one does not exist yet.
std::string absolute_normal(const std::string& p) {
  std::error_code ec;
  const fs::path a = fs::weakly_canonical(fs::absolute(p, ec), ec);
  return ec ? fs::absolute(p).lexically_normal().string() : a.string();
}

}  // namespace

std::string output_refusal(const std::string& path, const std::vector<std::string>& inputs,
                           const std::vector<std::string>& input_names) {
  const std::string target = resolved_output_path(path);
  struct stat st {};
  const bool exists = ::stat(target.c_str(), &st) == 0;
  if (exists) {
    if (!S_ISREG(st.st_mode)) {
      return "is " + what_kind(st.st_mode) + ", not a results file: refused (a write replaces it)";
    }
    // Mode bits rather than access(2): root may write anything, but a read-only file is a file
    // someone wanted kept.
    if ((st.st_mode & (S_IWUSR | S_IWGRP | S_IWOTH)) == 0 || ::access(target.c_str(), W_OK) != 0) {
      return "is read-only: refused (make it writable, or choose another --out)";
    }
  }
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].empty()) continue;
    const std::string name = i < input_names.size() ? input_names[i] : "an input of this run";
    struct stat in {};
    bool same = false;
    if (exists && ::stat(inputs[i].c_str(), &in) == 0) {
      same = in.st_dev == st.st_dev && in.st_ino == st.st_ino;
    } else {
      same = absolute_normal(target) == absolute_normal(resolved_output_path(inputs[i]));
    }
    if (same) return "is " + name + " (" + inputs[i] + "): refused (the results would replace it)";
  }
  return {};
}

std::string lock_path_of(const std::string& path) {
  return resolved_output_path(path) + ".lock";
}

OutputLock::OutputLock(const std::string& path, const std::string& command_line)
    : lock_path_(lock_path_of(path)) {
  const fs::path dir = fs::path(lock_path_).parent_path();
  if (!dir.empty()) {
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec)
      throw std::runtime_error("cannot create folder '" + dir.string() + "': " + ec.message());
  }
  for (;;) {
    const int fd = ::open(lock_path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
      throw std::runtime_error("cannot create the lock file '" + lock_path_ +
                               "': " + std::strerror(errno));
    }
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      const int e = errno;
      std::string holder(512, '\0');
      const ssize_t n = ::pread(fd, holder.data(), holder.size(), 0);
      holder.resize(n > 0 ? static_cast<std::size_t>(n) : 0);
      while (!holder.empty() && (holder.back() == '\n' || holder.back() == '\0')) holder.pop_back();
      ::close(fd);
      if (e == EWOULDBLOCK) {
        throw OutputBusy(
            "is being written by another run: " +
            (holder.empty() ? std::string("holder not known yet (it is starting)") : holder) +
            " (lock " + lock_path_ + ")");
      }
      throw std::runtime_error("cannot lock '" + lock_path_ + "': " + std::strerror(e));
    }
    // The previous holder removes the file when it is done: if it did so between our open and
    // our flock, we hold a lock on a file no longer at the path, and must take the new one.
    struct stat a {
    }, b{};
    if (::fstat(fd, &a) == 0 && ::stat(lock_path_.c_str(), &b) == 0 && a.st_dev == b.st_dev &&
        a.st_ino == b.st_ino) {
      fd_ = fd;
      break;
    }
    ::close(fd);
  }
  std::ostringstream who;
  who << "pid " << ::getpid() << " on " <<
      [] {
        char buf[256] = {};
        return ::gethostname(buf, sizeof buf - 1) == 0 ? std::string(buf)
                                                       : std::string("unknown host");
      }()
      << ", started " << iso_date_utc();
  if (!command_line.empty()) who << ": " << command_line;
  const std::string text = who.str() + "\n";
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, text.data(), text.size(), 0) < 0) {
    // The lock holds without the holder's name: a second run is still refused.
  }
}

OutputLock::~OutputLock() {
  if (fd_ < 0) return;
  ::unlink(lock_path_.c_str());  // while still holding it: see the constructor's retry
  ::close(fd_);
}

}  // namespace attnbench
