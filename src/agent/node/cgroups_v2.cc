#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include <fmt/format.h>

#include "agent/node/bpf_devices.h"
#include "agent/node/cgroup_files.h"
#include "agent/node/cgroups_internal.h"
#include "common/files.h"
#include "common/log.h"

namespace ringmaster::agent {
namespace {

std::set<std::string> Words(const std::string& file) {
  std::set<std::string> out;
  std::ifstream in(file);
  std::string w;
  while (in >> w) out.insert(w);
  return out;
}

std::string Join(const std::set<std::string>& words) {
  std::string out;
  for (const std::string& w : words) out += (out.empty() ? "" : " ") + w;
  return out;
}

// Moves every process of `dir` into `leaf` (made if missing); processes that
// fork meanwhile are caught by the next round.
Status MoveProcsToLeaf(const std::string& dir, const std::string& leaf) {
  if (mkdir(leaf.c_str(), 0755) != 0 && errno != EEXIST) {
    return FailedPrecondition(fmt::format("mkdir {}: {}", leaf, std::strerror(errno)));
  }
  for (int round = 0; round < 10; ++round) {
    const std::vector<pid_t> pids = ReadCgroupProcs(dir + "/cgroup.procs");
    if (pids.empty()) return Status::Ok();
    for (pid_t pid : pids) {
      int err = 0;
      Status st = WriteCgroupFile(leaf + "/cgroup.procs", std::to_string(pid), &err);
      if (!st.ok() && err != ESRCH) return FailedPrecondition(st.message());  // ESRCH: it exited meanwhile
    }
  }
  return FailedPrecondition(fmt::format("{} keeps gaining processes; cannot move them to {}", dir, leaf));
}

}  // namespace

Status EnableControllers(const std::string& dir, const std::vector<std::string>& controllers) {
  const std::set<std::string> on = Words(dir + "/cgroup.subtree_control");
  std::vector<std::string> missing;
  for (const std::string& c : controllers) {
    if (!on.count(c)) missing.push_back(c);
  }
  if (missing.empty()) return Status::Ok();
  // Only the root may hold processes and give controllers to its children.
  const bool root = access((dir + "/cgroup.type").c_str(), F_OK) != 0;
  if (!root && !ReadCgroupProcs(dir + "/cgroup.procs").empty()) {
    const std::string leaf = dir + "/" + kAgentLeaf;
    spdlog::info("agent: moving the processes of {} into {} (a cgroup that enables controllers holds none)", dir, leaf);
    RM_RETURN_IF_ERROR(MoveProcsToLeaf(dir, leaf));
  }
  for (const std::string& c : missing) {
    int err = 0;
    if (Status st = WriteCgroupFile(dir + "/cgroup.subtree_control", "+" + c, &err); !st.ok()) {
      const std::string why = err == ENOENT ? fmt::format("it is not among the controllers {} offers ({})", dir,
                                                          Join(Words(dir + "/cgroup.controllers")))
                              : err == EBUSY ? fmt::format("{} holds processes", dir)
                                             : std::string(std::strerror(err));
      return FailedPrecondition(fmt::format("cgroup v2: cannot enable the {} controller in {}: {}", c, dir, why));
    }
  }
  return Status::Ok();
}

std::string IoMaxLine(const std::string& device, const IoLimits& io) {
  auto v = [](int64_t n) { return n > 0 ? std::to_string(n) : std::string("max"); };
  return fmt::format("{} rbps={} wbps={} riops={} wiops={}", device, v(io.read_bps), v(io.write_bps), v(io.read_iops),
                     v(io.write_iops));
}

StatusOr<std::unique_ptr<Cgroups>> CgroupsV2::Make(const CgroupOptions& o) {
  if (access((o.root + "/cgroup.subtree_control").c_str(), W_OK) != 0) {
    return FailedPrecondition(fmt::format("cgroup v2 at {} is not writable ({}); task limits need root", o.root,
                                          std::strerror(errno)));
  }
  const std::set<std::string> offered = Words(o.root + "/cgroup.controllers");
  std::vector<std::string> controllers;
  for (const char* c : {"memory", "cpu", "pids"}) {
    if (!offered.count(c)) {
      return FailedPrecondition(fmt::format("cgroup v2 at {} has no {} controller (cgroup.controllers: \"{}\")",
                                            o.root, c, Join(offered)));
    }
    controllers.push_back(c);
  }
  if (offered.count("io")) controllers.push_back("io");
  auto g = std::make_unique<CgroupsV2>();
  g->root_ = o.root;
  g->base_ = "/ringmaster/" + o.instance;
  g->controllers_ = std::move(controllers);
  if (g->controllers_.back() == "io") g->io_device_ = BlockDeviceOf(o.io_path, o.sys_root);
  // Empty subtrees of gone agents (rmdir refuses any that holds a cgroup).
  for (const std::string& dir : CgroupChildren(o.root + "/ringmaster")) rmdir(dir.c_str());
  RM_RETURN_IF_ERROR(g->EnsureParents());
  return std::unique_ptr<Cgroups>(std::move(g));
}

Status CgroupsV2::EnsureParents() const {
  RM_RETURN_IF_ERROR(MakeDirs(root_ + base_, 0755).Annotate("cgroup"));
  for (const std::string& dir : {root_, root_ + "/ringmaster", root_ + base_}) {
    RM_RETURN_IF_ERROR(EnableControllers(dir, controllers_));
  }
  return Status::Ok();
}

std::string CgroupsV2::DirOf(const std::string&, const std::string& key) const { return root_ + PathOf(key); }

std::vector<std::string> CgroupsV2::ProcsFiles(const std::string& key) const {
  return {DirOf("", key) + "/cgroup.procs"};
}

Status CgroupsV2::Create(const std::string& key, const TaskLimits& limits) const {
  RM_RETURN_IF_ERROR(EnsureParents());
  const std::string dir = DirOf("", key);
  KillAndRemoveCgroup(dir);  // an earlier attempt's, left by a crash
  if (mkdir(dir.c_str(), 0755) != 0) return Internal(fmt::format("cgroup: mkdir {}: {}", dir, std::strerror(errno)));
  if (limits.memory_bytes > 0) {
    RM_RETURN_IF_ERROR(WriteCgroupFile(dir + "/memory.max", std::to_string(limits.memory_bytes)));
    // No throttling below the hard limit (docs/containers.md#limits): a task
    // past its memory ends "out of memory", as on v1, rather than crawling.
    RM_RETURN_IF_ERROR(WriteCgroupFile(dir + "/memory.high", "max"));
    // Swap would let a task run past its limit, only slower. The file is
    // missing where the kernel does not account swap (then there is none to use).
    int err = 0;
    if (Status st = WriteCgroupFile(dir + "/memory.swap.max", "0", &err); !st.ok() && err != ENOENT) return st;
  }
  // An OOM kill ends the whole task (every process of it, a container's
  // too), not one process of it that the rest might wait on forever.
  (void)WriteCgroupFile(dir + "/memory.oom.group", "1");  // Linux 4.19+
  if (limits.cpu_milli > 0) {
    const int64_t quota = CfsQuotaUs(limits.cpu_milli);
    RM_RETURN_IF_ERROR(WriteCgroupFile(dir + "/cpu.max", fmt::format("{} {}", quota, kCfsPeriodUs)));
  }
  if (limits.pids > 0) RM_RETURN_IF_ERROR(WriteCgroupFile(dir + "/pids.max", std::to_string(limits.pids)));
  if (limits.io.any()) {
    if (io_device_.empty()) {
      spdlog::warn("agent: task {}: its io limits are not enforced (no block device under the sandbox root, or no "
                   "io controller)", key);
    } else {
      RM_RETURN_IF_ERROR(WriteCgroupFile(dir + "/io.max", IoMaxLine(io_device_, limits.io)));
    }
  }
  if (!limits.deny_devices.empty()) RM_RETURN_IF_ERROR(AttachDeviceDenyList(dir, limits.deny_devices));
  return Status::Ok();
}

std::optional<LiveUsage> CgroupsV2::Live(const std::string& key) const {
  const std::string dir = DirOf("", key);
  const auto current = ReadCgroupInt(dir + "/memory.current");
  if (!current) return std::nullopt;
  LiveUsage u;
  u.memory_bytes = std::max<int64_t>(0, *current - ReadCgroupStat(dir + "/memory.stat", "inactive_file"));
  u.oom_kills = ReadCgroupStat(dir + "/memory.events", "oom_kill");
  u.pids = ReadCgroupInt(dir + "/pids.current").value_or(0);
  // usage_usec is in every cgroup's cpu.stat, with or without the cpu controller.
  std::ifstream in(dir + "/cpu.stat");
  std::string k;
  int64_t v = 0;
  while (in >> k >> v) {
    if (k == "usage_usec") u.cpu_ns = v * 1000;
  }
  return u;
}

void CgroupsV2::Remove(const std::string& key) const { KillAndRemoveCgroup(DirOf("", key)); }

}  // namespace ringmaster::agent
