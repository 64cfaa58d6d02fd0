#include "agent/node/cgroup_files.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <thread>

#include <fmt/format.h>

namespace ringmaster::agent {

Status WriteCgroupFile(const std::string& file, const std::string& value, int* err_out) {
  int fd = open(file.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    if (err_out) *err_out = err;
    return Internal(fmt::format("open {}: {}", file, std::strerror(err)));
  }
  ssize_t n = write(fd, value.data(), value.size());
  const int err = errno;
  close(fd);
  if (n != static_cast<ssize_t>(value.size())) {
    if (err_out) *err_out = err;
    return Internal(fmt::format("write \"{}\" to {}: {}", value, file, std::strerror(err)));
  }
  if (err_out) *err_out = 0;
  return Status::Ok();
}

std::optional<int64_t> ReadCgroupInt(const std::string& file) {
  std::ifstream in(file);
  int64_t v = 0;
  if (!(in >> v)) return std::nullopt;
  return v;
}

int64_t ReadCgroupStat(const std::string& file, const std::string& key) {
  std::ifstream in(file);
  std::string k;
  int64_t v = 0;
  while (in >> k >> v) {
    if (k == key) return v;
  }
  return 0;
}

std::vector<pid_t> ReadCgroupProcs(const std::string& file) {
  std::vector<pid_t> out;
  std::ifstream in(file);
  pid_t pid;
  while (in >> pid) out.push_back(pid);
  return out;
}

std::vector<std::string> CgroupChildren(const std::string& dir) {
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

void KillAndRemoveCgroup(const std::string& dir) {
  if (access(dir.c_str(), F_OK) != 0) return;
  // v2's cgroup.kill (Linux 5.14+) reaches the whole subtree at once, forks
  // racing the kill included; elsewhere each listed pid gets SIGKILL.
  const bool killed = access((dir + "/cgroup.kill").c_str(), W_OK) == 0 && WriteCgroupFile(dir + "/cgroup.kill", "1").ok();
  for (const std::string& sub : CgroupChildren(dir)) KillAndRemoveCgroup(sub);
  for (int i = 0; i < 100; ++i) {
    if (!killed || i > 0) {
      for (pid_t pid : ReadCgroupProcs(dir + "/cgroup.procs")) kill(pid, SIGKILL);
    }
    if (rmdir(dir.c_str()) == 0 || errno != EBUSY) return;  // ENOENT: gone already
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace ringmaster::agent
