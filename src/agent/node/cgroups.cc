#include "agent/node/cgroups.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "agent/node/cgroup_files.h"
#include "agent/node/cgroups_internal.h"
#include "common/units.h"

namespace ringmaster::agent {
namespace {

// oom + oom_kill of a memory.events text.
int64_t OomCount(const std::string& text) {
  std::istringstream in(text);
  std::string k;
  int64_t v = 0, n = 0;
  while (in >> k >> v) {
    if (k == "oom" || k == "oom_kill") n += v;
  }
  return n;
}

std::string ReadFd(int fd) {
  std::string out;
  char buf[1024];
  off_t at = 0;
  ssize_t n;
  while ((n = pread(fd, buf, sizeof buf, at)) > 0) {
    out.append(buf, static_cast<size_t>(n));
    at += n;
  }
  return out;
}

}  // namespace

StatusOr<std::unique_ptr<Cgroups>> Cgroups::Detect(const CgroupOptions& options) {
  struct statfs fs {};
  if (statfs(options.root.c_str(), &fs) != 0) {
    return FailedPrecondition(fmt::format("cgroup root {}: {}", options.root, std::strerror(errno)));
  }
  // The magic tells a kernel's mount; a cgroup.controllers file at the top
  // is what makes any tree (a fake one in tests) read as v2.
  const bool v2 = fs.f_type == CGROUP2_SUPER_MAGIC || access((options.root + "/cgroup.controllers").c_str(), F_OK) == 0;
  return v2 ? CgroupsV2::Make(options) : CgroupsV1::Make(options);
}

CgroupUsage Cgroups::Usage(const std::string& key) const {
  return ReadCgroupUsage(Version(), DirOf("memory", key), DirOf("cpu", key));
}

CgroupUsage ReadCgroupUsage(int version, const std::string& mem, const std::string& cpu) {
  CgroupUsage u;
  if (version == 2) {
    u.oom_kills = ReadCgroupStat(mem + "/memory.events", "oom_kill");
    u.memory_failcnt = ReadCgroupStat(mem + "/memory.events", "max");
    u.memory_max_bytes = ReadCgroupInt(mem + "/memory.peak").value_or(-1);  // Linux 5.19+
    u.cpu_periods = ReadCgroupStat(cpu + "/cpu.stat", "nr_periods");
    u.cpu_throttled = ReadCgroupStat(cpu + "/cpu.stat", "nr_throttled");
    u.cpu_throttled_ns = ReadCgroupStat(cpu + "/cpu.stat", "throttled_usec") * 1000;
    return u;
  }
  u.oom_kills = ReadCgroupStat(mem + "/memory.oom_control", "oom_kill");
  u.memory_failcnt = ReadCgroupInt(mem + "/memory.failcnt").value_or(0);
  u.memory_max_bytes = ReadCgroupInt(mem + "/memory.max_usage_in_bytes").value_or(0);
  u.cpu_periods = ReadCgroupStat(cpu + "/cpu.stat", "nr_periods");
  u.cpu_throttled = ReadCgroupStat(cpu + "/cpu.stat", "nr_throttled");
  u.cpu_throttled_ns = ReadCgroupStat(cpu + "/cpu.stat", "throttled_time");
  return u;
}

OomWatch::OomWatch(int version, const std::string& dir) : version_(version) {
  if (dir.empty()) return;
  if (version == 2) {
    fd_ = open((dir + "/memory.events").c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ >= 0) base_ = OomCount(ReadFd(fd_));  // reading also arms POLLPRI
    return;
  }
  const int control = open((dir + "/memory.oom_control").c_str(), O_RDONLY | O_CLOEXEC);
  const int efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  const int events = open((dir + "/cgroup.event_control").c_str(), O_WRONLY | O_CLOEXEC);
  bool ok = control >= 0 && efd >= 0 && events >= 0;
  if (ok) {
    const std::string line = fmt::format("{} {}", efd, control);
    ok = write(events, line.data(), line.size()) == static_cast<ssize_t>(line.size());
  }
  if (events >= 0) close(events);
  if (control >= 0) close(control);  // the registration holds its own reference
  if (ok) fd_ = efd;
  else if (efd >= 0) close(efd);
}

OomWatch::~OomWatch() {
  if (fd_ >= 0) close(fd_);
}

short OomWatch::events() const { return version_ == 2 ? POLLPRI : POLLIN; }

bool OomWatch::Check() {
  if (fd_ < 0 || fired_) return fired_;
  if (version_ == 2) {
    const std::string text = ReadFd(fd_);
    fired_ = OomCount(text) > base_;
    if (text.empty()) {  // the cgroup was removed: poll would report it for ever
      close(fd_);
      fd_ = -1;
    }
  } else {
    uint64_t n = 0;
    fired_ = read(fd_, &n, sizeof n) == sizeof n && n > 0;
  }
  return fired_;
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

std::string BlockDeviceOf(const std::string& path, const std::string& sys_root) {
  struct stat st {};
  if (path.empty() || stat(path.c_str(), &st) != 0 || major(st.st_dev) == 0) return "";  // 0: no block device
  const std::string dev = fmt::format("{}:{}", major(st.st_dev), minor(st.st_dev));
  const std::string link = sys_root + "/dev/block/" + dev;
  if (access(link.c_str(), F_OK) != 0) return "";
  if (access((link + "/partition").c_str(), F_OK) != 0) return dev;  // a whole disk
  // A partition's sysfs directory sits inside its disk's: .../block/sda/sda1.
  char real[PATH_MAX];
  if (!realpath(link.c_str(), real)) return "";
  std::string disk = real;
  disk = disk.substr(0, disk.rfind('/'));
  std::ifstream in(disk + "/dev");
  std::string whole;
  return in >> whole ? whole : "";
}

}  // namespace ringmaster::agent
