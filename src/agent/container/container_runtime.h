// ContainerRuntime: what the process executor asks of a container runtime
// (runc, Docker) to run one task in its image. The executor keeps doing
// everything else the same way for every runtime: the task's sandbox and
// files, its cgroup and limits, the detached shim that captures its output
// and outlives the agent, stops with a grace period, re-adoption. The
// runtime only makes the container and says what the shim runs, as root:
//  - runc: `runc run` of an OCI bundle over an overlayfs on the image's
//    unpacked layers (runc_runtime.cc);
//  - docker: `ringmaster docker-attach`, which starts a created container,
//    streams its logs and waits for it over the Engine API (docker_runtime.cc).
// Either way the container runs the task as its user's uid with no
// capabilities, no_new_privs and a seccomp filter, sees the task's sandbox at
// the same path as on the host, the platform's tools read-only, the GPUs it
// holds, and of the host's files only /etc/hosts and /etc/resolv.conf
// (read-only). Implementations are thread-safe.
#pragma once

#include <sys/types.h>

#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "agent/container/cdi.h"
#include "agent/executor/executor.h"
#include "common/status.h"

namespace ringmaster::agent {

// A device node the task may use (a GPU's, nvidiactl, nvidia-uvm).
struct DeviceNode {
  std::string host_path;       // e.g. /dev/nvidia1
  std::string container_path;  // where the container sees it: the same path
  int major = 0;
  int minor = 0;
};

// One task's container, as the executor has set it up.
struct ContainerTask {
  std::string key;           // the task attempt's key, "42.1"
  std::string id;            // the container's name: "rm-<agent instance>-<key>"
  std::string task_dir;      // the executor's private control dir (bundle, overlay dirs)
  const TaskLaunch* launch = nullptr;  // argv, image, network, identity
  std::map<std::string, std::string> env;  // the task's whole environment
  std::string cwd;
  // Host directories the container sees at the same path: (path, read-only).
  std::vector<std::pair<std::string, bool>> binds;
  std::vector<DeviceNode> devices;
  CdiEdits cdi;  // the site's CDI edits for its GPUs (cdi.h): libraries, more nodes, hooks
  std::string cgroup_parent;  // Cgroups::PathOf(key): the container goes below it
  int64_t disk_bytes = 0;     // the task's disk limit (0 = none): its writable root's size, where it can be set
  std::map<std::string, std::string> labels;  // job, task, attempt, agent instance
};

class ContainerRuntime {
 public:
  virtual ~ContainerRuntime() = default;
  virtual std::string_view Name() const = 0;

  struct Command {
    std::vector<std::string> argv;     // what the shim runs as root; the container's exit is its exit
    std::vector<std::string> cleanup;  // what the shim runs as root once it ended (removes the container)
    // Host directories that hold what the container writes outside its
    // sandbox: measured with it against the task's disk limit.
    std::vector<std::string> writable;
  };
  // Makes the task's container; Release undoes it whatever this returns.
  virtual StatusOr<Command> Prepare(const ContainerTask& task) = 0;
  // Removes what Prepare made and the shim's cleanup did not (idempotent).
  virtual void Release(const std::string& key, const std::string& id, const std::string& task_dir) = 0;
  // Containers of this agent whose task is not in `keys` (by their labels):
  // removed, so a crash between Prepare and the task's record leaves nothing.
  virtual void RemoveOrphans(const std::string& instance, const std::set<std::string>& keys) = 0;
};

}  // namespace ringmaster::agent
