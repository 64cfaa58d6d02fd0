#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "agent/node/cgroup_files.h"
#include "agent/node/cgroups_internal.h"
#include "common/files.h"
#include "common/log.h"

namespace ringmaster::agent {
namespace {

bool Writable(const std::string& dir) { return access((dir + "/cgroup.procs").c_str(), W_OK) == 0; }

}  // namespace

StatusOr<std::unique_ptr<Cgroups>> CgroupsV1::Make(const CgroupOptions& o) {
  std::vector<std::string> controllers = {"memory", "cpu", "pids", "devices"};
  for (const std::string& c : controllers) {
    const std::string dir = o.root + "/" + c;
    if (!Writable(dir)) {
      return FailedPrecondition(fmt::format("no writable cgroup v1 {} hierarchy at {} ({}); task limits need root "
                                            "and cgroup v1 or v2", c, dir, std::strerror(errno)));
    }
  }
  // CPU time: its own hierarchy here, co-mounted with cpu elsewhere (the same directory then).
  if (Writable(o.root + "/cpuacct")) controllers.push_back("cpuacct");
  auto g = std::make_unique<CgroupsV1>();
  g->io_device_ = BlockDeviceOf(o.io_path, o.sys_root);
  if (!g->io_device_.empty() && Writable(o.root + "/blkio")) controllers.push_back("blkio");
  // Empty subtrees of gone agents (rmdir refuses any that holds a cgroup).
  for (const std::string& c : controllers) {
    for (const std::string& dir : CgroupChildren(o.root + "/" + c + "/ringmaster")) rmdir(dir.c_str());
  }
  g->controllers_ = std::move(controllers);
  g->root_ = o.root;
  g->base_ = "/ringmaster/" + o.instance;
  return std::unique_ptr<Cgroups>(std::move(g));
}

bool CgroupsV1::Has(const std::string& c) const {
  return std::find(controllers_.begin(), controllers_.end(), c) != controllers_.end();
}

std::string CgroupsV1::DirOf(const std::string& controller, const std::string& key) const {
  return root_ + "/" + controller + PathOf(key);
}

std::vector<std::string> CgroupsV1::ProcsFiles(const std::string& key) const {
  std::vector<std::string> out;
  for (const std::string& c : controllers_) out.push_back(DirOf(c, key) + "/cgroup.procs");
  return out;
}

Status CgroupsV1::Create(const std::string& key, const TaskLimits& limits) const {
  for (const std::string& c : controllers_) {
    const std::string dir = DirOf(c, key);
    KillAndRemoveCgroup(dir);  // an earlier attempt's, left by a crash
    RM_RETURN_IF_ERROR(MakeDirs(dir, 0755).Annotate("cgroup"));
  }
  const std::string mem = DirOf("memory", key);
  // Limits hold for the cgroups a runtime makes below this one only with
  // hierarchical accounting (the default on recent kernels; set before any child exists).
  (void)WriteCgroupFile(mem + "/memory.use_hierarchy", "1");
  if (limits.memory_bytes > 0) {
    RM_RETURN_IF_ERROR(WriteCgroupFile(mem + "/memory.limit_in_bytes", std::to_string(limits.memory_bytes)));
    // Swap would let a task run past its limit, only slower: none for tasks.
    (void)WriteCgroupFile(mem + "/memory.swappiness", "0");
  }
  if (limits.cpu_milli > 0) {
    const std::string cpu = DirOf("cpu", key);
    RM_RETURN_IF_ERROR(WriteCgroupFile(cpu + "/cpu.cfs_period_us", std::to_string(kCfsPeriodUs)));
    const int64_t quota = CfsQuotaUs(limits.cpu_milli);
    RM_RETURN_IF_ERROR(WriteCgroupFile(cpu + "/cpu.cfs_quota_us", std::to_string(quota)));
  }
  if (limits.pids > 0) {
    RM_RETURN_IF_ERROR(WriteCgroupFile(DirOf("pids", key) + "/pids.max", std::to_string(limits.pids)));
  }
  if (limits.io.any()) {
    if (!Has("blkio")) {
      spdlog::warn("agent: task {}: its io limits are not enforced (no block device under the sandbox root, or no "
                   "writable blkio hierarchy)", key);
    } else {
      const std::string blkio = DirOf("blkio", key);
      const std::pair<const char*, int64_t> files[] = {{"read_bps_device", limits.io.read_bps},
                                                       {"write_bps_device", limits.io.write_bps},
                                                       {"read_iops_device", limits.io.read_iops},
                                                       {"write_iops_device", limits.io.write_iops}};
      for (const auto& [file, value] : files) {
        if (value <= 0) continue;
        RM_RETURN_IF_ERROR(WriteCgroupFile(blkio + "/blkio.throttle." + file, fmt::format("{} {}", io_device_, value)));
      }
    }
  }
  for (const auto& [major, minor] : limits.deny_devices) {
    RM_RETURN_IF_ERROR(WriteCgroupFile(DirOf("devices", key) + "/devices.deny", fmt::format("c {}:{} rwm", major, minor)));
  }
  return Status::Ok();
}

std::optional<LiveUsage> CgroupsV1::Live(const std::string& key) const {
  LiveUsage u;
  const std::string mem = DirOf("memory", key);
  const auto usage = ReadCgroupInt(mem + "/memory.usage_in_bytes");
  if (!usage) return std::nullopt;
  u.memory_bytes = std::max<int64_t>(0, *usage - ReadCgroupStat(mem + "/memory.stat", "total_inactive_file"));
  u.oom_kills = ReadCgroupStat(mem + "/memory.oom_control", "oom_kill");
  u.pids = ReadCgroupInt(DirOf("pids", key) + "/pids.current").value_or(0);
  // A task adopted from an agent without cpuacct has no such cgroup: -1.
  if (Has("cpuacct")) u.cpu_ns = ReadCgroupInt(DirOf("cpuacct", key) + "/cpuacct.usage").value_or(-1);
  return u;
}

void CgroupsV1::Remove(const std::string& key) const {
  for (const std::string& c : controllers_) KillAndRemoveCgroup(DirOf(c, key));
}

}  // namespace ringmaster::agent
