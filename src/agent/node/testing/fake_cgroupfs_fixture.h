// FakeCgroupfs: a fake-cgroupfs process (fake_cgroupfs_main.cc) mounted on a
// fresh temporary directory for one test, unmounted and stopped (by its pid)
// when the object goes. Needs /dev/fuse and root; Start says why not.
// Not thread-safe.
#pragma once

#include <signal.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>

namespace ringmaster::agent::testing {

class FakeCgroupfs {
 public:
  FakeCgroupfs() = default;
  FakeCgroupfs(const FakeCgroupfs&) = delete;
  FakeCgroupfs& operator=(const FakeCgroupfs&) = delete;
  ~FakeCgroupfs() { Stop(); }

  // Mounts it; "" when it is up, else why not.
  std::string Start(const std::string& binary, const std::string& controllers = "cpu,io,memory,pids") {
    if (binary.empty()) return "not built (no libfuse3 when the build was configured)";
    if (geteuid() != 0) return "needs root (mounting FUSE)";
    if (access("/dev/fuse", R_OK | W_OK) != 0) return "no /dev/fuse";
    char tmpl[] = "/tmp/rm-fake-cgroupfs.XXXXXX";
    if (!mkdtemp(tmpl)) return "mkdtemp failed";
    dir_ = tmpl;
    mount_ = dir_ + "/cg";
    if (mkdir(mount_.c_str(), 0755) != 0) return "mkdir failed";
    pid_ = fork();
    if (pid_ == 0) {
      execl(binary.c_str(), binary.c_str(), mount_.c_str(), "--controllers", controllers.c_str(), nullptr);
      _exit(127);
    }
    for (int i = 0; i < 200; ++i) {
      if (access((mount_ + "/cgroup.controllers").c_str(), F_OK) == 0) return "";
      if (waitpid(pid_, nullptr, WNOHANG) == pid_) {
        pid_ = -1;
        return "fake-cgroupfs exited before mounting";
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
    }
    return "fake-cgroupfs did not mount in 5 s";
  }

  const std::string& root() const { return mount_; }

  void Stop() {
    if (!mount_.empty()) umount2(mount_.c_str(), MNT_DETACH);
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      waitpid(pid_, nullptr, 0);
      pid_ = -1;
    }
    if (!dir_.empty()) {
      rmdir(mount_.c_str());
      rmdir(dir_.c_str());
      dir_.clear();
      mount_.clear();
    }
  }

 private:
  std::string dir_, mount_;
  pid_t pid_ = -1;
};

}  // namespace ringmaster::agent::testing
