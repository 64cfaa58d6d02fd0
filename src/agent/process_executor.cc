#include "agent/process_executor.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <dirent.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/files.h"

extern char** environ;

namespace ringmaster::agent {
namespace fs = std::filesystem;
namespace {

constexpr const char* kSpecFile = "spec.json";
constexpr const char* kShimPidFile = "shim.pid";
constexpr const char* kTaskPidFile = "task.pid";
constexpr const char* kExitFile = "exit.json";
constexpr const char* kStopFile = "stop";
constexpr const char* kLogFile = "output.log";
constexpr const char* kMetricsFile = "metrics.jsonl";

pid_t ReadPid(const std::string& path) {
  auto text = ReadFile(path);
  if (!text.ok()) return 0;
  try {
    return static_cast<pid_t>(std::stol(*text));
  } catch (...) {
    return 0;
  }
}

// True if `pid` is a live (non-zombie) process whose command line mentions `dir`,
// so a recycled pid is never mistaken for our shim.
bool ShimAlive(pid_t pid, const std::string& dir) {
  if (pid <= 0) return false;
  int status;
  if (waitpid(pid, &status, WNOHANG) == pid) return false;  // our child, now reaped
  if (kill(pid, 0) != 0 && errno == ESRCH) return false;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(stat, line);
  auto rp = line.rfind(')');
  if (rp != std::string::npos && rp + 2 < line.size() && line[rp + 2] == 'Z') return false;
  std::ifstream cmd("/proc/" + std::to_string(pid) + "/cmdline");
  std::string cmdline((std::istreambuf_iterator<char>(cmd)), std::istreambuf_iterator<char>());
  return cmdline.find(dir) != std::string::npos;
}

std::optional<TaskExit> ReadExit(const std::string& dir) {
  auto text = ReadFile(dir + "/" + kExitFile);
  if (!text.ok()) return std::nullopt;
  try {
    auto j = nlohmann::json::parse(*text);
    return TaskExit{j.value("exit_code", -1), j.value("signal", 0), j.value("message", "")};
  } catch (...) {
    return TaskExit{-1, 0, "unreadable exit status"};
  }
}

void WriteExit(const std::string& dir, const TaskExit& e) {
  nlohmann::json j = {{"exit_code", e.exit_code}, {"signal", e.signal}, {"message", e.message}};
  (void)WriteFileAtomic(dir + "/" + kExitFile, j.dump());
}

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

}  // namespace

ProcessExecutor::ProcessExecutor(std::string state_dir, std::string shim_binary)
    : state_dir_(std::move(state_dir)), shim_binary_(std::move(shim_binary)) {}

std::string ProcessExecutor::TaskDir(const std::string& key) const { return state_dir_ + "/tasks/" + key; }

std::string ProcessExecutor::LogPath(const std::string& key) const { return TaskDir(key) + "/" + kLogFile; }
std::string ProcessExecutor::MetricsPath(const std::string& key) const {
  return TaskDir(key) + "/" + kMetricsFile;
}

Status ProcessExecutor::Start(const TaskLaunch& launch) {
  const std::string dir = TaskDir(launch.key);
  if (fs::exists(dir)) return AlreadyExists("task " + launch.key + " already exists on this node");
  RM_RETURN_IF_ERROR(MakeDirs(dir, 0700));
  std::string workdir = launch.working_dir;
  if (workdir.empty()) {
    workdir = dir + "/work";
    RM_RETURN_IF_ERROR(MakeDirs(workdir));
  }
  auto env = launch.env;
  env["RINGMASTER_METRICS_FILE"] = MetricsPath(launch.key);
  nlohmann::json spec = {{"argv", launch.argv}, {"env", env}, {"working_dir", workdir},
                         {"meta", launch.meta_json}};
  RM_RETURN_IF_ERROR(WriteFileAtomic(dir + "/" + kSpecFile, spec.dump(), 0600));

  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  sigset_t empty, all;
  sigemptyset(&empty);
  sigfillset(&all);
  posix_spawnattr_setsigmask(&attr, &empty);
  posix_spawnattr_setsigdefault(&attr, &all);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
  std::string arg0 = shim_binary_, arg1 = "shim";
  std::string arg2 = dir;
  char* argv[] = {arg0.data(), arg1.data(), arg2.data(), nullptr};
  pid_t pid = 0;
  int rc = posix_spawn(&pid, shim_binary_.c_str(), &actions, &attr, argv, environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) {
    std::error_code ec;
    fs::remove_all(dir, ec);
    return Internal(fmt::format("cannot start shim {}: {}", shim_binary_, std::strerror(rc)));
  }
  // The shim writes its own pid too; writing it here closes the window in
  // which a Poll would find neither file.
  return WriteFileAtomic(dir + "/" + kShimPidFile, std::to_string(pid));
}

Status ProcessExecutor::Stop(const std::string& key, std::chrono::milliseconds grace) {
  const std::string dir = TaskDir(key);
  if (!fs::exists(dir)) return NotFound("task " + key + " is not on this node");
  (void)WriteFileAtomic(dir + "/" + kStopFile, "");  // a shim that has not started the task yet won't
  std::lock_guard<std::mutex> l(mu_);
  auto [it, inserted] = stopping_.try_emplace(key, Stopping{std::chrono::steady_clock::now() + grace});
  SignalLocked(key, it->second);
  return Status::Ok();
}

void ProcessExecutor::SignalLocked(const std::string& key, Stopping& s) {
  const std::string dir = TaskDir(key);
  pid_t pgid = ReadPid(dir + "/" + kTaskPidFile);
  if (pgid <= 0 || ReadExit(dir)) return;  // not started yet, or already ended
  if (std::chrono::steady_clock::now() >= s.kill_at) {
    kill(-pgid, SIGKILL);
  } else if (!s.term_sent) {
    kill(-pgid, SIGTERM);
    s.term_sent = true;
  }
}

std::optional<TaskExit> ProcessExecutor::Poll(const std::string& key) {
  const std::string dir = TaskDir(key);
  if (auto e = ReadExit(dir)) return e;
  pid_t shim = ReadPid(dir + "/" + kShimPidFile);
  if (!ShimAlive(shim, dir)) {
    if (auto e = ReadExit(dir)) return e;  // it finished between the two reads
    pid_t pgid = ReadPid(dir + "/" + kTaskPidFile);
    if (pgid > 0) kill(-pgid, SIGKILL);  // no supervisor left: do not leave strays
    TaskExit lost{-1, 0, "the task's supervisor (shim) died"};
    WriteExit(dir, lost);
    return lost;
  }
  std::lock_guard<std::mutex> l(mu_);
  auto it = stopping_.find(key);
  if (it != stopping_.end()) SignalLocked(key, it->second);
  return std::nullopt;
}

std::map<std::string, std::string> ProcessExecutor::Recover() {
  std::map<std::string, std::string> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(state_dir_ + "/tasks", ec)) {
    if (!entry.is_directory()) continue;
    auto text = ReadFile(entry.path().string() + "/" + kSpecFile);
    if (!text.ok()) continue;
    try {
      out[entry.path().filename().string()] = nlohmann::json::parse(*text).value("meta", "");
    } catch (...) {
    }
  }
  return out;
}

void ProcessExecutor::Release(const std::string& key) {
  {
    std::lock_guard<std::mutex> l(mu_);
    stopping_.erase(key);
  }
  std::error_code ec;
  fs::remove_all(TaskDir(key), ec);
}

// ---------------------------------------------------------------------------
// The shim. Single-threaded, so fork without exec is safe here.

int RunShim(const std::string& dir) {
  // Close whatever the agent leaked (listening sockets above all), so a task
  // never holds the server's port.
  for (int fd = 3; fd < 1024; ++fd) close(fd);
  signal(SIGTERM, SIG_IGN);
  signal(SIGINT, SIG_IGN);
  signal(SIGHUP, SIG_IGN);
  signal(SIGPIPE, SIG_IGN);
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  (void)WriteFileAtomic(dir + "/" + kShimPidFile, std::to_string(getpid()));

  nlohmann::json spec;
  try {
    spec = nlohmann::json::parse(ReadFile(dir + "/" + kSpecFile).value());
  } catch (...) {
    WriteExit(dir, {-1, 0, "unreadable task spec"});
    return 1;
  }
  if (fs::exists(dir + "/" + kStopFile)) {
    WriteExit(dir, {-1, 0, "stopped before it started"});
    return 0;
  }
  auto argv_s = spec.value("argv", std::vector<std::string>{});
  auto env_m = spec.value("env", std::map<std::string, std::string>{});
  std::string workdir = spec.value("working_dir", dir);
  if (argv_s.empty()) {
    WriteExit(dir, {-1, 0, "empty command"});
    return 1;
  }
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_s;
  for (auto& [k, v] : env_m) env_s.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (auto& e : env_s) envp.push_back(e.data());
  envp.push_back(nullptr);

  int log = open((dir + "/" + kLogFile).c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  int err_pipe[2];
  if (log < 0 || pipe2(err_pipe, O_CLOEXEC) != 0) {
    WriteExit(dir, {-1, 0, std::string("cannot set up the task: ") + std::strerror(errno)});
    return 1;
  }
  pid_t child = fork();
  if (child == 0) {
    setpgid(0, 0);
    for (int s = 1; s < NSIG; ++s) signal(s, SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    int devnull = open("/dev/null", O_RDONLY);
    dup2(devnull, 0);
    dup2(log, 1);
    dup2(log, 2);
    std::string what;
    if (chdir(workdir.c_str()) != 0) {
      what = fmt::format("cannot enter working_dir {}: {}", workdir, std::strerror(errno));
    } else {
      environ = envp.data();
      execvp(argv[0], argv.data());
      what = fmt::format("cannot run \"{}\": {}", argv_s[0], std::strerror(errno));
    }
    std::string line = "ringmaster: " + what + "\n";
    (void)!write(2, line.data(), line.size());
    (void)!write(err_pipe[1], what.data(), what.size());
    _exit(127);
  }
  if (child < 0) {
    WriteExit(dir, {-1, 0, std::string("fork: ") + std::strerror(errno)});
    return 1;
  }
  setpgid(child, child);
  close(err_pipe[1]);
  (void)WriteFileAtomic(dir + "/" + kTaskPidFile, std::to_string(child));
  std::string start_error;
  char buf[512];
  ssize_t n;
  while ((n = read(err_pipe[0], buf, sizeof buf)) > 0) start_error.append(buf, static_cast<size_t>(n));
  close(err_pipe[0]);

  int status = 0;
  while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  // The main process ended: no stray descendant outlives the task.
  kill(-child, SIGKILL);
  KillAndReapDescendants();
  TaskExit e;
  e.message = start_error;
  if (WIFEXITED(status)) e.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) e.signal = WTERMSIG(status);
  if (!start_error.empty()) e.exit_code = -1;
  WriteExit(dir, e);
  return 0;
}

}  // namespace ringmaster::agent
