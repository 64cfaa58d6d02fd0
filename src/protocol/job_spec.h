// JobSpec: what a user submits (docs/jobspec.md), parsed from YAML or JSON
// and validated strictly; errors start with the field's path (`resources.memory:
// "lots" is not a size`). The text is untrusted: every input is refused or
// accepted within the limits below, and what is accepted is exactly what a
// task gets. Pure functions; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "protocol/job_roles.h"

namespace ringmaster::protocol {

// A file or directory of the files service staged into each task's work
// directory before the task starts (`inputs: [{from: datasets/x, to: data/}]`).
struct JobInput {
  std::string from;  // a files path: one file, or a directory (every file under from/)
  std::string to;    // relative to the task's work directory; "" = from's last segment
  bool operator==(const JobInput&) const = default;
};

struct JobSpec {
  std::string name;
  std::string kind = "train";         // dev | train | distributed
  std::vector<std::string> command;   // argv; a string command becomes {"/bin/sh", "-c", s}; empty: a notebook (dev)
  std::map<std::string, std::string> env;
  // The image a container executor runs the task in (ParseImageRef): one of
  // the site's (`torch`, images/<name>/latest in the files service) or any
  // registry's (`registry.example:5000/lab/torch:2.1`, `ubuntu`, `name@sha256:..`).
  // The server pins it to a digest at submit (`torch@sha256:<hex>`,
  // `host/repo:tag@sha256:<platform manifest>`), so every task and every
  // restart of a job runs the same bytes. "" = no image (the process executor).
  std::string image;
  // What runs the task: "" = any executor that fits (an image needs runc or
  // docker, no image the process executor), or one of process | runc | docker.
  std::string executor;
  // A container's network: "" (the node's container overlay where it has
  // one and runc runs the task, else the host's), "overlay" (only nodes with
  // one), "host" (the node's, where ring all-reduce ports are) or "none"
  // (loopback only; for tasks that need no peers). docs/cluster.md.
  std::string network;
  int64_t cpu_milli = 1000;
  int64_t memory_bytes = 512LL << 20;
  // What the task may keep on its node's disk: its sandbox (work dir,
  // checkpoints, outputs) and, in a container, what it writes to its root.
  // 0 = the node's default (agent --default-task-disk).
  int64_t disk_bytes = 0;
  int64_t pids = 4096;  // processes and threads the task may have at once (its cgroup's pids.max)
  // Bandwidth on the disk of the task's sandbox (`io: {read_bps: 100Mi,
  // write_iops: 500}`), per second; 0 = none (its cgroup's io.max, or v1's blkio.throttle).
  struct Io {
    int64_t read_bps = 0;
    int64_t write_bps = 0;
    int64_t read_iops = 0;
    int64_t write_iops = 0;
    bool operator==(const Io&) const = default;
  };
  Io io;
  int gpus = 0;
  // Accepted GPU types, any of them (`gpu_type: a100` or `gpu_type: [v100, a100]`);
  // each a case-insensitive substring of a node's GPU model.
  std::vector<std::string> gpu_types;
  // Relative speed per GPU type (`gpu_throughput: {v100: 3.1, k80: 1}`): with
  // heterogeneity-aware scheduling the job goes on its fastest type with room.
  std::map<std::string, double> gpu_throughput;
  int replicas = 1;      // for an elastic job: the size it starts at (min_replicas)
  // Elastic jobs (`replicas: {min: 2, max: 8}`): the server grows them into
  // free capacity and shrinks them (not below min) to make room for
  // higher-priority work. 0 = not elastic.
  int min_replicas = 0;
  int max_replicas = 0;
  bool elastic() const { return max_replicas > min_replicas; }
  // Roles (`replicas: {chief: 1, ps: 1, worker: 2}`), in RoleOrder(); their
  // counts add up to replicas. Empty: every task is a worker (job_roles.h).
  std::vector<JobRole> roles;
  // Scaling on measured use (`autoscale: {metric: cpu, scale_up_above: 80,
  // scale_down_below: 30, window: 30s, cooldown: 60s}`), for an elastic job:
  // one replica more when the job's use of `metric` over the window is above
  // scale_up_above, one fewer below scale_down_below, at most once per
  // cooldown. Without it, an elastic job grows into free capacity.
  struct Autoscale {
    std::string metric;  // cpu | gpu | memory (percent of what it holds) | samples_per_s
    double scale_up_above = 80;
    double scale_down_below = 30;
    int64_t window_ms = 30'000;
    int64_t cooldown_ms = 60'000;
    bool operator==(const Autoscale&) const = default;
  };
  std::optional<Autoscale> autoscale;
  int max_restarts = 0;
  int priority = 0;
  // Node labels the job's nodes must have (`node_selector: {rack: r1}`).
  std::map<std::string, std::string> node_selector;
  // A run longer than this is stopped (FAILED); backfill plans with it. 0 = none.
  int64_t time_limit_ms = 0;
  // A notebook (kind dev, no command) ends after this long without activity
  // (Jupyter's own: no kernel, terminal or request). 0 = never.
  int64_t idle_timeout_ms = kDefaultIdleTimeoutMs;
  static constexpr int64_t kDefaultIdleTimeoutMs = 2 * 3600 * 1000;
  // kind dev with no command: the task runs a Jupyter notebook server.
  bool notebook() const { return kind == "dev" && command.empty(); }
  std::string working_dir;            // absolute; "" = the task's own scratch directory
  std::vector<JobInput> inputs;
  // Paths relative to the task's work directory, uploaded to jobs/<id>/outputs/
  // when the task ends, whether it succeeded or not (a leading "outputs/" is
  // dropped: outputs/a.csv lands at jobs/<id>/outputs/a.csv).
  std::vector<std::string> outputs = {"outputs"};
  // Checkpoint directories kept in jobs/<id>/checkpoints/: the newest N (and
  // always the one `latest` names); older ones are deleted. 0 = keep all.
  int keep_checkpoints = 3;

  bool operator==(const JobSpec&) const = default;
};

constexpr int kMaxReplicas = 1024;
constexpr int kMaxRestarts = 100;
constexpr int kMaxPriority = 1000;
constexpr int64_t kMaxPids = 1 << 22;
constexpr int64_t kMinMemoryBytes = 4 << 20;  // resources.memory: the least a task can start in
constexpr int64_t kMinDiskBytes = 1 << 20;    // resources.disk: below this no task gets its files staged
// resources.io: below these a task's every read or write would stall; iops
// as the kernel keeps them (32 bits).
constexpr int64_t kMinIoBytesPerSecond = 1 << 10;
constexpr int64_t kMinIops = 2;
constexpr int64_t kMaxIops = 4294967295;

// Limits on untrusted spec text (docs/jobspec.md#limits).
constexpr size_t kMaxSpecBytes = 1 << 20;          // the text, as the server caps request bodies
constexpr size_t kMaxSpecExpandedBytes = 1 << 20;  // all its strings, YAML aliases expanded
constexpr int kMaxSpecDepth = 32;                  // collections in collections; a valid spec needs 3
// Linux's MAX_ARG_STRLEN less the terminating NUL: the longest string one
// argument, or one NAME=value of the environment, can be for execve.
constexpr size_t kMaxArgBytes = (32 << 12) - 1;
constexpr size_t kMaxPathBytes = 4095;             // PATH_MAX less the NUL
constexpr size_t kMaxInputs = 64;                  // inputs: entries (each may be a directory)
constexpr size_t kMaxOutputs = 64;                 // outputs: entries

// Refuses (InvalidArgument, naming the field) text that is not a valid spec,
// is larger or nests deeper than the limits, expands past
// kMaxSpecExpandedBytes, or holds a string that is not valid UTF-8 or holds
// a NUL byte. What it accepts always goes through JobSpecToJson(...).dump()
// and back through JobSpecFromJson unchanged.
StatusOr<JobSpec> ParseJobSpec(const std::string& text);
nlohmann::json JobSpecToJson(const JobSpec& spec);
// A spec the server validated and stored (JobSpecToJson's text). InvalidArgument
// when the stored text is not such a spec (a damaged or hand-edited database):
// the caller fails that job, never the process.
StatusOr<JobSpec> JobSpecFromJson(const std::string& spec_json);

}  // namespace ringmaster::protocol
