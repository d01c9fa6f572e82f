// Files a command writes (a run's results file, and any other output): the checks that keep an
// output path from destroying anything, and the lock that keeps two runs off one file.
//
// Every output is replaced atomically (a temporary file and a rename, results.hpp), and a rename
// replaces whatever the path names. So before anything is written, an output path must be a new
// path or a regular, writable file that is none of the run's inputs; and while a run writes it,
// no other run may (the second would silently lose one run's rows).
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

namespace attnbench {

// The path a write of `path` replaces: symlinks in the last component followed (so a link to a
// results file keeps being a link and its target is replaced), a relative path kept relative.
std::string resolved_output_path(const std::string& path);

// Why `path` must not be written as an output, "" when it may. Refused:
//   - an existing path that is not a regular file: a character or block device (a link to
//     /dev/null included), a FIFO, a socket, a directory;
//   - a regular file without write permission (the mode bits, so that root is refused too);
//   - the same file as one of `inputs` ("" entries ignored): same device and inode when both
//     exist (symlinks, ./x against x, hard links), else the same resolved absolute path.
// The message starts with what the path is ("is a directory", "is the config file ...");
// `input_names[i]` names inputs[i] in it ("the config file").
std::string output_refusal(const std::string& path, const std::vector<std::string>& inputs = {},
                           const std::vector<std::string>& input_names = {});

// Another process holds the output's lock. what() names the holder.
struct OutputBusy : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// An exclusive lock on an output for the lifetime of the object: flock(2) on "<path>.lock"
// (path resolved), which holds the holder's pid, host, start time and command line. A second
// lock on the same output, from any process, throws OutputBusy naming the holder. The lock file
// is removed on release; one left by a killed process holds no lock (the kernel drops a flock
// with its process) and is taken over by the next run. Parent folders are created.
class OutputLock {
 public:
  OutputLock(const std::string& path, const std::string& command_line);
  ~OutputLock();
  OutputLock(const OutputLock&) = delete;
  OutputLock& operator=(const OutputLock&) = delete;
  const std::string& lock_path() const { return lock_path_; }

 private:
  int fd_ = -1;
  std::string lock_path_;
};

// "<path>.lock" of the resolved path: where OutputLock takes its lock.
std::string lock_path_of(const std::string& path);

}  // namespace attnbench
