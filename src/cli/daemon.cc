#include "cli/daemon.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>
#include <sys/utsname.h>

#include <filesystem>
#include <iostream>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "agent/agent.h"
#include "agent/container/cdi.h"
#include "agent/container/docker/docker_runtime.h"
#include "agent/container/runc/runc_runtime.h"
#include "agent/executor/process_executor.h"
#include "agent/node/node_info.h"
#include "cli/connect.h"
#include "common/files.h"
#include "common/strings.h"
#include "common/units.h"
#include "net/overlay.h"
#include "scheduler/scheduler.h"
#include "server/server.h"
#include "slurm/slurm.h"

namespace ringmaster::cli {
namespace {

// This machine's platform as OCI names it (linux/amd64, linux/arm64/v8): an
// image index is resolved for it. A cluster's nodes share one architecture.
registry::Platform HostPlatform() {
  registry::Platform p;
  struct utsname u {};
  if (uname(&u) == 0) {
    const std::string m = u.machine;
    if (m == "x86_64") p.architecture = "amd64";
    else if (m == "aarch64" || m == "arm64") p.architecture = "arm64", p.variant = "v8";
    else if (m == "ppc64le") p.architecture = "ppc64le";
    else if (m == "s390x") p.architecture = "s390x";
    else p.architecture = m;
  }
  return p;
}

void BlockStopSignals(sigset_t* set) {
  sigemptyset(set);
  sigaddset(set, SIGINT);
  sigaddset(set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, set, nullptr);
}

int WaitForStopSignal(const sigset_t& set) {
  int sig = 0;
  sigwait(&set, &sig);
  spdlog::info("received {}, shutting down (running tasks keep running)", sig == SIGINT ? "SIGINT" : "SIGTERM");
  return 0;
}


// --task-network and its flags.
void SetTaskNetwork(const NodeFlags& f, agent::AgentOptions* o) {
  o->task_network = f.task_network;
  if (o->task_network == "isolated" && geteuid() != 0) {
    spdlog::warn("agent: tasks share this host's network (--task-network isolated needs root)");
    o->task_network = "host";
  }
  if (!net::ParseCidr(f.task_subnet).ok()) Die("--task-subnet: \"" + f.task_subnet + "\" is not a network like 10.213.0.0/16");
  o->task_subnet = f.task_subnet;
  if (auto allow = net::ParseAllowList(f.task_allow); !allow.ok()) Die(allow.status().message());
  o->task_allow = f.task_allow;
  int lo = 0, hi = 0;
  if (sscanf(f.task_ephemeral_ports.c_str(), "%d-%d", &lo, &hi) != 2 || lo < 1024 || hi > 65535 || hi - lo < 255) {
    Die("--task-ephemeral-ports: \"" + f.task_ephemeral_ports + "\" is not a range of 256 ports or more, like 40000-47999");
  }
  if (lo <= o->port_hi && o->port_lo <= hi) {
    Die("--task-ephemeral-ports: " + f.task_ephemeral_ports + " overlaps --ports");
  }
  o->task_ephemeral_lo = lo;
  o->task_ephemeral_hi = hi;
}

}  // namespace

AgentSetup MakeAgentOptions(const NodeFlags& f, const std::string& server, const std::string& token,
                            const std::string& data) {
  AgentSetup setup;
  agent::AgentOptions& o = setup.agent;
  o.server_url = server;
  o.token = token;
  o.data_dir = data;
  o.node_name = f.name;
  if (!f.cpus.empty()) {
    auto c = ParseCpuMilli(f.cpus);
    if (!c || *c <= 0) Die("--cpus: \"" + f.cpus + "\" is not a CPU count (e.g. 4 or 0.5)");
    o.cpu_milli = *c;
  }
  o.address = f.address;
  if (!net::IsNetworkMode(f.network)) Die("--network: \"" + f.network + "\" is not host, vxlan or ovs-gre");
  o.network = f.network;
  o.ovs_dir = f.ovs_dir;
  o.self_exe = SelfExe();
  o.protocol_version = f.protocol_version;
  o.sample_interval = std::chrono::milliseconds(static_cast<int64_t>(f.sample_interval_s * 1000));
  if (o.network != "host") {
    if (o.address.empty()) Die("--network " + o.network + ": give --address, this node's IPv4 address on the network between nodes");
    if (!net::ParseIpv4(o.address)) {
      Die("--address: \"" + o.address + "\" is not an IPv4 address (the overlay's tunnels end there)");
    }
    if (f.executors.find("runc") == std::string::npos) {
      Die("--network " + o.network + ": the overlay joins runc containers; add runc to --executors");
    }
  }
  for (const std::string& kv : f.labels) {
    const size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) Die("--label: \"" + kv + "\" is not key=value (e.g. rack=r1)");
    o.labels[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  o.tunnel_port = f.tunnel_port;
  if (sscanf(f.ports.c_str(), "%d-%d", &o.port_lo, &o.port_hi) != 2 || o.port_lo < 1 || o.port_hi > 65535 ||
      o.port_lo > o.port_hi) {
    Die("--ports: \"" + f.ports + "\" is not a port range like 31000-31999");
  }
  SetTaskNetwork(f, &o);
  if (!f.memory.empty()) {
    auto m = ParseBytes(f.memory);
    if (!m || *m <= 0) Die("--memory: \"" + f.memory + "\" is not a size (e.g. 8Gi)");
    o.memory_bytes = *m;
  }
  {
    auto c = ParseBytes(f.input_cache);
    if (!c || *c < 0) Die("--input-cache: \"" + f.input_cache + "\" is not a size (e.g. 20Gi)");
    o.input_cache_bytes = *c;
  }
  auto users = agent::TaskUsers::Create({f.task_uids, f.task_users});
  if (!users.ok()) Die(users.status().message());
  o.task_users = *users;

  agent::ProcessExecutorOptions& e = setup.executor;
  e.state_dir = data;
  e.sandbox_root = f.sandbox_root.empty() ? "" : std::filesystem::absolute(f.sandbox_root).lexically_normal().string();
  // The shim starts once per task: its own small binary when installed beside
  // this one (it loads a few libraries, not all of ours), else `ringmaster shim`.
  e.runtime_from = SelfExe();
  const std::string small_shim = (std::filesystem::path(e.runtime_from).parent_path() / "ringmaster-shim").string();
  e.shim_binary = access(small_shim.c_str(), X_OK) == 0 ? small_shim : e.runtime_from;
  auto cap = ParseBytes(f.max_log_size);
  if (!cap || *cap < 0) Die("--max-log-size: \"" + f.max_log_size + "\" is not a size (e.g. 64Mi; 0 = no cap)");
  e.max_log_bytes = *cap;
  auto disk = ParseBytes(f.default_task_disk);
  if (!disk || *disk < 0) Die("--default-task-disk: \"" + f.default_task_disk + "\" is not a size (e.g. 20Gi; 0 = none)");
  e.default_task_disk = *disk;
  const std::string scratch =
      f.scratch_dir.empty() ? data + "/scratch" : std::filesystem::absolute(f.scratch_dir).lexically_normal().string();
  if (f.task_max_procs < 0) Die("--task-max-procs: must be >= 0 (0 = no limit)");
  e.max_procs = f.task_max_procs;
  e.limits = !f.no_limits;
  e.cgroup_root = std::filesystem::absolute(f.cgroup_root).lexically_normal().string();
  e.gpu_device_dir = f.gpu_devices;
  o.nvml_library = f.nvml;
  if (!f.cdi_spec_dirs.empty()) {
    std::vector<std::string> dirs;
    for (std::string dir : Split(f.cdi_spec_dirs, ',', {.skip_empty = false})) {
      if (dir.empty() || dir[0] != '/') Die("--cdi-spec-dirs: \"" + dir + "\" is not an absolute path");
      dirs.push_back(dir);
    }
    e.cdi = std::make_shared<agent::CdiRegistry>(std::move(dirs));
    for (const agent::GpuInfo& g : agent::DetectGpus(f.nvml)) {
      if (!g.uuid.empty()) e.gpu_uuids[g.index] = g.uuid;
    }
  }
  o.image_cache_dir = f.image_cache.empty() ? "" : std::filesystem::absolute(f.image_cache).lexically_normal().string();
  o.registry.ca_file = f.registry_ca.empty() ? "" : std::filesystem::absolute(f.registry_ca).string();
  o.registry.insecure = f.insecure_registries;
  o.registry.allowed = f.allowed_registries;
  o.registry.platform = HostPlatform();
  o.registry.docker_socket = f.docker_socket;
  auto layers = ParseBytes(f.layer_cache_size);
  if (!layers || *layers <= 0) Die("--layer-cache-size: \"" + f.layer_cache_size + "\" is not a size (e.g. 100Gi)");
  o.layer_cache_bytes = static_cast<uint64_t>(*layers);
  auto layer = ParseBytes(f.max_layer_size);
  if (!layer || *layer <= 0) Die("--max-layer-size: \"" + f.max_layer_size + "\" is not a size (e.g. 64Gi)");
  o.unpack_limits.max_bytes = static_cast<uint64_t>(*layer);
  bool process = false;
  for (const std::string& name : Split(f.executors, ',', {.skip_empty = false})) {
    if (name == "process") {
      process = true;
    } else if (name == "runc") {
      auto runc = agent::RuncRuntime::Find(f.runc);
      if (!runc.ok()) Die("--executors: " + runc.status().message());
      e.runtimes["runc"] = std::make_shared<agent::RuncRuntime>(*runc, data + "/runc", scratch);
    } else if (name == "docker") {
      auto d = std::make_shared<agent::DockerRuntime>(f.docker_socket, e.runtime_from);
      if (Status st = d->Check(); !st.ok()) Die("--executors: " + st.message() + " (--docker-socket " + f.docker_socket + ")");
      e.runtimes["docker"] = d;
    } else {
      Die("--executors: \"" + name + "\" is not an executor (process, runc, docker)");
    }
  }
  if (!process) Die("--executors: must include process (tasks without an image run as processes)");
  return setup;
}

std::unique_ptr<agent::Agent> MakeAgent(const AgentSetup& setup) {
  auto executor = agent::ProcessExecutor::Create(setup.executor);
  if (!executor.ok()) Die(executor.status().message());
  for (const std::string& tool : (*executor)->runtime().staged) {
    spdlog::info("agent: staged {} for tasks in {}/runtime", tool, (*executor)->sandbox_dir());
  }
  if (setup.executor.cdi) {
    // What GPU containers will get: each spec, and (logged by Refresh) each broken one.
    const auto cdi = setup.executor.cdi->Refresh();
    for (const std::string& spec : cdi.loaded) spdlog::info("agent: CDI spec {}", spec);
    if (cdi.loaded.empty() && !setup.executor.gpu_uuids.empty()) {
      spdlog::info("agent: no CDI specs (--cdi-spec-dirs): GPU containers get the GPUs' device nodes but not the "
                   "driver's libraries (nvidia-ctk cdi generate; docs/containers.md)");
    }
  }
  return std::make_unique<agent::Agent>(setup.agent, std::move(*executor));
}

namespace {



// The scheduler's configuration from flags; a bad flag dies with one line.
scheduler::SchedulerConfig MakeSchedulerConfig(const SchedulerFlags& f) {
  scheduler::SchedulerConfig c;
  c.policy = f.policy;
  c.preemption = !f.no_preemption;
  c.heterogeneity_aware = f.heterogeneity_aware;
  if (!f.scores.empty()) {
    c.scores.clear();
    for (std::string item : Split(f.scores, ',', {.skip_empty = false})) {
      const size_t eq = item.find('=');
      double w = 1;
      if (eq != std::string::npos) {
        char* end = nullptr;
        w = std::strtod(item.c_str() + eq + 1, &end);
        if (end == item.c_str() + eq + 1 || *end != '\0') Die("--scores: \"" + item + "\" is not name=weight (e.g. binpack=1)");
      }
      c.scores.push_back({item.substr(0, eq), w});
    }
  }
  for (const std::string& q : f.quotas) {
    const size_t colon = q.find(':');
    if (colon == std::string::npos || colon == 0) Die("--quota: \"" + q + "\" is not user:gpus=N,cpus=N[,borrow=no]");
    scheduler::Quota quota;
    for (std::string item : Split(q.substr(colon + 1), ',', {.skip_empty = false})) {
      const size_t eq = item.find('=');
      const std::string key = item.substr(0, eq), value = eq == std::string::npos ? "" : item.substr(eq + 1);
      if (key == "gpus") {
        char* end = nullptr;
        long v = std::strtol(value.c_str(), &end, 10);
        if (value.empty() || *end != '\0' || v < 0) Die("--quota: gpus=\"" + value + "\" is not a GPU count");
        quota.gpus = static_cast<int>(v);
      } else if (key == "cpus") {
        auto milli = ParseCpuMilli(value);
        if (!milli || *milli < 0) Die("--quota: cpus=\"" + value + "\" is not a CPU quantity (e.g. 16 or 500m)");
        quota.cpu_milli = *milli;
      } else if (key == "borrow" && (value == "yes" || value == "no")) {
        quota.borrow = value == "yes";
      } else {
        Die("--quota: \"" + item + "\" is not gpus=N, cpus=N or borrow=yes|no");
      }
    }
    c.quotas[q.substr(0, colon)] = quota;
  }
  auto made = scheduler::Scheduler::Create(c);
  if (!made.ok()) Die("scheduler: " + made.status().message());
  return c;
}

// A server that stepped down comes back as a clean standby: the same
// program with the same arguments. Its descriptors (the port first) close
// on the way, so the new process can bind again.
[[noreturn]] void ReExecute() {
  std::vector<std::string> args;
  if (auto cmdline = ReadFile("/proc/self/cmdline"); cmdline.ok()) {
    size_t start = 0;
    for (size_t i = 0; i < cmdline->size(); ++i) {
      if ((*cmdline)[i] == '\0') {
        args.push_back(cmdline->substr(start, i - start));
        start = i + 1;
      }
    }
  }
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    const int fd = std::atoi(entry.path().filename().c_str());
    if (fd > 2) fcntl(fd, F_SETFD, FD_CLOEXEC);
  }
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  spdlog::error("re-executing as a standby");
  execv("/proc/self/exe", argv.data());
  spdlog::critical("re-executing failed ({}): exiting", std::strerror(errno));
  _exit(75);
}

}  // namespace

int RunUp(const std::string& data_in, const ServerFlags& flags, const NodeFlags& node, const SchedulerFlags& sched,
          bool with_agent) {
  sigset_t set;
  BlockStopSignals(&set);
  std::string data = std::filesystem::absolute(data_in.empty() ? DefaultDataDir() : data_in).string();
  const std::string& host = flags.host;
  server::ServerOptions so;
  so.data_dir = data;
  so.host = host;
  so.port = flags.port;
  so.tls_cert = flags.tls_cert;
  so.tls_key = flags.tls_key;
  so.tls = flags.tls;
  so.insecure_http = flags.insecure_http;
  if (auto cap = ParseBytes(node.max_log_size); cap && *cap >= 0) so.max_log_bytes = *cap;
  so.jobs.max_pending_jobs_per_user = flags.max_pending_jobs;
  so.jobs.node_lost_after_ms = static_cast<int64_t>(flags.node_lost_after_s * 1000);
  so.limits.max_followers_per_user = flags.max_followers;
  so.limits.max_tokens_per_user = flags.max_tokens;
  auto file_quota = ParseBytes(flags.default_file_quota);
  if (!file_quota || *file_quota < 0) Die("--default-file-quota: \"" + flags.default_file_quota + "\" is not a size (e.g. 100Gi; 0 = none)");
  so.limits.default_file_quota = *file_quota;
  auto file_size = ParseBytes(flags.max_file_size);
  if (!file_size || *file_size <= 0) Die("--max-file-size: \"" + flags.max_file_size + "\" is not a size (e.g. 16Gi)");
  so.limits.max_file_bytes = static_cast<uint64_t>(*file_size);
  auto job_logs = ParseBytes(flags.max_job_log_size);
  if (!job_logs || *job_logs < 0) Die("--max-job-log-size: \"" + flags.max_job_log_size + "\" is not a size (e.g. 256Mi; 0 = no cap)");
  so.max_job_log_bytes = *job_logs;
  so.session_ttl_ms = static_cast<int64_t>(flags.session_ttl_s * 1000);
  so.meta_url = flags.meta;
  so.registries.ca_file = node.registry_ca.empty() ? "" : std::filesystem::absolute(node.registry_ca).string();
  so.registries.insecure = node.insecure_registries;
  so.registries.allowed = node.allowed_registries;
  so.registries.platform = HostPlatform();
  so.secrets_key = node.secrets_key;
  so.files_url = flags.files;
  if (flags.backend == "slurm") {
    // The batch jobs run as the server's user, and their steps run each task
    // as its user's own uid: only root's jobs can (docs/slurm.md).
    if (geteuid() != 0) Die("--backend slurm: the server runs as root (its Slurm jobs run each task as its user's uid)");
    // Tasks run in Slurm's allocations: `up` runs no agent of its own.
    with_agent = false;
    so.slurm = slurm::NewCliClient({"", flags.slurm_conf});
    so.jobs.max_handed_over = flags.slurm_max_queued;
    so.jobs.max_handed_over_per_user = flags.slurm_max_queued_per_user;
    server::SlurmBackendOptions& sb = so.slurm_backend;
    sb.server_url = flags.advertise_url;
    sb.step_command = flags.slurm_step_command.empty() ? SelfExe() : flags.slurm_step_command;
    sb.step_data_dir = flags.slurm_step_dir;
    sb.sandbox_root = flags.slurm_sandbox_root;
    sb.output = flags.slurm_output;
    sb.partition = flags.slurm_partition;
    sb.account = flags.slurm_account;
    sb.qos = flags.slurm_qos;
  }
  so.election.id = flags.server_id;
  so.election.url = flags.advertise_url;
  so.on_stepped_down = [exit_code = flags.exit_on_stepped_down](const std::string&) {
    if (exit_code) _exit(75);
    ReExecute();
  };
  auto subnet = net::ParseCidr(flags.overlay_subnet);
  if (!subnet.ok()) Die("--overlay-subnet: " + subnet.status().message());
  if (net::BlockCount(*subnet, so.jobs.overlay_block_prefix) == 0) {
    Die("--overlay-subnet: " + flags.overlay_subnet + " is smaller than one node's block (/" +
        std::to_string(so.jobs.overlay_block_prefix) + ")");
  }
  so.jobs.overlay_subnet = *subnet;
  so.jobs.scheduler = MakeSchedulerConfig(sched);
  so.jobs.elastic_scale_up_below = sched.scale_up_below;
  so.jobs.elastic_scale_down_above = sched.scale_down_above;
  so.monitor.straggler_factor = flags.straggler_factor;
  so.monitor.straggler_windows = flags.straggler_windows;
  so.monitor.straggler_window_ms = static_cast<int64_t>(flags.straggler_window_s * 1000);
  so.monitor.idle_below = flags.idle_below;
  so.monitor.idle_for_ms = static_cast<int64_t>(flags.idle_for_s * 1000);
  // Flags are looked for at least once per straggler window.
  so.jobs.usage_eval_interval_ms = std::min<int64_t>(so.jobs.usage_eval_interval_ms, so.monitor.straggler_window_ms);
  // Bad agent flags die here, before the server prints that it is up.
  if (with_agent) (void)MakeAgentOptions(node, "", "", data + "/agent");
  // On a shared store an unreachable database is waited out, not fatal: a
  // server that stepped down (or whose machine rebooted) during an outage
  // comes back as a standby once the database does. A stop signal still ends it.
  const bool shared_store = so.meta_url.rfind("postgres", 0) == 0;
  auto srv_owner = std::make_unique<server::Server>(so);
  for (int backoff_s = 1;; backoff_s = std::min(backoff_s * 2, 10)) {
    Status st = srv_owner->Start();
    if (st.ok()) break;
    const bool transient = st.code() == StatusCode::kUnavailable || st.code() == StatusCode::kDeadlineExceeded;
    if (!shared_store || !transient) Die(st.message());
    spdlog::warn("the metadata store is unreachable ({}); trying again in {} s", st.message(), backoff_s);
    srv_owner.reset();
    timespec wait{backoff_s, 0};
    if (sigtimedwait(&set, nullptr, &wait) > 0) return 0;  // stopped while waiting
    srv_owner = std::make_unique<server::Server>(so);
  }
  server::Server& srv = *srv_owner;
  std::unique_ptr<agent::Agent> agent;
  if (with_agent) {
    // On a shared store the server stands by until it holds the lease: the
    // local agent's token is written by the leader (at most a lease's wait,
    // when this server's previous process still held it).
    if (auto st = srv.AwaitLeading(std::chrono::seconds(30)); !st.ok()) {
      Die(st.message() + ": `ringmaster up` runs its agent beside the leader; run `ringmaster server` for a standby");
    }
    NodeFlags local = node;
    // One machine: tasks meet where the server listens (unless it listens everywhere).
    if (local.address.empty() && host != "0.0.0.0") local.address = host;
    // The local agent gets a token that can act only as this node's agent.
    if (local.name.empty()) local.name = agent::DetectNode().name;
    auto token = srv.LocalAgentToken(local.name);
    if (!token.ok()) Die("agent token: " + token.status().message());
    AgentSetup setup = MakeAgentOptions(local, srv.url(), *token, data + "/agent");
    setup.agent.ca_file = srv.ca_path();
    agent = MakeAgent(setup);
    agent->Start();
    std::cerr << fmt::format("ringmaster is up at {} with a local agent; data in {}\n"
                             "  try: ringmaster --data {} submit examples/hello.yaml\n",
                             srv.url(), data, data);
  }
  WaitForStopSignal(set);
  if (agent) agent->Stop();
  srv.Stop();
  return 0;
}

int RunAgent(const std::string& server, const std::string& token_file, const std::string& ca, const std::string& data_in,
             const NodeFlags& node) {
  sigset_t set;
  BlockStopSignals(&set);
  auto token = ReadFile(token_file);
  if (!token.ok()) Die("--token-file: cannot read " + token_file);
  if (server.rfind("https://", 0) != 0 && server.rfind("http://127.", 0) != 0 && server.rfind("http://localhost", 0) != 0) {
    spdlog::warn("agent: {} is plain HTTP beyond loopback: the agent token crosses the network in clear text", server);
  }
  std::string data = std::filesystem::absolute(data_in.empty() ? DefaultDataDir() + "/agent" : data_in).string();
  AgentSetup setup = MakeAgentOptions(node, server, Trim(*token), data);
  setup.agent.ca_file = ca;
  auto agent = MakeAgent(setup);
  agent->Start();
  WaitForStopSignal(set);
  agent->Stop();
  return 0;
}

}  // namespace ringmaster::cli
