// GPUs in containers through the Container Device Interface (CDI 0.3-0.8): the
// specs `nvidia-ctk cdi generate` writes (/etc/cdi, /var/run/cdi) name each GPU's
// device nodes, library mounts, variables and hooks. CdiRegistry reads them and
// maps a task's GPUs to those edits; ApplyCdiTo* apply them to runc and Docker.
// CdiRegistry is thread-safe; the rest are pure functions.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace ringmaster::agent {

// The kind nvidia-ctk writes its GPUs under ("nvidia.com/gpu=0", "=GPU-<uuid>", "=all").
inline constexpr std::string_view kCdiGpuKind = "nvidia.com/gpu";

struct CdiDeviceNode {
  std::string path;       // in the container
  std::string host_path;  // on the host; "" = path
  std::string type;       // "c", "b", "u", "p"; "" = the host node's
  std::optional<int64_t> major;  // unset (or 0) = the host node's number, minor too
  int64_t minor = 0;
  std::optional<uint32_t> file_mode;
  std::string permissions;  // device cgroup access: "" = rwm; "none" = no rule
  std::optional<uint32_t> uid, gid;
  const std::string& HostPath() const { return host_path.empty() ? path : host_path; }
};

struct CdiMount {
  std::string host_path, container_path, type;
  std::vector<std::string> options;
};

struct CdiHook {
  std::string hook_name;  // prestart, createRuntime, createContainer, startContainer, poststart, poststop
  std::string path;
  std::vector<std::string> args, env;
  std::optional<int> timeout;  // seconds
  std::string spec;            // the spec file it came from, for messages
};

// Edits to a container, in CDI's order: a spec's own edits, then its devices'.
struct CdiEdits {
  std::vector<std::string> env;  // NAME=VALUE
  std::vector<CdiDeviceNode> device_nodes;
  std::vector<CdiMount> mounts;
  std::vector<CdiHook> hooks;
  std::vector<uint32_t> additional_gids;
  std::vector<std::string> specs;  // the files these came from
  bool empty() const {
    return env.empty() && device_nodes.empty() && mounts.empty() && hooks.empty() && additional_gids.empty();
  }
  void Append(const CdiEdits& other);
};

struct CdiDevice {
  std::string name;
  CdiEdits edits;
};

struct CdiSpec {
  std::string path;
  std::string version;  // cdiVersion
  std::string kind;     // vendor/class
  std::vector<CdiDevice> devices;
  CdiEdits edits;  // applied once when any of its devices is
};

// Parses one spec file's text (YAML or JSON) strictly: an unknown field, a
// bad value or a feature newer than its cdiVersion is an InvalidArgument
// naming the field, e.g. `devices[1].containerEdits.deviceNodes[0].type: "x"
// is not b, c, u or p`. Intel RDT edits are refused: this agent cannot apply them.
StatusOr<CdiSpec> ParseCdiSpec(std::string_view text, const std::string& path);

// Fills each device node's type, major and minor from its host node (stat),
// as a CDI runtime does; FailedPrecondition naming the node when it is missing.
Status ResolveCdiDeviceNodes(CdiEdits* edits);

// The spec files of a node, re-read when they change (size, mtime, inode).
class CdiRegistry {
 public:
  // `dirs` in rising priority: a device named in a later dir's spec hides the
  // same name in an earlier one (CDI: /etc/cdi, then /var/run/cdi).
  explicit CdiRegistry(std::vector<std::string> dirs) : dirs_(std::move(dirs)) {}

  struct Summary {
    std::vector<std::string> loaded;    // "FILE: KIND, N devices (cdiVersion V)"
    std::vector<std::string> problems;  // "FILE: what is wrong" (ignored files, conflicting names)
  };
  // Re-reads what changed; logs each new problem once. Cheap when nothing did.
  Summary Refresh();

  // The resolved edits for the node's GPUs `gpus` (indices: /dev/nvidiaN's
  // N), each found by its UUID's name (`uuids`, from NVML) or else its index,
  // with every edit of the specs they come from. Empty when no spec offers
  // `kind`; FailedPrecondition when one does but lacks a GPU, or names a
  // device whose node is another GPU's.
  StatusOr<CdiEdits> EditsForGpus(const std::vector<int>& gpus, const std::map<int, std::string>& uuids,
                                  std::string_view kind = kCdiGpuKind);

 private:
  struct File {
    int64_t size = -1, mtime_ns = -1;
    ino_t inode = 0;
    int priority = 0;
    std::shared_ptr<const CdiSpec> spec;  // null when broken
    std::string error;
  };
  struct Entry {  // a qualified device name's owner
    std::shared_ptr<const CdiSpec> spec;
    size_t device = 0;
    int priority = 0;
    bool conflict = false;
  };
  Summary RefreshLocked();

  const std::vector<std::string> dirs_;
  std::mutex mu_;
  std::map<std::string, File> files_;                  // GUARDED_BY(mu_), by path
  std::map<std::string, std::map<std::string, Entry>> devices_;  // GUARDED_BY(mu_): kind -> name -> owner
  std::vector<std::string> reported_;                  // GUARDED_BY(mu_): problems already logged
};

// Applies `edits` (resolved) to a runc config.json as a CDI runtime would:
// env replaces a variable of the same name; a device node replaces one at
// the same path and gets a device cgroup allow rule; a mount replaces one at
// the same destination and mounts are ordered parents first; hooks are
// appended to their kind; additional gids join the process's.
void ApplyCdiToOci(const CdiEdits& edits, nlohmann::json* config);

// Applies what Docker 20.10's Engine API can take to a container create
// body: env, device nodes (HostConfig.Devices), bind and tmpfs mounts
// (HostConfig.Mounts), additional gids (GroupAdd). It cannot take OCI hooks
// nor a node without cgroup access: each is logged once per spec and skipped.
void ApplyCdiToDocker(const CdiEdits& edits, nlohmann::json* body);

}  // namespace ringmaster::agent
