// The shim: `ringmaster shim DIR` supervises one task, after containerd-shim
// and conmon. Started by the process executor (as root when the agent is),
// it double-forks so the agent reaps its first half at once and the shim
// itself belongs to init, never becoming the agent's zombie. It then:
//  - forks the task into its own process group, which enters its job's
//    network namespace, drops to the task's uid (setgroups, setgid, setuid, checked to be irreversible), sets
//    PR_SET_NO_NEW_PRIVS and RLIMIT_NPROC, makes the task's directories as
//    that user, enters its working dir, installs the task's seccomp filter
//    (task_seccomp.h) and closes every other descriptor;
//  - reads the task's stdout/stderr from a pipe into DIR/output.log up to
//    a cap, then a marker line, and drains the rest so the task never blocks;
//  - as a child subreaper, kills and reaps every descendant once the task's
//    main process ends, then writes DIR/exit.json.
// DIR is the agent's private (0700) control directory for the task.
// Single-threaded.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "agent/executor/task_users.h"

namespace ringmaster::agent {

// DIR/spec.json: what the executor tells the shim (mode 0600: it holds the
// task's environment, secrets included).
struct ShimSpec {
  std::vector<std::string> argv;
  std::map<std::string, std::string> env;
  std::string working_dir;
  std::vector<std::string> make_dirs;  // made as the task's user before it starts
  std::string meta;                    // the executor's, returned by Recover
  TaskIdentity identity;
  std::string sandbox;                 // the task's own directory (HOME by default)
  int64_t max_log_bytes = 0;           // 0 = no cap
  int64_t max_procs = 0;               // RLIMIT_NPROC for the task's uid; 0 = unchanged
  // A container runtime's command (runc run, docker-attach): run as root; the
  // container drops to the task's uid. Else argv runs as `identity`.
  bool as_root = false;
  std::vector<std::string> cleanup;     // run as root once the task ended (removes the container)
  std::string runtime = "process";      // process | runc | docker
  std::string container_id;             // the runtime's name for the task's container
  // The task's cgroup: the files the task's process writes its pid to (the
  // process runtime; a container runtime puts the container below it), and
  // the memory and cpu directories whose counters exit.json reports (one
  // directory on cgroup v2).
  std::vector<std::string> cgroup_procs;
  std::string cgroup_memory_dir, cgroup_cpu_dir;
  int cgroup_version = 1;
  int64_t memory_limit = 0;             // for the out-of-memory reason
  // The job's network namespace (a path) the task enters while still root;
  // "" = the shim's own (the process runtime; a container's is its runtime's).
  std::string netns;
  // `network: none` for the process runtime: a new, empty namespace (its
  // loopback only), made while still root.
  bool own_netns = false;

  nlohmann::json ToJson() const;
  // Throws nlohmann::json::exception on a malformed spec.
  static ShimSpec FromJson(const nlohmann::json& j);
};

// The files of a task's control directory.
inline constexpr const char* kSpecFile = "spec.json";
inline constexpr const char* kShimPidFile = "shim.pid";
inline constexpr const char* kTaskPidFile = "task.pid";
inline constexpr const char* kExitFile = "exit.json";
inline constexpr const char* kStopFile = "stop";
inline constexpr const char* kLogFile = "output.log";
inline constexpr const char* kBootIdFile = "boot_id";  // the boot the pids above belong to

// This boot's id (/proc/sys/kernel/random/boot_id); "" if unknown.
std::string BootId();

// The marker written once a task's log reaches `max_bytes`.
std::string LogCutMarker(int64_t max_bytes);

// Entry point of `ringmaster shim DIR`. Returns the process exit code.
int RunShim(const std::string& task_dir);

}  // namespace ringmaster::agent
