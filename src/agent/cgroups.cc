#include "agent/cgroups.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include "common/files.h"
#include "common/units.h"

namespace ringmaster::agent {
namespace {

constexpr int64_t kCfsPeriodUs = 100'000;

Status WriteValue(const std::string& file, const std::string& value) {
  int fd = open(file.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return Internal(fmt::format("open {}: {}", file, std::strerror(errno)));
  ssize_t n = write(fd, value.data(), value.size());
  const int err = errno;
  close(fd);
  if (n != static_cast<ssize_t>(value.size())) {
    return Internal(fmt::format("write {} to {}: {}", value, file, std::strerror(err)));
  }
  return Status::Ok();
}

int64_t ReadInt(const std::string& file) {
  std::ifstream in(file);
  int64_t v = 0;
  in >> v;
  return in ? v : 0;
}

// A "key value" line of a stat file such as cpu.stat or memory.oom_control.
int64_t ReadStat(const std::string& file, const std::string& key) {
  std::ifstream in(file);
  std::string k;
  int64_t v = 0;
  while (in >> k >> v) {
    if (k == key) return v;
  }
  return 0;
}

std::vector<std::string> SubDirs(const std::string& dir) {
  std::vector<std::string> out;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      if (e->d_type == DT_DIR && strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) {
        out.push_back(dir + "/" + e->d_name);
      }
    }
    closedir(d);
  }
  return out;
}

// Kills every process in `dir` and below, then removes the directories,
// deepest first; a cgroup whose last process is still exiting refuses
// rmdir (EBUSY) for a moment.
void KillAndRemove(const std::string& dir) {
  for (const std::string& sub : SubDirs(dir)) KillAndRemove(sub);
  for (int i = 0; i < 100; ++i) {
    std::ifstream procs(dir + "/cgroup.procs");
    pid_t pid;
    while (procs >> pid) kill(pid, SIGKILL);
    if (rmdir(dir.c_str()) == 0 || errno == ENOENT) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace

StatusOr<Cgroups> Cgroups::Detect(const std::string& instance, const std::string& mount_root) {
  std::vector<std::string> controllers = {"memory", "cpu", "pids", "devices"};
  for (const std::string& c : controllers) {
    const std::string dir = mount_root + "/" + c;
    if (access((dir + "/cgroup.procs").c_str(), W_OK) != 0) {
      return FailedPrecondition(fmt::format("no writable cgroup v1 {} hierarchy at {} ({}); task limits need root "
                                            "on a host with cgroup v1", c, dir, std::strerror(errno)));
    }
  }
  // CPU time: its own hierarchy here, co-mounted with cpu elsewhere (the same directory then).
  if (access((mount_root + "/cpuacct/cgroup.procs").c_str(), W_OK) == 0) controllers.push_back("cpuacct");
  // Empty subtrees of gone agents (rmdir refuses any that holds a cgroup).
  for (const std::string& c : controllers) {
    for (const std::string& dir : SubDirs(mount_root + "/" + c + "/ringmaster")) rmdir(dir.c_str());
  }
  Cgroups g;
  g.controllers_ = std::move(controllers);
  g.mount_root_ = mount_root;
  g.base_ = "/ringmaster/" + instance;
  return g;
}

std::string Cgroups::PathOf(const std::string& key) const { return base_ + "/" + key; }

std::string Cgroups::DirOf(const std::string& controller, const std::string& key) const {
  return mount_root_ + "/" + controller + PathOf(key);
}

std::vector<std::string> Cgroups::ProcsFiles(const std::string& key) const {
  std::vector<std::string> out;
  for (const std::string& c : Controllers()) out.push_back(DirOf(c, key) + "/cgroup.procs");
  return out;
}

Status Cgroups::Create(const std::string& key, const TaskLimits& limits) const {
  for (const std::string& c : Controllers()) {
    const std::string dir = DirOf(c, key);
    KillAndRemove(dir);  // an earlier attempt's, left by a crash
    RM_RETURN_IF_ERROR(MakeDirs(dir, 0755).Annotate("cgroup"));
  }
  // Limits hold for the cgroups a runtime makes below this one only with
  // hierarchical accounting (the default on recent kernels; set before any child exists).
  (void)WriteValue(DirOf("memory", key) + "/memory.use_hierarchy", "1");
  if (limits.memory_bytes > 0) {
    RM_RETURN_IF_ERROR(WriteValue(DirOf("memory", key) + "/memory.limit_in_bytes", std::to_string(limits.memory_bytes)));
    // Swap would let a task run past its limit, only slower: none for tasks.
    (void)WriteValue(DirOf("memory", key) + "/memory.swappiness", "0");
  }
  if (limits.cpu_milli > 0) {
    RM_RETURN_IF_ERROR(WriteValue(DirOf("cpu", key) + "/cpu.cfs_period_us", std::to_string(kCfsPeriodUs)));
    const int64_t quota = std::max<int64_t>(1000, limits.cpu_milli * kCfsPeriodUs / 1000);
    RM_RETURN_IF_ERROR(WriteValue(DirOf("cpu", key) + "/cpu.cfs_quota_us", std::to_string(quota)));
  }
  if (limits.pids > 0) {
    RM_RETURN_IF_ERROR(WriteValue(DirOf("pids", key) + "/pids.max", std::to_string(limits.pids)));
  }
  for (const auto& [major, minor] : limits.deny_devices) {
    RM_RETURN_IF_ERROR(WriteValue(DirOf("devices", key) + "/devices.deny", fmt::format("c {}:{} rwm", major, minor)));
  }
  return Status::Ok();
}

CgroupUsage Cgroups::Usage(const std::string& key) const { return ReadCgroupUsage(DirOf("memory", key), DirOf("cpu", key)); }

std::optional<LiveUsage> Cgroups::Live(const std::string& key) const {
  LiveUsage u;
  const std::string mem = DirOf("memory", key);
  int64_t usage = 0;
  {
    std::ifstream in(mem + "/memory.usage_in_bytes");
    if (!(in >> usage)) return std::nullopt;
  }
  u.memory_bytes = std::max<int64_t>(0, usage - ReadStat(mem + "/memory.stat", "total_inactive_file"));
  u.oom_kills = ReadStat(mem + "/memory.oom_control", "oom_kill");
  u.pids = ReadInt(DirOf("pids", key) + "/pids.current");
  if (std::find(controllers_.begin(), controllers_.end(), "cpuacct") != controllers_.end()) {
    std::ifstream in(DirOf("cpuacct", key) + "/cpuacct.usage");
    if (!(in >> u.cpu_ns)) u.cpu_ns = -1;  // a task adopted from an agent without cpuacct
  }
  return u;
}

CgroupUsage ReadCgroupUsage(const std::string& mem, const std::string& cpu) {
  CgroupUsage u;
  u.oom_kills = ReadStat(mem + "/memory.oom_control", "oom_kill");
  u.memory_failcnt = ReadInt(mem + "/memory.failcnt");
  u.memory_max_bytes = ReadInt(mem + "/memory.max_usage_in_bytes");
  u.cpu_periods = ReadStat(cpu + "/cpu.stat", "nr_periods");
  u.cpu_throttled = ReadStat(cpu + "/cpu.stat", "nr_throttled");
  u.cpu_throttled_ns = ReadStat(cpu + "/cpu.stat", "throttled_time");
  return u;
}

void Cgroups::Remove(const std::string& key) const {
  for (const std::string& c : Controllers()) KillAndRemove(DirOf(c, key));
}

std::string JoinCgroup(const std::vector<std::string>& procs_files) {
  char pid[32];
  const int len = snprintf(pid, sizeof pid, "%d", static_cast<int>(getpid()));
  for (const std::string& f : procs_files) {
    int fd = open(f.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0 || write(fd, pid, static_cast<size_t>(len)) != len) {
      const int err = errno;
      if (fd >= 0) close(fd);
      return fmt::format("cannot join the task's cgroup {}: {}", f, std::strerror(err));
    }
    close(fd);
  }
  return "";
}

std::string OutOfMemoryReason(const CgroupUsage& usage, bool oom_event, int exit_code, int signal, int64_t memory_limit) {
  if (memory_limit <= 0) return "";
  // A task that ended well despite an OOM kill (of a helper it restarted)
  // did not fail for it.
  const bool failed = signal != 0 || exit_code != 0;
  if (failed && (oom_event || usage.oom_kills > 0)) {
    return fmt::format("out of memory (limit {})", FormatBytes(memory_limit));
  }
  return "";
}

}  // namespace ringmaster::agent
