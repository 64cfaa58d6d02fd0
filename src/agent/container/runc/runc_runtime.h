// RuncRuntime: tasks as OCI containers run by runc (1.1, cgroupfs driver, cgroup v1 or v2): an
// overlayfs over the image's shared read-only layers, whose upper dir is the task's own (under the
// scratch dir, on an image sized at its disk limit), and a bundle with its own namespaces, no
// capabilities, no_new_privs, its uid and GPUs. The shim runs `runc run` in the foreground, so
// the container's stdio is the shim's pipe and stop signals reach it. Thread-safe.
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

// Makes `image` a sparse ext4 file system with room for `bytes` of files and
// mounts it (through a loop device, released with the mount) at `dir`.
Status MountScratchImage(const std::string& image, int64_t bytes, const std::string& dir);

class RuncRuntime final : public ContainerRuntime {
 public:
  // `state_root`: runc's --root, private to this agent.
  // `scratch_dir`: where tasks' upper dirs go, each (for a task with a disk
  // limit) on its own image; "" = in the task's control dir, unbounded.
  // `init`: a static init for the container's pid 1 (tini), bound in
  // read-only: it forwards stop signals to the task and reaps zombies, which a
  // task as pid 1 would not do ("" = the task is pid 1).
  RuncRuntime(std::string runc_binary, std::string state_root, std::string scratch_dir = "",
              std::string init = DefaultInit())
      : runc_(std::move(runc_binary)),
        state_root_(std::move(state_root)),
        scratch_dir_(std::move(scratch_dir)),
        init_(std::move(init)) {}

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
  // The dir holding a container's upper and work dirs (a mount point when its
  // task has a disk limit).
  std::string UpperBase(const std::string& id, const std::string& task_dir) const;

  const std::string runc_;
  const std::string state_root_;
  const std::string scratch_dir_;
  const std::string init_;
};

}  // namespace ringmaster::agent
