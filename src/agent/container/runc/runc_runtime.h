// RuncRuntime: tasks as OCI containers run by runc (1.1, cgroupfs driver on cgroup v1 or v2). Each
// task gets an overlayfs whose lower dirs are the image's unpacked layers
// (shared, read-only, cached per node) and whose upper dir is the task's
// own, and a bundle (config.json) in its control dir: pid, mount, ipc and
// uts namespaces (and net for network: none), no capabilities,
// no_new_privs, the task's uid, a device cgroup that allows only the
// defaults and the task's GPUs, the container's cgroup below the task's.
// The shim runs `runc run` in the foreground, so the container's stdio is the
// shim's pipe and runc forwards the stop signals to it. Thread-safe.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "agent/container/container_runtime.h"

namespace ringmaster::agent {

// Mounts an overlayfs at `merged`: `layers` read-only, top first, over
// `upper` (with `work`, its workdir, on the same filesystem). A repeated
// layer counts once (its topmost place); stacks too long for one page of
// mount options go by short names.
inline constexpr size_t kMaxOverlayOptionBytes = 3500;
Status MountOverlay(const std::vector<std::string>& layers, const std::string& upper, const std::string& work,
                    const std::string& merged);

class RuncRuntime final : public ContainerRuntime {
 public:
  // `state_root`: runc's --root, private to this agent.
  // `init`: a static init for the container's pid 1 (tini), bound in
  // read-only: it forwards stop signals to the task and reaps zombies, which a
  // task as pid 1 would not do ("" = the task is pid 1).
  RuncRuntime(std::string runc_binary, std::string state_root, std::string init = DefaultInit())
      : runc_(std::move(runc_binary)), state_root_(std::move(state_root)), init_(std::move(init)) {}

  // /usr/bin/tini-static (Debian's tini, which docker.io depends on) if there.
  static std::string DefaultInit();

  // The absolute path of `runc_binary` (searched on this process's PATH when
  // it has no slash), checked to run; FailedPrecondition otherwise.
  static StatusOr<std::string> Find(const std::string& runc_binary);

  std::string_view Name() const override { return "runc"; }
  StatusOr<Command> Prepare(const ContainerTask& task) override;
  void Release(const std::string& key, const std::string& id, const std::string& task_dir) override;
  void RemoveOrphans(const std::string& instance, const std::set<std::string>& keys) override;

  // The OCI runtime spec of a task's container (exposed for tests).
  static nlohmann::json Config(const ContainerTask& task, const std::string& rootfs, const std::string& init = "");

 private:
  const std::string runc_;
  const std::string state_root_;
  const std::string init_;
};

}  // namespace ringmaster::agent
