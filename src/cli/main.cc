// The `ringmaster` command: parses the command line and runs one command.
// The long-running ones (up, server, agent) are in daemon.cc; the client
// commands of the REST API in commands.cc, the live view (`top`) in top.cc;
// how the CLI finds the server and its token in connect.cc. Errors print one
// line to stderr and exit 2; `wait` exits 1 when the job failed or was cancelled.
#include <csignal>
#include <CLI/CLI.hpp>

#include <filesystem>
#include <iostream>
#include <istream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "agent/container/docker/docker_runtime.h"
#include "agent/executor/shim.h"
#include "cli/admin.h"
#include "cli/commands.h"
#include "cli/connect.h"
#include "cli/daemon.h"
#include "cli/files.h"
#include "cli/images.h"
#include "cli/registry.h"
#include "cli/nodes.h"
#include "cli/reference.h"
#include "cli/slurm_step.h"
#include "cli/top.h"
#include "cli/version.h"
#include "common/log.h"
#include "net/overlay.h"

namespace ringmaster::cli {
namespace {

// `--config FILE` of up, server and agent: their flags from a TOML file, one
// `long-flag-name = value` a line (`port = 8443`, `label = ["rack=r1"]`);
// a flag on the command line replaces the file's value. CLI11 (2.1) reads a
// config file only for the main app and looks its keys up there, so this
// hands each key that is not a global flag (server, data, ca, ...) to the
// subcommand being run, and refuses what is not one of its flags. Sections
// and dotted keys are refused: they would name, and so run, a subcommand.
class DaemonConfig : public CLI::ConfigTOML {
 public:
  explicit DaemonConfig(const CLI::App* app) : app_(app) {}

  std::vector<CLI::ConfigItem> from_config(std::istream& input) const override {
    std::vector<CLI::ConfigItem> items = CLI::ConfigTOML::from_config(input);
    const std::vector<CLI::App*> cmd = app_->get_subcommands();
    if (cmd.size() != 1 || cmd[0]->get_option_no_throw("--config") == nullptr) {
      throw CLI::ConfigError("only up, server and agent take --config");
    }
    for (CLI::ConfigItem& item : items) {
      if (!item.parents.empty()) {
        throw CLI::ConfigError("\"" + item.parents.front() + "\": no sections or dotted keys, only `flag-name = value` lines");
      }
      if (app_->get_option_no_throw("--" + item.name) != nullptr) continue;
      if (cmd[0]->get_option_no_throw("--" + item.name) == nullptr) {
        throw CLI::ConfigError("\"" + item.name + "\" is not a flag of `ringmaster " + cmd[0]->get_name() + "`");
      }
      item.parents = {cmd[0]->get_name()};
    }
    return items;
  }

 private:
  const CLI::App* app_;
};

}  // namespace

int Main(int argc, char** argv) {
  if (argc >= 3 && std::string(argv[1]) == "shim") return agent::RunShim(argv[2]);
  if (argc >= 2 && std::string(argv[1]) == "docker-attach") return agent::RunDockerAttach(argc, argv);
  // runc's createRuntime hook of a task on the container overlay (net/overlay.h).
  if (argc >= 2 && std::string(argv[1]) == "net-attach") return net::NetAttachMain(argc, argv);

  CLI::App app{"ringmaster: a distributed deep-learning platform"};
  app.require_subcommand(1);
  app.fallthrough();  // global flags (--data, --server, --token) may follow the subcommand
  Connection conn;
  bool verbose = false;
  app.add_option("--server", conn.server,
                 "server URL, or a leader and its standbys comma-separated (https://a:8443,https://b:8443: calls "
                 "go to whichever leads); default: $RINGMASTER_SERVER, else <data>/server.json, else the one server "
                 "you are logged in to");
  app.add_option("--token", conn.token,
                 "API token (default: $RINGMASTER_TOKEN, else your `login` to the server, else <data>/admin.token)");
  app.add_option("--data", conn.data, "the data dir of `ringmaster up` (default: $RINGMASTER_DATA, else /var/lib/ringmaster for root, ~/.ringmaster for others)");
  app.add_option("--ca", conn.ca,
                 "CA certificate to trust for an https server (default: $RINGMASTER_CA, else the one your `login` "
                 "trusted, else <data>/tls/ca.crt)");
  app.add_flag("-v,--verbose", verbose, "debug logging");
  // Read by the main app (see DaemonConfig); each daemon's own --config hands its file over as it is parsed.
  app.set_config("--config")->group("");
  app.config_formatter(std::make_shared<DaemonConfig>(&app));
  auto add_config_flag = [&](CLI::App* cmd) {
    cmd->add_option_function<std::string>(
           "--config", [&app](const std::string& file) { app.get_config_ptr()->add_result(file); },
           "read flags from this TOML file: `flag-name = value` lines, global flags (server, data, ca) included; "
           "the command line wins (default: none)")
        ->trigger_on_parse()
        ->configurable(false);
  };

  ServerFlags srv_flags;
  auto add_server_flags = [&](CLI::App* cmd) {
    cmd->add_option("--port", srv_flags.port, "port (0 = any free port)")->capture_default_str();
    cmd->add_option("--host", srv_flags.host, "address to listen on")->capture_default_str();
    cmd->add_option("--tls-cert", srv_flags.tls_cert, "serve HTTPS with this certificate chain (PEM)");
    cmd->add_option("--tls-key", srv_flags.tls_key, "the certificate's private key (PEM)");
    cmd->add_flag("--tls", srv_flags.tls,
                  "serve HTTPS with a self-signed certificate made in <data>/tls (the default beyond loopback); "
                  "clients trust <data>/tls/ca.crt");
    cmd->add_flag("--insecure-http", srv_flags.insecure_http,
                  "serve plain HTTP even beyond loopback (tokens then cross the network in clear text)");
    cmd->add_option("--max-pending-jobs", srv_flags.max_pending_jobs, "pending jobs one user may have (0 = no limit)")
        ->capture_default_str();
    cmd->add_option("--max-followers-per-user", srv_flags.max_followers,
                    "concurrent `logs -f` streams one user may hold")
        ->capture_default_str();
    cmd->add_option("--max-tokens-per-user", srv_flags.max_tokens, "API tokens one user may have")->capture_default_str();
    cmd->add_option("--default-file-quota", srv_flags.default_file_quota,
                    "what each user's files may use unless an admin sets their quota (`users quota`); 0 = no default")
        ->capture_default_str();
    cmd->add_option("--max-file-size", srv_flags.max_file_size, "what one uploaded file may be")->capture_default_str();
    cmd->add_option("--max-job-log-size", srv_flags.max_job_log_size,
                    "cap on one job's logs together: older attempts' logs are dropped first, then the oldest output "
                    "(0 = no cap)")
        ->capture_default_str();
    cmd->add_option("--node-lost-after", srv_flags.node_lost_after_s,
                    "seconds without the server after which an agent stops its tasks; a lease (10 s) later the server "
                    "restarts them elsewhere. A server away for less (a restart, an upgrade) stops no task "
                    "(docs/cluster.md)")
        ->check(CLI::Range(10.0, 86400.0))
        ->capture_default_str();
    cmd->add_option("--session-ttl", srv_flags.session_ttl_s,
                    "seconds a browser session (the dashboard's login) lasts; logging in again starts a new one")
        ->check(CLI::Range(60.0, 30.0 * 86400))
        ->capture_default_str();
    cmd->add_option("--store,--meta", srv_flags.meta,
                    "the metadata database (users, jobs, ...): sqlite:PATH or a PATH, postgres://USER@HOST:PORT/DB "
                    "(servers on one PostgreSQL elect a leader; the others stand by), or memory: (nothing kept "
                    "across a restart; default: sqlite:<data>/meta.db)");
    cmd->add_option("--server-id", srv_flags.server_id,
                    "this server's name among servers sharing a store (default: HOST:PID:RANDOM)");
    cmd->add_option("--advertise-url", srv_flags.advertise_url,
                    "the URL standbys send clients to while this server leads (default: its own URL)");
    cmd->add_flag("--exit-on-lost-lease", srv_flags.exit_on_stepped_down,
                  "after losing the lease exit with status 75 instead of re-executing as a standby");
    cmd->add_option("--files", srv_flags.files,
                    "where users' files live: local:/DIR, or s3://BUCKET?endpoint=URL[&region=R][&credentials=FILE] "
                    "(credentials else from AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY; default: local:<data>/blobs)");
    // Slurm as the backend (docs/slurm.md).
    cmd->add_option("--backend", srv_flags.backend,
                    "where tasks run: agents (ringmaster agent on each node), or slurm (each job becomes a Slurm "
                    "job; the Slurm commands must work for the server's user)")
        ->check(CLI::IsMember({"agents", "slurm"}))
        ->capture_default_str();
    cmd->add_option("--slurm-conf", srv_flags.slurm_conf, "Slurm's slurm.conf (default: Slurm's own, or $SLURM_CONF)");
    cmd->add_option("--slurm-partition", srv_flags.slurm_partition, "the Slurm partition jobs go to (default: Slurm's)");
    cmd->add_option("--slurm-account", srv_flags.slurm_account, "the Slurm account jobs are charged to");
    cmd->add_option("--slurm-qos", srv_flags.slurm_qos, "the Slurm QOS jobs run under");
    cmd->add_option("--slurm-step-command", srv_flags.slurm_step_command,
                    "the ringmaster binary on Slurm's nodes (default: this binary's path)");
    cmd->add_option("--slurm-step-dir", srv_flags.slurm_step_dir,
                    "a directory on Slurm's nodes for tasks' files while they run (created, 0700)")
        ->capture_default_str();
    cmd->add_option("--slurm-sandbox-root", srv_flags.slurm_sandbox_root,
                    "where tasks' work dirs go on Slurm's nodes (default: as the agent's --sandbox-root)");
    cmd->add_option("--slurm-output", srv_flags.slurm_output,
                    "where Slurm writes the batch jobs' own output (%j: the Slurm job id)")
        ->capture_default_str();
    cmd->add_option("--slurm-max-queued", srv_flags.slurm_max_queued,
                    "jobs that may wait in Slurm's queue at once; the rest wait in Ringmaster's, in its order "
                    "(keep it under the site's Slurm submit limits for the server's user)")
        ->check(CLI::Range(1, 1000000))
        ->capture_default_str();
    cmd->add_option("--slurm-max-queued-per-user", srv_flags.slurm_max_queued_per_user,
                    "of those, at most this many of one user's jobs")
        ->check(CLI::Range(1, 1000000))
        ->capture_default_str();
    cmd->add_option("--overlay-subnet", srv_flags.overlay_subnet,
                    "the container overlay's addresses: a /24 of it per node with agent --network vxlan|ovs-gre")
        ->capture_default_str();
    // The monitor (docs/monitoring.md).
    cmd->add_option("--straggler-factor", srv_flags.straggler_factor,
                    "a rank is a straggler when its step time is above this times the gang's median ...")
        ->check(CLI::Range(1.0, 100.0))
        ->capture_default_str();
    cmd->add_option("--straggler-windows", srv_flags.straggler_windows, "... in this many consecutive windows ...")
        ->check(CLI::Range(1, 100))
        ->capture_default_str();
    cmd->add_option("--straggler-window", srv_flags.straggler_window_s, "... of this many seconds")
        ->check(CLI::Range(1.0, 3600.0))
        ->capture_default_str();
    cmd->add_option("--idle-below", srv_flags.idle_below,
                    "a job's GPUs (or, without GPUs, CPUs) used less than this share are idle ...")
        ->check(CLI::Range(0.0, 1.0))
        ->capture_default_str();
    cmd->add_option("--idle-for", srv_flags.idle_for_s, "... when they stay so for this many seconds (0 = never flagged)")
        ->check(CLI::Range(0.0, 7.0 * 86400))
        ->capture_default_str();
  };
  NodeFlags node;
  auto add_node_flags = [&](CLI::App* cmd) {
    cmd->add_option("--node-name", node.name, "node name (default: hostname)");
    cmd->add_option("--cpus", node.cpus, "CPUs to offer (default: all)");
    cmd->add_option("--memory", node.memory, "memory to offer, e.g. 8Gi (default: all)");
    cmd->add_option("--address", node.address, "address other nodes reach tasks here at (default: this host's)");
    cmd->add_option("--ports", node.ports, "ports the platform may give tasks here")->capture_default_str();
    cmd->add_option("--tunnel-port", node.tunnel_port,
                    "where the server reaches notebooks on this node (0 = any free port, told to the server; -1 = none)")
        ->check(CLI::Range(-1, 65535))
        ->capture_default_str();
    cmd->add_option("--label", node.labels, "a node label key=value that jobs' node_selector can match; repeatable");
    cmd->add_option("--task-uids", node.task_uids,
                    "tasks of Ringmaster user N run as uid LO+N (default 200000-299999 when root; none = only "
                    "--task-user mappings)");
    cmd->add_option("--task-user", node.task_users,
                    "run a user's tasks as an existing account (its uid, gid, groups and home), e.g. "
                    "alice=alice_unix; repeatable");
    cmd->add_option("--task-max-procs", node.task_max_procs, "processes one task uid may have (RLIMIT_NPROC; 0 = no limit)")
        ->capture_default_str();
    cmd->add_option("--sandbox-root", node.sandbox_root,
                    "where task sandboxes live; task users must be able to traverse it "
                    "(default /var/lib/ringmaster/sandboxes when root, else <data>/sandboxes)");
    cmd->add_option("--default-task-disk", node.default_task_disk,
                    "disk a task may fill (its sandbox, a container's root) when its job sets no resources.disk; "
                    "past it the task is stopped (0 = no limit)")
        ->capture_default_str();
    cmd->add_option("--scratch-dir", node.scratch_dir,
                    "where runc containers' writable roots go, each on an image of its task's disk limit; best on a "
                    "file system of its own (default <data>/scratch)");
    cmd->add_option("--input-cache", node.input_cache,
                    "bytes of staged job inputs to keep in <data>/cache for later tasks (by SHA-256)")
        ->capture_default_str();
    cmd->add_option("--max-log-size", node.max_log_size, "cap on each task's log; later output is dropped (0 = no cap)")
        ->capture_default_str();
    cmd->add_option("--network", node.network,
                    "containers' network: host (the node's), vxlan (the kernel's VXLAN overlay across nodes) or "
                    "ovs-gre (Open vSwitch with GRE tunnels; needs its daemons) (docs/cluster.md)")
        ->capture_default_str();
    cmd->add_option("--sample-interval", node.sample_interval_s,
                    "seconds between samples of the node and its tasks (the monitor; 0 = none)")
        ->check(CLI::Range(0.0, 3600.0))
        ->capture_default_str();
    // Only to test how a server refuses an agent of another protocol (docs/install.md, versions).
    cmd->add_option("--protocol-version", node.protocol_version, "the agent protocol to speak")->group("");
    // Release 0.1's fencing share: config files that still set it keep starting the agent.
    cmd->add_option_function<double>(
           "--fence-after-lease",
           [](double) {
             std::cerr << "ringmaster: --fence-after-lease is ignored: agents fence after the server's window "
                          "(server --node-lost-after); drop it from the agent's flags\n";
           },
           "ignored")
        ->group("");
    cmd->add_option("--task-network", node.task_network,
                    "tasks off the overlay: isolated (each job's tasks in a network namespace of their own, reached "
                    "at this node's address and their ports; needs root) or host (the node's network, shared)")
        ->check(CLI::IsMember({"isolated", "host"}))
        ->capture_default_str();
    cmd->add_option("--task-subnet", node.task_subnet, "addresses of the jobs' namespaces on this node (bridge rmtask0)")
        ->capture_default_str();
    cmd->add_option("--task-allow", node.task_allow,
                    "what tasks may reach of this node's addresses and the server's, CIDR[:port],... (default none)");
    cmd->add_option("--task-ephemeral-ports", node.task_ephemeral_ports,
                    "ports forwarded to the jobs' namespaces for their listeners on port 0, 256 a job; outside --ports")
        ->capture_default_str();
    cmd->add_option("--ovs-dir", node.ovs_dir, "Open vSwitch's run directory (db.sock, <bridge>.mgmt), for --network ovs-gre")
        ->capture_default_str();
    cmd->add_option("--executors", node.executors,
                    "how tasks run here, comma-separated: process, runc, docker (jobs with an image need runc or docker)")
        ->capture_default_str();
    cmd->add_option("--docker-socket", node.docker_socket, "the Docker daemon's socket (docker executor)")
        ->capture_default_str();
    cmd->add_option("--runc", node.runc, "the runc binary (runc executor)")->capture_default_str();
    cmd->add_option("--image-cache", node.image_cache, "where pulled images are kept (default <data>/images)");
    cmd->add_option("--gpu-devices", node.gpu_devices, "where the GPUs' device nodes are (nvidiaN, nvidiactl)")
        ->capture_default_str();
    cmd->add_option("--nvml", node.nvml,
                    "the NVIDIA driver's NVML library, by name (searched as dlopen does) or path; it finds the GPUs")
        ->capture_default_str();
    cmd->add_option("--cdi-spec-dirs", node.cdi_spec_dirs,
                    "comma-separated dirs of CDI specs (nvidia-ctk cdi generate; a device in a later dir hides one in "
                    "an earlier): they give GPU containers the driver's libraries (\"\" = none; docs/containers.md)")
        ->capture_default_str();
    cmd->add_flag("--no-limits", node.no_limits, "do not enforce tasks' cpu/memory/pids limits with cgroups");
    cmd->add_option("--cgroup-root", node.cgroup_root,
                    "where the cgroup hierarchies are mounted: cgroup v1's, or v2's unified one (detected)")
        ->capture_default_str();
  };
  SchedulerFlags sched;
  auto add_scheduler_flags = [&](CLI::App* cmd) {
    cmd->add_option("--policy", sched.policy, "queue policy: fifo, priority, backfill or las")->capture_default_str();
    cmd->add_option("--scores", sched.scores,
                    "score plugins and weights (default binpack=1,locality=1,load-aware=0.5; also spread)");
    cmd->add_option("--quota", sched.quotas, "a user's guaranteed share, e.g. alice:gpus=4,cpus=16[,borrow=no]; repeatable");
    cmd->add_flag("--no-preemption", sched.no_preemption, "never preempt running jobs");
    cmd->add_flag("--heterogeneity-aware", sched.heterogeneity_aware,
                  "place jobs with gpu_throughput on their fastest GPU type with room");
    cmd->add_option("--elastic-scale-up-below", sched.scale_up_below,
                    "elastic jobs grow while nothing waits and the cluster is less allocated than this")
        ->check(CLI::Range(0.0, 1.0))
        ->capture_default_str();
    cmd->add_option("--elastic-scale-down-above", sched.scale_down_above,
                    "above this allocated share, elastic workers beyond min yield to equal-priority jobs too")
        ->check(CLI::Range(0.0, 1.0))
        ->capture_default_str();
  };
  auto add_registry_flags = [&](CLI::App* cmd, bool server, bool agent) {
    cmd->add_option("--registry-ca", node.registry_ca,
                    "PEM CA certificates to trust for https registries, besides the system's (default: none)");
    cmd->add_option("--insecure-registry", node.insecure_registries,
                    "a registry (host[:port]) reached over plain http; repeat for more (default: none)");
    cmd->add_option("--allowed-registries", node.allowed_registries,
                    "the only registries jobs may name: host[:port] or *.domain, comma-separated (default: any)")
        ->delimiter(',');
    if (server) {
      cmd->add_option("--secrets-key", node.secrets_key,
                      "the key file that seals users' registry passwords (32 bytes, 0600, made if absent; keep it off "
                      "the database's disk and backups; default: <data>/secrets.key)");
    }
    if (agent) {
      cmd->add_option("--layer-cache-size", node.layer_cache_size,
                      "unpacked layers of registry images kept on this node; least recently used go past it")
          ->capture_default_str();
      cmd->add_option("--max-layer-size", node.max_layer_size,
                      "what one layer may unpack to: a layer past it fails its task's start (a decompression bomb)")
          ->capture_default_str();
    }
  };
  auto* up = app.add_subcommand("up", "run a server and a local agent (one machine, SQLite + local files)");
  add_config_flag(up);
  add_server_flags(up);
  add_node_flags(up);
  add_registry_flags(up, true, true);
  add_scheduler_flags(up);
  auto* server_cmd = app.add_subcommand("server", "run the server alone");
  add_config_flag(server_cmd);
  add_server_flags(server_cmd);
  add_registry_flags(server_cmd, true, false);
  add_scheduler_flags(server_cmd);
  server_cmd->add_option("--max-log-size", node.max_log_size, "cap on each task's log (0 = no cap)")->capture_default_str();
  auto* agent_cmd = app.add_subcommand("agent", "run an agent that serves a server");
  add_config_flag(agent_cmd);
  std::string token_file;
  agent_cmd->add_option("--token-file", token_file,
                        "file holding this node's agent token (ringmaster tokens create --scope agent --node NAME)")
      ->required();
  add_node_flags(agent_cmd);
  add_registry_flags(agent_cmd, false, true);
  // The server's Slurm backend starts it (one per rank of a gang, in an srun
  // step), never a person: hidden, in no group.
  auto* slurm_step = app.add_subcommand("slurm-step", "run one rank's task inside a Slurm step (the server submits it)")
                         ->group("");
  StepFlags step_flags;
  slurm_step->add_option("--ca-file", step_flags.ca_file, "CA certificate of an https server");
  slurm_step->add_option("--node-prefix", step_flags.node_prefix, "the node is PREFIX<rank> (rank: $SLURM_PROCID)")
      ->required();
  slurm_step->add_option("--data-dir", step_flags.data_dir, "each rank's agent data in DIR/<job id>.<rank>")->required();
  slurm_step->add_option("--sandbox-root", step_flags.sandbox_root,
                         "where tasks' sandboxes go (default: as the agent's --sandbox-root)");
  slurm_step->add_option("--gpu-devices", step_flags.gpu_devices,
                         "where the GPUs' device nodes are (default: as the agent's --gpu-devices)");
  slurm_step->add_option("--assign-timeout", step_flags.assign_timeout_s, "exit 3 when no task came within S seconds")
      ->capture_default_str();
  slurm_step->add_option("--grace", step_flags.grace_s, "on SIGTERM: seconds from the task's SIGTERM to its SIGKILL")
      ->capture_default_str();

  auto* submit = app.add_subcommand("submit", "submit a job spec (YAML or JSON; - for stdin); prints the job id");
  std::string spec_file;
  bool no_workdir = false;
  submit->add_option("file", spec_file, "job spec")->required();
  submit->add_flag("--no-workdir", no_workdir, "do not default working_dir to the current directory");

  int64_t job_id = 0;
  bool as_json = false, all = false;
  auto* ls = app.add_subcommand("ls", "list your jobs");
  ls->add_flag("--json", as_json, "print JSON");
  ls->add_flag("-a,--all", all, "every user's jobs (admins)");
  auto* show = app.add_subcommand("show", "show a job: state, reasons, tasks and events");
  show->add_option("id", job_id, "job id")->required();
  show->add_flag("--json", as_json, "print JSON");
  auto* dev = app.add_subcommand("dev", "dev environments (kind: dev jobs)");
  dev->require_subcommand(1);
  auto* dev_open = dev->add_subcommand("open", "print the URL of a running dev job's notebook");
  dev_open->add_option("id", job_id, "job id")->required();
  auto* logs = app.add_subcommand("logs", "print a job's logs, each line prefixed by its task's rank");
  bool follow = false;
  int rank = -1;
  logs->add_option("id", job_id, "job id")->required();
  logs->add_flag("-f,--follow", follow, "stream until the job ends");
  logs->add_option("--rank", rank, "only this rank");
  auto* files = app.add_subcommand("files", "users' files: put, get, ls, rm, cat, du (paths: users/<you>/..., "
                                            "datasets/..., jobs/<id>/...; other paths are under users/<you>/)");
  files->require_subcommand(1);
  std::string file_a, file_b;
  bool recursive = false;
  auto* files_put = files->add_subcommand("put", "upload a file or a directory (recursively)");
  files_put->add_option("local", file_a, "file or directory")->required();
  files_put->add_option("remote", file_b, "where (default: its name under users/<you>/)");
  auto* files_get = files->add_subcommand("get", "download a file or a directory");
  files_get->add_option("remote", file_a, "file or directory")->required();
  files_get->add_option("local", file_b, "where (default: its name, here)");
  auto* files_ls = files->add_subcommand("ls", "list files under a prefix: size, time, path");
  files_ls->add_option("prefix", file_a, "prefix (default: users/<you>/)");
  files_ls->add_flag("--json", as_json, "print JSON");
  auto* files_rm = files->add_subcommand("rm", "delete a file (-r: everything under a directory)");
  files_rm->add_option("remote", file_a, "file")->required();
  files_rm->add_flag("-r,--recursive", recursive, "everything under remote/");
  auto* files_cat = files->add_subcommand("cat", "print a file");
  files_cat->add_option("remote", file_a, "file")->required();
  auto* files_du = files->add_subcommand("du", "bytes and files under a prefix");
  files_du->add_option("prefix", file_a, "prefix (default: users/<you>/)");
  auto* files_reconcile = files->add_subcommand(
      "reconcile", "admin: recount every user's file usage (quotas) from what the store holds");

  auto* cancel = app.add_subcommand("cancel", "cancel a job and wait until its tasks are gone");
  bool no_wait = false;
  double timeout_s = 0;
  cancel->add_option("id", job_id, "job id")->required();
  cancel->add_flag("--no-wait", no_wait, "return once the request is accepted");
  auto* del = app.add_subcommand("delete", "delete an ended job with its logs");
  del->add_option("id", job_id, "job id")->required();
  auto* wait = app.add_subcommand("wait", "wait for a job to end; exit 0 if it succeeded, 1 if not");
  wait->add_option("id", job_id, "job id")->required();
  wait->add_option("--timeout", timeout_s, "give up after this many seconds (exit 2)");
  auto* nodes = app.add_subcommand("nodes", "list the cluster's nodes; cordon, drain or delete one (admins)");
  nodes->add_flag("--json", as_json, "print JSON");
  std::string node_name, node_reason;
  double drain_timeout_s = 600;
  bool force = false;
  auto* nodes_cordon = nodes->add_subcommand("cordon", "give a node no new work (what runs there stays)");
  auto* nodes_uncordon = nodes->add_subcommand("uncordon", "let a cordoned or drained node take new work again");
  auto* nodes_drain = nodes->add_subcommand(
      "drain", "cordon a node and move its jobs away (elastic ones shrink off it, others checkpoint and restart "
               "elsewhere); waits until it is empty");
  auto* nodes_delete = nodes->add_subcommand(
      "delete", "forget a node that is gone: its tasks are lost now, and their jobs restart elsewhere (a silent node "
               "still holding tasks needs --force)");
  for (CLI::App* cmd : {nodes_cordon, nodes_uncordon, nodes_drain, nodes_delete}) {
    cmd->add_option("node", node_name, "the node's name (or id)")->required();
  }
  for (CLI::App* cmd : {nodes_cordon, nodes_drain}) {
    cmd->add_option("--reason", node_reason, "why, shown in `nodes` and in the reasons of pending jobs");
  }
  nodes_drain->add_option("--timeout", drain_timeout_s, "give up waiting after this many seconds (exit 1; it keeps draining)")
      ->capture_default_str();
  nodes_drain->add_flag("--no-wait", no_wait, "return once the drain has begun");
  nodes_delete->add_flag("--force", force,
                         "you know the host is down: its tasks are lost now, not when its agent's window is out");
  auto* whoami = app.add_subcommand("whoami", "show who the token belongs to");
  auto* version = app.add_subcommand("version", "print this CLI's version and commit, and the server's when one answers "
                                                "(exit 0 without one, unless --server named it)");
  VersionFlags version_flags;
  version->add_flag("--client", version_flags.client_only, "this CLI's only; do not ask a server");
  version->add_flag("--json", version_flags.as_json, "print JSON");
  auto* top = app.add_subcommand("top", "a live view of the nodes and of your running and pending jobs "
                                        "(admins: everyone's); q quits");
  TopFlags top_flags;
  top->add_option("--interval", top_flags.interval_s, "seconds between redraws")
      ->check(CLI::Range(0.1, 3600.0))
      ->capture_default_str();
  top->add_flag("--once", top_flags.once, "print one frame as plain text and exit (also when stdout is not a terminal)");

  auto* users = app.add_subcommand("users", "manage users (admins)");
  users->require_subcommand(1);
  auto* users_create = users->add_subcommand("create", "create a user");
  std::string user_name, role = "user", token_name = "cli";
  bool password_stdin = false;
  users_create->add_option("name", user_name, "user name")->required();
  users_create->add_option("--role", role, "admin or user")->capture_default_str();
  users_create->add_flag("--password-stdin", password_stdin, "read a password from stdin (for `login`)");
  auto* users_ls = users->add_subcommand("ls", "list users");
  auto* users_disable = users->add_subcommand("disable", "disable a user: their tokens and password stop working at once");
  users_disable->add_option("name", user_name, "user name")->required();
  auto* users_quota = users->add_subcommand("quota", "set the bytes a user's files may use (0 or none: no quota)");
  std::string quota_size;
  users_quota->add_option("name", user_name, "user name")->required();
  users_quota->add_option("size", quota_size, "e.g. 100Gi, 500Mi; 0 or none for no quota")->required();
  auto* users_enable = users->add_subcommand("enable", "enable a disabled user again");
  users_enable->add_option("name", user_name, "user name")->required();
  auto* users_set = users->add_subcommand("set", "grant a user privileges: a higher job priority, the host's network");
  std::optional<int> max_priority;
  std::string host_network;
  users_set->add_option("name", user_name, "user name")->required();
  users_set->add_option("--max-priority", max_priority,
                        "the highest priority their jobs may ask for, -1000..1000 (default for every user: 0)")
      ->check(CLI::Range(-1000, 1000));
  users_set->add_option("--host-network", host_network, "whether their jobs may use network: host")
      ->check(CLI::IsMember({"yes", "no"}));

  auto* tokens = app.add_subcommand("tokens", "manage API tokens");
  tokens->require_subcommand(1);
  auto* tokens_create = tokens->add_subcommand("create", "create a token; prints it alone on stdout");
  std::string scope, node_for;
  tokens_create->add_option("--user", user_name, "for this user (admins)");
  tokens_create->add_option("--name", token_name, "a label for the token")->capture_default_str();
  tokens_create->add_option("--scope", scope,
                            "read, submit, admin, agent or metrics (/metrics only, for Prometheus) (default: all the user may have; agent needs --node)");
  tokens_create->add_option("--node", node_for, "agent tokens: the node the agent runs as");
  auto* tokens_ls = tokens->add_subcommand("ls", "list your tokens");
  tokens_ls->add_option("--user", user_name, "this user's tokens (admins)");
  tokens_ls->add_flag("-a,--all", all, "every user's tokens (admins)");
  auto* tokens_revoke = tokens->add_subcommand("revoke", "revoke a token (yours; admins: anyone's)");
  int64_t token_id = 0;
  tokens_revoke->add_option("id", token_id, "token id")->required();
  auto* images = app.add_subcommand("images", "the site's own images for tasks, built from Debian packages and kept in the files "
                                              "service, and your own pushed from a saved tar (registries: `image: "
                                              "HOST/REPO:TAG`, `ringmaster registry`): build, push, ls");
  images->require_subcommand(1);
  std::string image_name, image_dir = "images";
  auto* images_build = images->add_subcommand("build", "build base, torch, tfjs, tensorflow or mxnet with mmdebstrap into --out (as root)");
  images_build->add_option("name", image_name, "base, torch, tfjs, tensorflow or mxnet")->required();
  images_build->add_option("--out", image_dir, "where NAME.tar and NAME.json go")->capture_default_str();
  auto* images_push = images->add_subcommand("push", "store a built image in the files service as images/NAME/ (admins), or your own from a "
                                                "`docker save` or OCI layout tar (--from FILE.tar) as users/YOU/images/");
  std::string image_user;
  images_push->add_option("name", image_name, "image name (NAME[:TAG] for a tar: default what the tar names)");
  images_push->add_option("--from", image_dir,
                          "a directory with the site's NAME.tar and NAME.json, or your image as a `docker save` or "
                          "OCI layout tar")->capture_default_str();
  images_push->add_option("--user", image_user, "whose images a tar goes into (default: yours)");
  auto* images_ls = images->add_subcommand("ls", "the images jobs can name");
  auto* registry_cmd = app.add_subcommand("registry", "your logins to OCI registries, for your jobs' images (the "
                                                    "password is kept sealed on the server): login, logout, ls");
  registry_cmd->require_subcommand(1);
  std::string registry_host, registry_user;
  bool registry_site = false;
  auto* registry_login = registry_cmd->add_subcommand(
      "login", "keep a login to REGISTRY (host[:port]; docker.io for Docker Hub) on the server; the password or "
               "access token is read from stdin");
  registry_login->add_option("registry", registry_host, "the registry, host[:port]")->required();
  registry_login->add_option("-u,--username", registry_user, "the user name at the registry")->required();
  registry_login->add_flag("--site", registry_site, "the site's login, for every user without one (admins)");
  auto* registry_logout = registry_cmd->add_subcommand("logout", "remove your (or with --site the site's) login to REGISTRY");
  registry_logout->add_option("registry", registry_host, "the registry, host[:port]")->required();
  registry_logout->add_flag("--site", registry_site, "the site's login (admins)");
  auto* registry_ls = registry_cmd->add_subcommand("ls", "your registry logins and the site's (never their passwords)");
  registry_ls->add_flag("--json", as_json, "print JSON");
  auto* login = app.add_subcommand("login", "exchange a user's password (on stdin) for a token that later commands "
                                            "use for this server (kept in ~/.config/ringmaster/credentials.json, or under $XDG_CONFIG_HOME)");
  login->add_option("user", user_name, "user name")->required();
  bool print_token = false;
  login->add_flag("--print-token", print_token, "print the token on stdout and keep it nowhere (for scripts)");
  auto* logout = app.add_subcommand("logout", "forget the token `login` kept for this server, and revoke it there");
  auto* audit = app.add_subcommand("audit", "the audit log: logins, token and user changes, admin actions (admins)");
  std::string audit_action;
  int audit_limit = 50;
  audit->add_option("--user", user_name, "only what this user did");
  audit->add_option("--action", audit_action, "only this action (login, token.create, user.disable, ...)");
  audit->add_option("-n,--limit", audit_limit, "newest entries to show")->capture_default_str();
  audit->add_flag("--json", as_json, "print JSON");

  auto* admin = app.add_subcommand("admin", "operate the server's metadata store directly, on its machine: backup, "
                                            "migrate (docs/operations.md)");
  admin->require_subcommand(1);
  std::string meta_url, backup_to, migrate_from, migrate_to;
  bool online = false;
  auto* admin_backup = admin->add_subcommand(
      "backup", "copy the SQLite metadata database while the server runs (a consistent snapshot, 0600); "
                "PostgreSQL: prints the pg_dump to run");
  admin_backup->add_option("--meta", meta_url, "the store: sqlite:PATH or a PATH (default: sqlite:<data>/meta.db)");
  admin_backup->add_option("--to", backup_to, "the backup file (written as FILE.tmp, then renamed)")->required();
  auto* admin_migrate = admin->add_subcommand(
      "migrate", "copy every row of one metadata store into an empty other (ids kept), e.g. from sqlite:PATH to "
                 "postgres://...; stop the server first");
  admin_migrate->add_option("--from", migrate_from, "the store to copy: sqlite:PATH, a PATH or postgres://...")->required();
  admin_migrate->add_option("--to", migrate_to, "the empty store to copy into")->required();
  admin_migrate->add_flag("--online", online,
                          "the SQLite source's server is running: copy a snapshot of it as it is now (what it writes "
                          "later is not copied)");

  // docs/cli.md (`make cli-docs`); hidden: in no group.
  auto* cli_reference = app.add_subcommand("cli-reference", "print the CLI's reference page (Markdown)")->group("");

  try {
    app.parse(argc, argv);
  } catch (const CLI::FileError& e) {  // only --config reads a file while parsing
    Die(std::string("--config: ") + e.what());
  } catch (const CLI::ConfigError& e) {
    const std::vector<std::string>& files = app.get_config_ptr()->results();
    Die("--config " + (files.empty() ? "" : files.front()) + ": " + e.what());
  } catch (const CLI::ParseError& e) {
    // A value the file gave is checked like the command line's: say where to look.
    if (e.get_exit_code() != 0 && !app.get_config_ptr()->results().empty()) {
      Die(std::string(e.what()) + " (from the command line or --config " + app.get_config_ptr()->results().front() + ")");
    }
    int rc = app.exit(e);
    return rc == 0 ? 0 : kExitError;
  }
  InitLogging(verbose);
  InstallCrashHandler();

  if (*cli_reference) {
    WriteCliReference(app, std::cout);
    return 0;
  }
  if (*admin_backup) return AdminBackup(conn.data, meta_url, backup_to);
  if (*admin_migrate) return AdminMigrate(migrate_from, migrate_to, online);
  if (*up) return RunUp(conn.data, srv_flags, node, sched, true);
  if (*server_cmd) return RunUp(conn.data, srv_flags, node, sched, false);
  if (*agent_cmd) {
    std::string server = conn.server;
    if (server.empty() && getenv("RINGMASTER_SERVER")) server = getenv("RINGMASTER_SERVER");
    if (server.empty()) Die("agent: --server URL is required");
    std::string ca = conn.ca;
    if (ca.empty() && getenv("RINGMASTER_CA")) ca = getenv("RINGMASTER_CA");
    return RunAgent(server, token_file, ca, conn.data, node);
  }
  if (*slurm_step) {
    step_flags.server = conn.server;
    if (step_flags.server.empty()) Die("slurm-step: --server URL is required");
    return RunSlurmStep(step_flags);
  }
  if (*submit) return Submit(conn, spec_file, no_workdir);
  if (*images_build) return ImagesBuild(image_name, image_dir);
  if (*images_push) {
    std::error_code ec;
    if (std::filesystem::is_regular_file(image_dir, ec)) return ImagesPushTar(conn, image_name, image_dir, image_user);
    if (image_name.empty()) Die("images push: NAME is required with a directory (--from DIR)");
    return ImagesPush(conn, image_name, image_dir);
  }
  if (*images_ls) return ImagesLs(conn);
  if (*registry_login) return RegistryLogin(conn, registry_host, registry_user, registry_site);
  if (*registry_logout) return RegistryLogout(conn, registry_host, registry_site);
  if (*registry_ls) return RegistryLs(conn, as_json);
  if (*files_put) return FilesPut(conn, file_a, file_b);
  if (*files_get) return FilesGet(conn, file_a, file_b);
  if (*files_ls) return FilesLs(conn, file_a, as_json);
  if (*files_rm) return FilesRm(conn, file_a, recursive);
  if (*files_cat) return FilesCat(conn, file_a);
  if (*files_du) return FilesDu(conn, file_a);
  if (*files_reconcile) return FilesReconcile(conn);
  if (*logs) return Logs(conn, job_id, follow, rank);
  if (*wait) return Wait(conn, job_id, timeout_s, false);

  if (*login) return Login(conn, user_name, token_name, print_token);
  if (*logout) return Logout(conn);
  if (*ls) return Ls(conn, all, as_json);
  if (*show) return Show(conn, job_id, as_json);
  if (*dev_open) return DevOpen(conn, job_id);
  if (*cancel) return Cancel(conn, job_id, no_wait);
  if (*del) return Delete(conn, job_id);
  if (*nodes_cordon) return NodesCordon(conn, node_name, node_reason);
  if (*nodes_uncordon) return NodesUncordon(conn, node_name);
  if (*nodes_drain) return NodesDrain(conn, node_name, node_reason, drain_timeout_s, no_wait);
  if (*nodes_delete) return NodesDelete(conn, node_name, force);
  if (*nodes) return Nodes(conn, as_json);
  if (*whoami) return Whoami(conn);
  if (*version) return Version(conn, version_flags);
  if (*top) return Top(conn, top_flags);
  if (*users_create) return UsersCreate(conn, user_name, role, password_stdin);
  if (*users_ls) return UsersLs(conn);
  if (*users_disable) return UsersSetDisabled(conn, user_name, true);
  if (*users_quota) return UsersQuota(conn, user_name, quota_size);
  if (*users_enable) return UsersSetDisabled(conn, user_name, false);
  if (*users_set) return UsersSet(conn, user_name, max_priority, host_network);
  if (*tokens_create) return TokensCreate(conn, user_name, token_name, scope, node_for);
  if (*tokens_ls) return TokensLs(conn, user_name, all);
  if (*tokens_revoke) return TokensRevoke(conn, token_id);
  if (*audit) return Audit(conn, user_name, audit_action, audit_limit, as_json);
  return 0;
}

}  // namespace ringmaster::cli

int main(int argc, char** argv) {
  // A peer that closes its socket (a server answering 413 before reading a
  // whole upload, a reader of `files cat` that stops) is an error to handle,
  // never a signal that ends the process: the server and agent included.
  std::signal(SIGPIPE, SIG_IGN);
  return ringmaster::cli::Main(argc, argv);
}
