#include "common/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

namespace ringmaster {

namespace {

std::string CommandLine(const std::vector<std::string>& argv) {
  std::string cmd;
  for (const auto& a : argv) cmd += (cmd.empty() ? "" : " ") + a;
  return cmd;
}

}  // namespace

bool ToolOutput::exited_ok() const { return WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == 0; }

StatusOr<ToolOutput> CaptureTool(const std::vector<std::string>& argv, std::chrono::milliseconds timeout) {
  int out[2], err[2];
  if (pipe2(out, O_CLOEXEC) != 0) return Internal(fmt::format("pipe: {}", std::strerror(errno)));
  if (pipe2(err, O_CLOEXEC) != 0) {
    close(out[0]);
    close(out[1]);
    return Internal(fmt::format("pipe: {}", std::strerror(errno)));
  }
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = fork();
  if (pid < 0) {
    const int e = errno;
    for (int fd : {out[0], out[1], err[0], err[1]}) close(fd);
    return Internal(fmt::format("fork: {}", std::strerror(e)));
  }
  if (pid == 0) {
    int devnull = open("/dev/null", O_RDONLY);
    dup2(devnull, 0);
    dup2(out[1], 1);
    dup2(err[1], 2);
    execvp(args[0], args.data());
    _exit(127);
  }
  close(out[1]);
  close(err[1]);
  std::string text[2];
  pollfd fds[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  bool timed_out = false;
  for (int open_fds = 2; open_fds > 0;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      kill(pid, SIGKILL);
      break;
    }
    int n = poll(fds, 2, static_cast<int>(left.count()));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      char buf[4096];
      ssize_t r = read(fds[i].fd, buf, sizeof buf);
      if (r > 0) {
        if (text[i].size() < (1 << 20)) text[i].append(buf, static_cast<size_t>(r));
      } else if (r == 0 || errno != EINTR) {
        fds[i].fd = -1;
        --open_fds;
      }
    }
  }
  close(out[0]);
  close(err[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (timed_out) return DeadlineExceeded(fmt::format("{}: no answer in {} ms", CommandLine(argv), timeout.count()));
  return ToolOutput{status, std::move(text[0]), std::move(text[1])};
}

StatusOr<std::string> RunTool(const std::vector<std::string>& argv, std::chrono::milliseconds timeout) {
  RM_ASSIGN_OR_RETURN(ToolOutput run, CaptureTool(argv, timeout));
  const int status = run.wait_status;
  if (WIFEXITED(status) && WEXITSTATUS(status) == 127 && run.err.empty()) {
    return NotFound(fmt::format("{}: {} is not installed", CommandLine(argv), argv[0]));
  }
  if (!run.exited_ok()) {
    std::string e = run.err;
    while (!e.empty() && (e.back() == '\n' || e.back() == ' ')) e.pop_back();
    return Internal(
        fmt::format("{}: {}", CommandLine(argv), e.empty() ? fmt::format("status {}", status) : e.substr(0, 500)));
  }
  return std::move(run.out);
}

}  // namespace ringmaster
