// Helpers for tests that put real processes into cgroups: a forked child
// that waits to be moved before it runs its part, and waits with deadlines.
// Not thread-safe.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>

namespace ringmaster::agent::testing {

// A forked child that runs `body` (its return value is its exit code) once
// Go() is called, so the parent can place it in a cgroup first.
class Child {
 public:
  explicit Child(std::function<int()> body) {
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      close(p[1]);
      char c;
      if (read(p[0], &c, 1) != 1) _exit(125);
      _exit(body());
    }
    close(p[0]);
    go_ = p[1];
  }
  ~Child() {
    if (go_ >= 0) close(go_);
    if (pid_ > 0 && !reaped_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  pid_t pid() const { return pid_; }
  void Go() {
    (void)!write(go_, "g", 1);
    close(go_);
    go_ = -1;
  }
  // The wait status, or -1 if it did not end within `limit`.
  int Wait(std::chrono::milliseconds limit = std::chrono::seconds(10)) {
    const auto end = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < end) {
      int st = 0;
      if (waitpid(pid_, &st, WNOHANG) == pid_) {
        reaped_ = true;
        return st;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return -1;
  }

 private:
  pid_t pid_ = -1;
  int go_ = -1;
  bool reaped_ = false;
};

// Burns `ms` milliseconds of this thread's CPU time (however busy the machine).
inline void Spin(int ms) {
  timespec start{}, now{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &start);
  do {
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
  } while ((now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1'000'000 < ms);
}

// Polls `pred` every 10 ms for up to `limit`.
inline bool Eventually(const std::function<bool()>& pred, std::chrono::milliseconds limit = std::chrono::seconds(5)) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return pred();
}

inline std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// One write(2); 0 or the errno.
inline int WriteErrno(const std::string& path, const std::string& value) {
  const int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return errno;
  const ssize_t n = write(fd, value.data(), value.size());
  const int err = n == static_cast<ssize_t>(value.size()) ? 0 : errno;
  close(fd);
  return err;
}

}  // namespace ringmaster::agent::testing
