// The process tasks' seccomp filter, in a forked child: user namespaces and
// io_uring are refused, clone3 says ENOSYS, ordinary forks and threads work.
#include "agent/executor/task_seccomp.h"

#include <gtest/gtest.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <thread>

namespace ringmaster::agent {
namespace {

// Runs `body` in a child under the filter; its exit status (0 = all as expected).
int UnderFilter(int (*body)()) {
  pid_t pid = fork();
  if (pid == 0) {
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) _exit(100);
    if (!InstallTaskSeccomp().empty()) _exit(101);
    _exit(body());
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 200;
}

TEST(TaskSeccomp, NoUserNamespacesAndNoIoUring) {
  EXPECT_EQ(UnderFilter([] {
              if (unshare(CLONE_NEWUSER) == 0 || errno != EPERM) return 1;
              if (syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, nullptr, nullptr, nullptr, 0) >= 0 || errno != EPERM) return 2;
              if (syscall(425 /*io_uring_setup*/, 8, nullptr) >= 0 || errno != EPERM) return 3;
              if (syscall(426 /*io_uring_enter*/, -1, 0, 0, 0, nullptr, 0) >= 0 || errno != EPERM) return 4;
              if (syscall(427 /*io_uring_register*/, -1, 0, nullptr, 0) >= 0 || errno != EPERM) return 5;
              if (syscall(435 /*clone3*/, nullptr, 0) >= 0 || errno != ENOSYS) return 6;
              return 0;
            }),
            0);
}

TEST(TaskSeccomp, ForksThreadsAndOtherUnsharesStillWork) {
  EXPECT_EQ(UnderFilter([] {
              pid_t child = fork();  // glibc: clone3 refused with ENOSYS, then clone
              if (child < 0) return 1;
              if (child == 0) _exit(7);
              int status = 0;
              if (waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status) != 7) return 2;
              bool ran = false;
              std::thread([&] { ran = true; }).join();
              if (!ran) return 3;
              if (unshare(CLONE_FILES) != 0) return 4;  // no new namespace: allowed
              return 0;
            }),
            0);
}

}  // namespace
}  // namespace ringmaster::agent
