#include "agent/executor/shim.h"

#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>

#include <fmt/format.h>

#include "agent/executor/task_seccomp.h"
#include "agent/node/cgroups.h"
#include "common/files.h"
#include "common/units.h"

extern char** environ;

namespace ringmaster::agent {
namespace {

// Closes (or marks close-on-exec) every descriptor from `first` up: with
// close_range where the kernel has it (5.9+), else by listing /proc/self/fd,
// else up to the descriptor limit.
void CloseFrom(int first, bool on_exec) {
  if (close_range(static_cast<unsigned>(first), ~0U, on_exec ? CLOSE_RANGE_CLOEXEC : 0) == 0) return;
  std::vector<int> fds;
  if (DIR* d = opendir("/proc/self/fd")) {
    const int own = dirfd(d);
    while (dirent* e = readdir(d)) {
      const int fd = atoi(e->d_name);
      if (fd >= first && fd != own) fds.push_back(fd);
    }
    closedir(d);
  } else {
    rlimit lim{};
    const int top = getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY
                        ? static_cast<int>(std::min<rlim_t>(lim.rlim_cur, 1 << 20))
                        : 1 << 16;
    for (int fd = first; fd < top; ++fd) fds.push_back(fd);
  }
  for (int fd : fds) on_exec ? fcntl(fd, F_SETFD, FD_CLOEXEC) : close(fd);
}

void WriteExit(const std::string& dir, int exit_code, int signal, const std::string& message,
               const nlohmann::json& usage = nullptr) {
  nlohmann::json j = {{"exit_code", exit_code}, {"signal", signal}, {"message", message}};
  if (!usage.is_null()) j["usage"] = usage;
  (void)WriteFileAtomic(dir + "/" + kExitFile, j.dump(), 0600);
}

// Runs a container runtime's cleanup (as root) to its end, within two minutes.
void RunCleanup(const std::vector<std::string>& argv, const std::string& dir) {
  if (argv.empty()) return;
  pid_t pid = fork();
  if (pid == 0) {
    int log = open((dir + "/cleanup.log").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    int devnull = open("/dev/null", O_RDONLY);
    dup2(devnull, 0);
    if (log >= 0) {
      dup2(log, 1);
      dup2(log, 2);
    }
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execvp(args[0], args.data());
    _exit(127);
  }
  if (pid < 0) return;
  for (int i = 0; i < 2400; ++i) {
    if (waitpid(pid, nullptr, WNOHANG) != 0) return;
    usleep(50'000);
  }
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
}


// output.log up to a cap, marker included: once the output would pass it,
// what fits is kept (up to a line's end where one is near), then one marker
// line, and everything later is dropped. The server caps a log at the same
// size and so keeps all of it, marker included.
class CappedLog {
 public:
  CappedLog(int fd, int64_t cap) : fd_(fd), cap_(cap), marker_(LogCutMarker(cap) + "\n") {
    struct stat st {};
    if (fstat(fd, &st) == 0) written_ = st.st_size;
  }
  void Append(const char* p, size_t n) {
    if (cut_ || n == 0) return;
    // Room for the output itself: the marker and a newline before it must fit too.
    const int64_t room = cap_ - static_cast<int64_t>(marker_.size()) - 1;
    if (cap_ <= 0 || written_ + static_cast<int64_t>(n) <= room) {
      Write(p, n);
      return;
    }
    size_t take = static_cast<size_t>(std::clamp<int64_t>(room - written_, 0, static_cast<int64_t>(n)));
    const char* nl = take > 0 ? static_cast<const char*>(memrchr(p, '\n', take)) : nullptr;
    if (nl && static_cast<size_t>(nl - p + 1) >= take / 2) take = static_cast<size_t>(nl - p + 1);
    Write(p, take);
    if (last_ != '\n') Write("\n", 1);
    Write(marker_.data(), marker_.size());
    cut_ = true;
  }

 private:
  void Write(const char* p, size_t n) {
    if (n == 0) return;
    (void)WriteAll(fd_, p, n, "output.log");  // a full disk loses output, never the task
    written_ += static_cast<int64_t>(n);
    last_ = p[n - 1];
  }

  int fd_;
  int64_t cap_;
  const std::string marker_;
  int64_t written_ = 0;
  char last_ = '\n';
  bool cut_ = false;
};

// Kills and reaps every descendant the shim still has. The shim is a child
// subreaper, so descendants whose parent died (daemons, `cmd &`, even ones
// that left the process group with setsid) were reparented to it.
void KillAndReapDescendants() {
  for (int round = 0; round < 200; ++round) {
    bool any = false;
    if (DIR* proc = opendir("/proc")) {
      while (dirent* d = readdir(proc)) {
        pid_t pid = static_cast<pid_t>(atoi(d->d_name));
        if (pid <= 0) continue;
        std::ifstream stat(std::string("/proc/") + d->d_name + "/stat");
        std::string line;
        std::getline(stat, line);
        auto rp = line.rfind(')');
        if (rp == std::string::npos) continue;
        char state = 0;
        int ppid = 0;
        if (sscanf(line.c_str() + rp + 1, " %c %d", &state, &ppid) == 2 && ppid == getpid()) {
          kill(pid, SIGKILL);
          any = true;
        }
      }
      closedir(proc);
    }
    while (waitpid(-1, nullptr, WNOHANG) > 0) {
    }
    if (!any) return;
    usleep(10'000);
  }
}

// In the task's child, still root: becomes the task's user for good. Returns
// what went wrong, or "".
// Brings up "lo" in the shim's (new) network namespace.
std::string LoopbackUp() {
  const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return fmt::format("socket: {}", std::strerror(errno));
  ifreq req{};
  std::strncpy(req.ifr_name, "lo", IFNAMSIZ - 1);
  int rc = ioctl(fd, SIOCGIFFLAGS, &req);
  if (rc == 0) {
    req.ifr_flags |= IFF_UP;
    rc = ioctl(fd, SIOCSIFFLAGS, &req);
  }
  const int err = errno;
  close(fd);
  return rc == 0 ? std::string() : fmt::format("cannot bring up the task's loopback: {}", std::strerror(err));
}

std::string DropPrivileges(const ShimSpec& spec) {
  const TaskIdentity& who = spec.identity;
  if (!who.switch_user) {
    // The agent is not root: the task runs as the agent's own user.
    if (geteuid() == 0 || getuid() == 0) return "refusing to run a task as root";
    return "";
  }
  if (who.uid == 0 || who.gid == 0) return "refusing to run a task as root";
  if (spec.max_procs > 0) {
    // Counted per uid: one user's tasks cannot exhaust the node's pid space.
    rlimit rl{static_cast<rlim_t>(spec.max_procs), static_cast<rlim_t>(spec.max_procs)};
    if (setrlimit(RLIMIT_NPROC, &rl) != 0) return fmt::format("setrlimit(RLIMIT_NPROC): {}", std::strerror(errno));
  }
  if (setgroups(who.groups.size(), who.groups.empty() ? nullptr : who.groups.data()) != 0) {
    return fmt::format("setgroups: {}", std::strerror(errno));
  }
  if (setresgid(who.gid, who.gid, who.gid) != 0) return fmt::format("setgid {}: {}", who.gid, std::strerror(errno));
  if (setresuid(who.uid, who.uid, who.uid) != 0) return fmt::format("setuid {}: {}", who.uid, std::strerror(errno));
  uid_t ru, eu, su;
  gid_t rg, eg, sg;
  if (getresuid(&ru, &eu, &su) != 0 || getresgid(&rg, &eg, &sg) != 0 || ru != who.uid || eu != who.uid ||
      su != who.uid || rg != who.gid || eg != who.gid || sg != who.gid) {
    return fmt::format("did not become {}", who.Describe());
  }
  // Dropping root must be for good: none of these may work any more.
  if (setuid(0) == 0 || seteuid(0) == 0 || setgid(0) == 0 || setegid(0) == 0) {
    return "could regain root after dropping it; refusing to run";
  }
  return "";
}

// mkdir -p as the task's user; each new directory is 0700 (the umask is 077).
std::string MakeDirsAsUser(const std::string& path, const TaskIdentity& who) {
  std::string partial;
  size_t start = 0;
  while (start <= path.size()) {
    size_t slash = path.find('/', start);
    if (slash == std::string::npos) slash = path.size();
    partial = path.substr(0, slash);
    start = slash + 1;
    if (partial.empty()) continue;
    if (mkdir(partial.c_str(), 0700) == 0 || errno == EEXIST) continue;
    return fmt::format("cannot create directory {} as {}: {}", partial, who.Describe(), std::strerror(errno));
  }
  struct stat st {};
  const int err = stat(path.c_str(), &st) != 0 ? errno : S_ISDIR(st.st_mode) ? 0 : ENOTDIR;
  if (err != 0) return fmt::format("cannot create directory {} as {}: {}", path, who.Describe(), std::strerror(err));
  return "";
}

// The task's child from fork to exec. Returns only on failure, with why.
std::string BecomeTask(const ShimSpec& spec, std::vector<char*>& argv, std::vector<char*>& envp) {
  // The task's cgroup first, while still root: its limits hold from exec on.
  if (!spec.cgroup_procs.empty()) {
    if (std::string e = JoinCgroup(spec.cgroup_procs); !e.empty()) return e;
  }
  if (spec.as_root) {
    // A container runtime (runc, docker-attach), as root: it makes the
    // container, which drops to the task's uid; it is not in the task's
    // cgroup (its memory would count). Nothing of the job's reaches it: its
    // environment is a fixed one (the container's own is in its config),
    // its program an absolute path, and the mount points it makes are 0755
    // whatever the agent's umask.
    static char path[] = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
    static char lang[] = "LANG=C.UTF-8";
    static char* clean[] = {path, lang, nullptr};
    if (argv[0] == nullptr || argv[0][0] != '/') return "a container runtime must be an absolute path";
    umask(022);
    CloseFrom(3, /*on_exec=*/true);
    environ = clean;
    execv(argv[0], argv.data());
    return fmt::format("cannot run the container runtime \"{}\": {}", spec.argv[0], std::strerror(errno));
  }
  if (!spec.netns.empty()) {
    // Its job's network, while it may still enter one: the task itself has
    // no CAP_SYS_ADMIN to leave it, nor CAP_NET_ADMIN to change its filter.
    const int fd = open(spec.netns.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0 || setns(fd, CLONE_NEWNET) != 0) {
      return fmt::format("cannot enter the job's network {}: {}", spec.netns, std::strerror(errno));
    }
    close(fd);
  }
  if (spec.own_netns && geteuid() == 0) {  // a non-root agent isolates nothing (it warns at start)
    // `network: none`: nothing but a loopback of its own, brought up.
    if (unshare(CLONE_NEWNET) != 0) return fmt::format("cannot make the task's empty network: {}", std::strerror(errno));
    if (std::string e = LoopbackUp(); !e.empty()) return e;
  }
  if (std::string e = DropPrivileges(spec); !e.empty()) return e;
  // No setuid binary or file capability can give the task back what it dropped.
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return fmt::format("PR_SET_NO_NEW_PRIVS: {}", std::strerror(errno));
  umask(077);
  for (const std::string& d : spec.make_dirs) {
    if (std::string e = MakeDirsAsUser(d, spec.identity); !e.empty()) return e;
  }
  if (chdir(spec.working_dir.c_str()) != 0) {
    return fmt::format("cannot enter working_dir {} as {}: {}", spec.working_dir, spec.identity.Describe(),
                       std::strerror(errno));
  }
  // Last, as the task's user: no user namespaces, no io_uring (task_seccomp.h).
  if (std::string e = InstallTaskSeccomp(); !e.empty()) return e;
  // Nothing of the shim's reaches the task but stdin, stdout and stderr.
  CloseFrom(3, /*on_exec=*/true);
  environ = envp.data();
  execvp(argv[0], argv.data());
  return fmt::format("cannot run \"{}\" as {}: {}", spec.argv[0], spec.identity.Describe(), std::strerror(errno));
}

}  // namespace

nlohmann::json ShimSpec::ToJson() const {
  return {{"argv", argv},
          {"env", env},
          {"working_dir", working_dir},
          {"make_dirs", make_dirs},
          {"meta", meta},
          {"identity",
           {{"uid", identity.uid},
            {"gid", identity.gid},
            {"groups", identity.groups},
            {"user", identity.user},
            {"account", identity.account},
            {"home", identity.home},
            {"switch_user", identity.switch_user}}},
          {"sandbox", sandbox},
          {"max_log_bytes", max_log_bytes},
          {"max_procs", max_procs},
          {"as_root", as_root},
          {"cleanup", cleanup},
          {"runtime", runtime},
          {"container_id", container_id},
          {"cgroup_procs", cgroup_procs},
          {"cgroup_memory_dir", cgroup_memory_dir},
          {"cgroup_cpu_dir", cgroup_cpu_dir},
          {"cgroup_version", cgroup_version},
          {"memory_limit", memory_limit},
          {"netns", netns},
          {"own_netns", own_netns}};
}

ShimSpec ShimSpec::FromJson(const nlohmann::json& j) {
  ShimSpec s;
  s.as_root = j.value("as_root", false);
  s.cleanup = j.value("cleanup", std::vector<std::string>{});
  s.runtime = j.value("runtime", "process");
  s.container_id = j.value("container_id", "");
  s.cgroup_procs = j.value("cgroup_procs", std::vector<std::string>{});
  s.cgroup_memory_dir = j.value("cgroup_memory_dir", "");
  s.cgroup_cpu_dir = j.value("cgroup_cpu_dir", "");
  s.cgroup_version = j.value("cgroup_version", 1);  // a spec of an agent that knew only v1
  s.memory_limit = j.value("memory_limit", int64_t{0});
  s.netns = j.value("netns", "");
  s.own_netns = j.value("own_netns", false);
  s.argv = j.at("argv").get<std::vector<std::string>>();
  s.env = j.at("env").get<std::map<std::string, std::string>>();
  s.working_dir = j.at("working_dir").get<std::string>();
  s.make_dirs = j.value("make_dirs", std::vector<std::string>{});
  s.meta = j.value("meta", "");
  const auto& id = j.at("identity");
  s.identity.uid = id.at("uid").get<uid_t>();
  s.identity.gid = id.at("gid").get<gid_t>();
  s.identity.groups = id.value("groups", std::vector<gid_t>{});
  s.identity.user = id.value("user", "");
  s.identity.account = id.value("account", "");
  s.identity.home = id.value("home", "");
  s.identity.switch_user = id.at("switch_user").get<bool>();
  s.sandbox = j.at("sandbox").get<std::string>();
  s.max_log_bytes = j.value("max_log_bytes", int64_t{0});
  s.max_procs = j.value("max_procs", int64_t{0});
  return s;
}

std::string LogCutMarker(int64_t max_bytes) {
  return fmt::format("[ringmaster: log cut at {}; later output dropped]", FormatBytes(max_bytes));
}

std::string BootId() {
  auto text = ReadFile("/proc/sys/kernel/random/boot_id");
  if (!text.ok()) return "";
  std::string id = *text;
  while (!id.empty() && (id.back() == '\n' || id.back() == ' ')) id.pop_back();
  return id;
}

// Single-threaded, so fork without exec is safe here.
int RunShim(const std::string& dir) {
  // Close whatever the agent leaked (listening sockets, clients' connections
  // above all), so a task never holds the server's port or another user's
  // connection.
  CloseFrom(3, /*on_exec=*/false);
  // Which boot this is: after a reboot the agent must not signal the pids
  // recorded here (they belong to someone else by then).
  (void)WriteFileAtomic(dir + "/" + kBootIdFile, BootId(), 0600);
  signal(SIGTERM, SIG_IGN);
  signal(SIGINT, SIG_IGN);
  signal(SIGHUP, SIG_IGN);
  signal(SIGPIPE, SIG_IGN);

  // Double fork: the agent waits for this first process, which exits at once;
  // the shim proper is then init's child, so it never lingers as the agent's zombie.
  pid_t shim = fork();
  if (shim < 0) {
    WriteExit(dir, -1, 0, std::string("fork: ") + std::strerror(errno));
    return 1;
  }
  if (shim > 0) _exit(WriteFileAtomic(dir + "/" + kShimPidFile, std::to_string(shim), 0600).ok() ? 0 : 1);

  prctl(PR_SET_CHILD_SUBREAPER, 1);
  ShimSpec spec;
  try {
    spec = ShimSpec::FromJson(nlohmann::json::parse(ReadFile(dir + "/" + kSpecFile).value()));
  } catch (...) {
    WriteExit(dir, -1, 0, "unreadable task spec");
    return 1;
  }
  if (access((dir + "/" + kStopFile).c_str(), F_OK) == 0) {
    WriteExit(dir, -1, 0, "stopped before it started");
    return 0;
  }
  if (spec.argv.empty()) {
    WriteExit(dir, -1, 0, "empty command");
    return 1;
  }
  std::vector<char*> argv;
  for (auto& a : spec.argv) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_s;
  for (auto& [k, v] : spec.env) env_s.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (auto& e : env_s) envp.push_back(e.data());
  envp.push_back(nullptr);

  int log = open((dir + "/" + kLogFile).c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600);
  int out_pipe[2], err_pipe[2];
  if (log < 0 || pipe2(out_pipe, O_CLOEXEC) != 0 || pipe2(err_pipe, O_CLOEXEC) != 0) {
    WriteExit(dir, -1, 0, std::string("cannot set up the task: ") + std::strerror(errno));
    return 1;
  }
  fchmod(log, 0600);
  sigset_t chld;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  sigprocmask(SIG_BLOCK, &chld, nullptr);
  int sigfd = signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
  if (sigfd < 0) {
    WriteExit(dir, -1, 0, std::string("cannot set up the task: signalfd: ") + std::strerror(errno));
    return 1;
  }

  // A stop can signal the task's group as soon as task.pid exists, while the
  // child still ignores SIGTERM as the shim does. Blocked signals stay pending
  // even when ignored, so the child blocks everything until its handlers are
  // the defaults again.
  sigset_t all, shim_mask;
  sigfillset(&all);
  sigprocmask(SIG_BLOCK, &all, &shim_mask);
  pid_t child = fork();
  if (child == 0) {
    setpgid(0, 0);
    for (int s = 1; s < NSIG; ++s) signal(s, SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    int devnull = open("/dev/null", O_RDONLY);
    dup2(devnull, 0);
    dup2(out_pipe[1], 1);
    dup2(out_pipe[1], 2);
    std::string what = BecomeTask(spec, argv, envp);
    std::string line = "ringmaster: " + what + "\n";
    (void)!write(2, line.data(), line.size());
    (void)!write(err_pipe[1], what.data(), what.size());
    _exit(127);
  }
  sigprocmask(SIG_SETMASK, &shim_mask, nullptr);
  if (child < 0) {
    WriteExit(dir, -1, 0, std::string("fork: ") + std::strerror(errno));
    return 1;
  }
  setpgid(child, child);
  close(out_pipe[1]);
  close(err_pipe[1]);
  (void)WriteFileAtomic(dir + "/" + kTaskPidFile, std::to_string(child), 0600);

  CappedLog capped(log, spec.max_log_bytes);
  std::string start_error;
  std::vector<char> buf(64 * 1024);
  auto drain = [&](int fd, bool to_log) {  // one read; false at EOF or error
    ssize_t n = read(fd, buf.data(), buf.size());
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) return true;
    if (n <= 0) return false;
    if (to_log) capped.Append(buf.data(), static_cast<size_t>(n));
    else start_error.append(buf.data(), static_cast<size_t>(n));
    return true;
  };
  int status = 0;
  bool exited = false;
  // The kernel's OOM notification for the task's memory cgroup: it fires
  // when anything below it (the task, a container in a runtime's child
  // cgroup) hits the limit and the OOM killer runs. Counted, never missed.
  OomWatch oom_watch(spec.cgroup_version, spec.cgroup_memory_dir);
  pollfd fds[4] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}, {sigfd, POLLIN, 0},
                   {oom_watch.fd(), oom_watch.events(), 0}};
  while (!exited) {
    // Once it fired (or its cgroup is gone) there is nothing more to learn from it.
    if (fds[3].fd >= 0 && fds[3].revents && (oom_watch.Check() || oom_watch.fd() < 0)) fds[3].fd = -1;
    if (poll(fds, 4, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    // Keep reading while the task runs, past the cap too, so it never blocks on a full pipe.
    if (fds[0].fd >= 0 && fds[0].revents && !drain(fds[0].fd, true)) fds[0].fd = -1;
    if (fds[1].fd >= 0 && fds[1].revents && !drain(fds[1].fd, false)) fds[1].fd = -1;
    if (fds[2].revents) {
      signalfd_siginfo si;
      while (read(sigfd, &si, sizeof si) == sizeof si) {
      }
      int st = 0;
      pid_t pid;
      while ((pid = waitpid(-1, &st, WNOHANG)) > 0) {  // orphans reparented to the shim, too
        if (pid == child) {
          status = st;
          exited = true;
        }
      }
    }
  }
  while (!exited && waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  // The main process ended: no stray descendant outlives the task.
  kill(-child, SIGKILL);
  KillAndReapDescendants();
  // What is left in the pipes; without waiting for an end of file that a
  // writer the task handed its pipe to could hold back.
  for (int fd : {out_pipe[0], err_pipe[0]}) {
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    while (true) {
      ssize_t n = read(fd, buf.data(), buf.size());
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      if (fd == out_pipe[0]) capped.Append(buf.data(), static_cast<size_t>(n));
      else start_error.append(buf.data(), static_cast<size_t>(n));
    }
  }
  close(log);
  const bool oom = oom_watch.Check();
  // The container is gone once its runtime's cleanup has run. A runtime that
  // ended by itself removed it already (`runc run` deletes its container,
  // docker-attach removes its own): the cleanup is for one that was killed.
  if (!WIFEXITED(status)) RunCleanup(spec.cleanup, dir);
  int exit_code = -1, sig = 0;
  if (WIFEXITED(status)) exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) sig = WTERMSIG(status);
  if (!start_error.empty()) exit_code = -1;
  nlohmann::json usage_json;
  std::string message = start_error;
  if (!spec.cgroup_memory_dir.empty()) {
    const CgroupUsage u = ReadCgroupUsage(spec.cgroup_version, spec.cgroup_memory_dir, spec.cgroup_cpu_dir);
    usage_json = {{"oom_kills", u.oom_kills},         {"memory_failcnt", u.memory_failcnt},
                  {"memory_max_bytes", u.memory_max_bytes}, {"cpu_periods", u.cpu_periods},
                  {"cpu_throttled", u.cpu_throttled}, {"cpu_throttled_ns", u.cpu_throttled_ns}};
    usage_json["oom_events"] = oom;
    if (message.empty()) message = OutOfMemoryReason(u, oom, exit_code, sig, spec.memory_limit);
  }
  WriteExit(dir, exit_code, sig, message, usage_json);
  return 0;
}

}  // namespace ringmaster::agent
