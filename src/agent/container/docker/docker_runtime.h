// DockerRuntime: tasks as Docker containers, over the Engine API (v1.41) on
// the daemon's unix socket. Prepare imports the task's image once per node
// (the rootfs tar pulled from the files service, as ringmaster/<name>:<digest>)
// and creates the container: the task's uid, no capabilities, no_new_privs,
// Docker's default seccomp profile, network host or none, the sandbox and
// the platform's tools bound at the same paths, the task's GPUs as devices,
// its cgroup below the task's (CgroupParent), labelled with job, task,
// attempt and agent. The shim then runs `ringmaster docker-attach`, which
// starts it, streams its log lines to the shim's pipe, forwards SIGTERM and
// exits with the container's exit code; the shim's cleanup removes it.
// Thread-safe.
#pragma once

#include <string>

#include "agent/container/container_runtime.h"
#include "agent/container/docker/docker_api.h"

namespace ringmaster::agent {

class DockerRuntime final : public ContainerRuntime {
 public:
  // `self`: the ringmaster binary (for docker-attach).
  DockerRuntime(std::string socket, std::string self) : api_(socket), socket_(std::move(socket)), self_(std::move(self)) {}

  // FailedPrecondition when the daemon does not answer, or uses a cgroup
  // driver the task's limits cannot hold under (CheckDaemon).
  Status Check() const;
  // Docker's systemd cgroup driver (the default of Debian's and Ubuntu's
  // dockerd on cgroup v2 hosts) takes only a systemd slice as CgroupParent,
  // a cgroup systemd owns and sets the limits of: the container could not
  // go below the task's cgroup, where the limits, usage and OOM counts are
  // on every executor. So the daemon must use the cgroupfs driver; the
  // error says how. `info`: GET /info.
  static Status CheckDaemon(const nlohmann::json& info);

  std::string_view Name() const override { return "docker"; }
  StatusOr<Command> Prepare(const ContainerTask& task) override;
  void Release(const std::string& key, const std::string& id, const std::string& task_dir) override;
  void RemoveOrphans(const std::string& instance, const std::set<std::string>& keys) override;

  // The Engine API's create body for a task (exposed for tests).
  static nlohmann::json Config(const ContainerTask& task, const std::string& image_ref);
  // "ringmaster/<name>:<digest hex>"
  static std::string ImageRef(const TaskLaunch::Image& image);

 private:
  Status EnsureImage(const TaskLaunch::Image& image);

  DockerApi api_;
  const std::string socket_;
  const std::string self_;
  std::mutex import_mu_;  // one import at a time: two tasks of a new image import it once
};

// `ringmaster docker-attach SOCKET ID [--remove]`: what the shim runs for a
// Docker task (see above); with --remove, removes the container (the cleanup).
int RunDockerAttach(int argc, char** argv);

}  // namespace ringmaster::agent
