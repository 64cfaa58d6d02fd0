// The two backends of Cgroups (cgroups.h), declared for Detect and for the
// tests that exercise a backend's own parts. Thread-compatible, as Cgroups.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "agent/node/cgroups.h"

namespace ringmaster::agent {

// CFS bandwidth: a task's CPU share as microseconds per 100 ms period (at
// least 1 ms: the kernel's floor), the same on both versions.
inline constexpr int64_t kCfsPeriodUs = 100'000;
inline int64_t CfsQuotaUs(int64_t cpu_milli) { return std::max<int64_t>(1000, cpu_milli * kCfsPeriodUs / 1000); }

// cgroup v1: a hierarchy per controller under the root (memory, cpu, pids,
// devices; cpuacct and blkio where writable), the task's cgroup at the same
// path in each. Limits are hierarchical, so a runtime's child cgroup cannot
// loosen them.
class CgroupsV1 final : public Cgroups {
 public:
  static StatusOr<std::unique_ptr<Cgroups>> Make(const CgroupOptions& options);
  int Version() const override { return 1; }
  std::string DirOf(const std::string& controller, const std::string& key) const override;
  std::vector<std::string> ProcsFiles(const std::string& key) const override;
  Status Create(const std::string& key, const TaskLimits& limits) const override;
  std::optional<LiveUsage> Live(const std::string& key) const override;
  void Remove(const std::string& key) const override;

 private:
  bool Has(const std::string& controller) const;
  std::vector<std::string> controllers_;
};

// cgroup v2, the unified hierarchy: one directory per cgroup. The agent
// enables the controllers tasks need down the path (root, /ringmaster,
// /ringmaster/<instance>) through cgroup.subtree_control; those inner
// cgroups hold no process (the no-internal-processes rule), the task's
// cgroup is a leaf (a runtime makes its own child below it).
class CgroupsV2 final : public Cgroups {
 public:
  static StatusOr<std::unique_ptr<Cgroups>> Make(const CgroupOptions& options);
  int Version() const override { return 2; }
  std::string DirOf(const std::string& controller, const std::string& key) const override;
  std::vector<std::string> ProcsFiles(const std::string& key) const override;
  Status Create(const std::string& key, const TaskLimits& limits) const override;
  std::optional<LiveUsage> Live(const std::string& key) const override;
  void Remove(const std::string& key) const override;

  // The controllers each task cgroup gets: memory, cpu, pids, and io where
  // the root offers it.
  const std::vector<std::string>& controllers() const { return controllers_; }

 private:
  // Makes /ringmaster/<instance> and enables the controllers down to it
  // (again at each Create: a service manager may have changed the root's).
  Status EnsureParents() const;
  std::vector<std::string> controllers_;
};

// The leaf a cgroup's own processes move to before it enables controllers
// for its children: the no-internal-processes rule refuses both at once in
// any cgroup but the root.
inline constexpr const char* kAgentLeaf = "ringmaster-agent";

// Enables `controllers` in `dir`'s cgroup.subtree_control (those already on
// are left alone). A non-root cgroup (one with cgroup.type) that holds
// processes first moves them all into <dir>/ringmaster-agent: what an agent
// in a delegated subtree (systemd Delegate=yes, a container's cgroup
// namespace) does with itself. FailedPrecondition naming the controller
// when the kernel refuses (not in cgroup.controllers, or still busy).
Status EnableControllers(const std::string& dir, const std::vector<std::string>& controllers);

// The io.max line for `device` ("8:0"); "max" for an unlimited field.
std::string IoMaxLine(const std::string& device, const IoLimits& io);

}  // namespace ringmaster::agent
