// The long-running commands: `ringmaster up` (server and a local agent),
// `ringmaster server` and `ringmaster agent`, with their flags. Each blocks
// until SIGINT or SIGTERM; tasks keep running when it stops.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "agent/agent.h"
#include "agent/executor/process_executor.h"
#include "protocol/agent.h"

namespace ringmaster::cli {

struct NodeFlags {
  std::string name;
  std::string cpus;
  std::string memory;
  std::string address;
  std::string ports = "31000-31999";  // below the kernel's ephemeral ports (32768+ by default)
  int tunnel_port = 0;  // notebooks' tunnel (agent/lab_tunnel.h): 0 = any free port, -1 = none
  std::vector<std::string> labels;  // key=value
  // Who tasks run as and where (docs/isolation.md).
  std::string task_uids;                  // "" = 200000-299999 when root
  std::vector<std::string> task_users;    // user=account
  int64_t task_max_procs = 4096;
  std::string sandbox_root;               // "" = /var/lib/ringmaster/sandboxes when root
  // Tasks' disk (docs/isolation.md#disk): the limit of a job that sets no
  // resources.disk ("0" = none), and where runc containers' upper dirs go.
  std::string default_task_disk = "20Gi";
  std::string scratch_dir;                // "" = <data>/scratch
  std::string max_log_size = "64Mi";
  std::string input_cache = "20Gi";       // the node's cache of staged inputs
  // How tasks run here (docs/containers.md): process, runc, docker.
  std::string executors = "process";
  std::string docker_socket = "/var/run/docker.sock";
  std::string runc = "runc";
  std::string image_cache;                // "" = <data>/images
  // Images from registries (docs/containers.md): server and agent alike.
  std::string registry_ca;                       // PEM CAs to trust besides the system's
  std::vector<std::string> insecure_registries;  // host[:port] reached over plain http
  std::vector<std::string> allowed_registries;   // host[:port] or *.domain jobs may name; empty = any
  std::string secrets_key;                       // server: "" = <data>/secrets.key
  std::string layer_cache_size = "100Gi";        // agent: unpacked layers kept (LRU past it)
  std::string max_layer_size = "64Gi";           // agent: what one layer may unpack to
  std::string gpu_devices = "/dev";       // where nvidiaN, nvidiactl, nvidia-uvm are
  std::string nvml = "libnvidia-ml.so.1";  // the NVIDIA driver's NVML, dlopen'ed (a name or a path)
  std::string cdi_spec_dirs = "/etc/cdi,/var/run/cdi";  // CDI specs for GPUs in containers ("" = none)
  bool no_limits = false;                 // tasks' cgroup limits off (not recommended)
  std::string cgroup_root = "/sys/fs/cgroup";  // cgroup v1's hierarchies or v2's mount
  // Containers' network (docs/cluster.md): host, vxlan or ovs-gre.
  std::string network = "host";
  std::string ovs_dir = "/var/run/openvswitch";
  // Tasks off the overlay (docs/cluster.md, "A job's network"): isolated
  // (a namespace per job; needs root) or host.
  std::string task_network = "isolated";
  std::string task_subnet = "10.213.0.0/16";
  std::string task_allow;
  std::string task_ephemeral_ports = "40000-47999";
  int protocol_version = protocol::kAgentProtocol;  // another only to test version skew (a hidden flag)
  double sample_interval_s = 1;    // the monitor's sampling of the node and its tasks (0 = none)
};

// Flags of `up` and `server` beyond the scheduler's.
struct ServerFlags {
  std::string host = "127.0.0.1";
  int port = 8080;
  std::string tls_cert, tls_key;
  bool tls = false;
  bool insecure_http = false;
  int64_t max_pending_jobs = 500;
  int max_followers = 32;
  int64_t max_tokens = 100;
  std::string meta;   // store::OpenMetaStore URL (--store); "" = sqlite:<data>/meta.db
  // Among servers sharing a store: this one's id and the URL clients are sent
  // to ("" = defaults, server::ElectionOptions); after stepping down exit 75
  // instead of re-executing (for supervisors that restart it themselves).
  std::string server_id, advertise_url;
  bool exit_on_stepped_down = false;
  std::string files;  // files::OpenBlobStore URL; "" = local:<data>/blobs
  std::string default_file_quota = "100Gi";  // users' files without a quota of their own (0 = none)
  std::string max_file_size = "16Gi";        // one uploaded file
  std::string max_job_log_size = "256Mi";    // one job's logs together
  std::string overlay_subnet = "10.244.0.0/16";
  // The monitor: stragglers and idle allocations (monitor::MonitorOptions).
  double straggler_factor = 1.5;
  int straggler_windows = 3;
  double straggler_window_s = 10;
  double idle_below = 0.05;
  double idle_for_s = 600;
  // A node silent this long is lost (its agent has stopped its tasks): they
  // restart elsewhere; a server away for less stops nothing (docs/cluster.md).
  double node_lost_after_s = 300;
  double session_ttl_s = 12 * 3600;  // browser sessions (the dashboard) end this long after login
  // Where tasks run: "agents", or "slurm" (docs/slurm.md) with Slurm's
  // configuration, where jobs go, the ringmaster binary and a scratch
  // directory on Slurm's nodes, the batch jobs' own output, and how many
  // jobs may wait in Slurm's queue at once.
  std::string backend = "agents";
  std::string slurm_conf, slurm_partition, slurm_account, slurm_qos;
  std::string slurm_step_command;  // "" = this binary's path
  std::string slurm_step_dir = "/var/lib/ringmaster/slurm";
  std::string slurm_sandbox_root;  // "" = the agent's default
  std::string slurm_output = "/dev/null";
  int slurm_max_queued = 1000;
  int slurm_max_queued_per_user = 100;
};

struct SchedulerFlags {
  std::string policy = "backfill";
  std::string scores;               // "binpack=1,locality=1"
  std::vector<std::string> quotas;  // "alice:gpus=4,cpus=16,borrow=no"
  bool no_preemption = false;
  bool heterogeneity_aware = false;
  double scale_up_below = 0.7;
  double scale_down_above = 0.9;
};

// An agent's options and its executor's from the node's flags; a bad flag
// dies with one line naming it. `agent` and `slurm-step` (slurm_step.h) alike.
struct AgentSetup {
  agent::AgentOptions agent;
  agent::ProcessExecutorOptions executor;
};
AgentSetup MakeAgentOptions(const NodeFlags& f, const std::string& server, const std::string& token,
                            const std::string& data);
std::unique_ptr<agent::Agent> MakeAgent(const AgentSetup& setup);

int RunUp(const std::string& data, const ServerFlags& flags, const NodeFlags& node, const SchedulerFlags& sched,
          bool with_agent);
int RunAgent(const std::string& server, const std::string& token_file, const std::string& ca, const std::string& data,
             const NodeFlags& node);

}  // namespace ringmaster::cli
