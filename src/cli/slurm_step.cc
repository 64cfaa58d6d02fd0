#include "cli/slurm_step.h"

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <iostream>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "cli/connect.h"
#include "cli/daemon.h"
#include "agent/executor/safe_fs.h"
#include "common/strings.h"

extern char** environ;

namespace ringmaster::cli {
namespace {

constexpr const char* kTokensVar = "RINGMASTER_STEP_TOKENS";

std::string Get(const std::map<std::string, std::string>& env, const std::string& name) {
  auto it = env.find(name);
  return it == env.end() ? "" : it->second;
}

// A whole non-negative decimal number (no sign, no suffix); nullopt otherwise.
std::optional<int64_t> Count(const std::string& text) {
  if (text.empty() || text.size() > 15 || text.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  return std::stoll(text);
}

StatusOr<int64_t> Required(const std::map<std::string, std::string>& env, const std::string& name, bool positive) {
  const std::string v = Get(env, name);
  if (v.empty()) return InvalidArgument(name + " is not set (is this an srun step?)");
  auto n = Count(v);
  if (!n || (positive && *n == 0)) {
    return InvalidArgument(fmt::format("{}: \"{}\" is not a{} whole number", name, v, positive ? " positive" : ""));
  }
  return *n;
}

// The node's indices (nvidiaN) of the GPUs Slurm bound to this rank. The
// task runs in Ringmaster's cgroup, outside Slurm's device confinement, so it
// is given them as an agent gives a task its GPUs: by these physical indices,
// with every other GPU device denied. SLURM_STEP_GPUS and SLURM_JOB_GPUS hold
// Slurm's global indices; CUDA_VISIBLE_DEVICES counts from 0 where Slurm
// confines devices, so it is used only when neither is set.
StatusOr<std::vector<int>> SlurmGpus(const std::map<std::string, std::string>& env) {
  std::string var = "SLURM_STEP_GPUS";
  if (!env.count(var)) var = env.count("SLURM_JOB_GPUS") ? "SLURM_JOB_GPUS" : "CUDA_VISIBLE_DEVICES";
  const std::string value = Get(env, var);
  if (var == "CUDA_VISIBLE_DEVICES" && value == "NoDevFiles") {
    return InvalidArgument(
        "CUDA_VISIBLE_DEVICES: \"NoDevFiles\": Slurm bound GPUs that have no device files (gres.conf File=), which "
        "tasks cannot use");
  }
  std::vector<int> out;
  if (value.empty()) return out;
  for (const std::string& name : Split(value, ',', {.skip_empty = false, .trim = true})) {
    auto index = Count(name);
    if (!index || *index > 1'000'000) return InvalidArgument(fmt::format("{}: \"{}\" is not a list of GPU indices", var, value));
    out.push_back(static_cast<int>(*index));
  }
  return out;
}

// A TCP port free on this host now: the task's (port_lo = port_hi).
StatusOr<int> FreePort() {
  agent::UniqueFd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) return Internal(fmt::format("socket: {}", std::strerror(errno)));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  socklen_t len = sizeof addr;
  if (bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      getsockname(fd.get(), reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    return Internal(fmt::format("finding a free port: {}", std::strerror(errno)));
  }
  return static_cast<int>(ntohs(addr.sin_port));
}

std::map<std::string, std::string> Environment() {
  std::map<std::string, std::string> env;
  for (char** e = environ; e && *e; ++e) {
    const std::string kv = *e;
    const size_t eq = kv.find('=');
    if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return env;
}

// Makes (or finds) `path` and checks it is a directory (not a symlink) of
// this user's that nobody else may write, under ancestors nobody else could
// swap (OpenTrustedDir). The root shim trusts what lies in it (tasks' specs,
// cached inputs it links into sandboxes): a directory another user pre-made
// at a known path would let that user swap them.
Status OwnOnlyDir(const std::string& path) {
  RM_ASSIGN_OR_RETURN(agent::UniqueFd fd, agent::OpenTrustedDir(path, /*create=*/true, 0700));
  struct stat st {};
  if (lstat(path.c_str(), &st) != 0) return Internal(fmt::format("{}: {}", path, std::strerror(errno)));
  if (!S_ISDIR(st.st_mode)) return PermissionDenied(fmt::format("{} is not a directory (a symlink?)", path));
  if (st.st_uid != geteuid() || (st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    return PermissionDenied(fmt::format("{} is owned by uid {} with mode {:04o}; it must be uid {}'s, writable by it only",
                                        path, st.st_uid, st.st_mode & 07777, geteuid()));
  }
  return Status::Ok();
}

// The rank's data dir goes when the wrapper does, whichever way it ends.
struct RemoveOnExit {
  std::string dir;
  ~RemoveOnExit() {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
    if (ec) spdlog::warn("slurm-step: removing {}: {}", dir, ec.message());
  }
};

}  // namespace

StatusOr<agent::AgentOptions> StepAgentOptions(const std::map<std::string, std::string>& env, const StepFlags& flags,
                                               agent::AgentOptions base) {
  agent::AgentOptions o = std::move(base);
  if (flags.server.empty()) return InvalidArgument("--server: the server's URL is required");
  if (flags.node_prefix.empty()) return InvalidArgument("--node-prefix is required");
  if (flags.data_dir.empty()) return InvalidArgument("--data-dir is required");
  RM_ASSIGN_OR_RETURN(const int64_t rank, Required(env, "SLURM_PROCID", false));
  RM_ASSIGN_OR_RETURN(const int64_t job, Required(env, "SLURM_JOB_ID", true));
  const std::string slurm_node = Get(env, "SLURMD_NODENAME");
  if (slurm_node.empty()) return InvalidArgument("SLURMD_NODENAME is not set (is this an srun step?)");
  RM_ASSIGN_OR_RETURN(const int64_t cpus, Required(env, "SLURM_CPUS_PER_TASK", true));
  int64_t memory_mib = 0;
  if (env.count("SLURM_MEM_PER_CPU")) {
    RM_ASSIGN_OR_RETURN(const int64_t per_cpu, Required(env, "SLURM_MEM_PER_CPU", true));
    memory_mib = per_cpu * cpus;
  } else if (env.count("SLURM_MEM_PER_NODE")) {
    RM_ASSIGN_OR_RETURN(memory_mib, Required(env, "SLURM_MEM_PER_NODE", true));
  } else {
    return InvalidArgument("SLURM_MEM_PER_CPU is not set, nor SLURM_MEM_PER_NODE (submit with --mem-per-cpu)");
  }
  RM_ASSIGN_OR_RETURN(const std::vector<int> gpus, SlurmGpus(env));

  const std::string tokens = Get(env, kTokensVar);
  if (tokens.empty()) return InvalidArgument(std::string(kTokensVar) + " is not set (the batch script exports it)");
  const std::vector<std::string> token_list = Split(tokens, ',', {.skip_empty = false, .trim = true});
  if (static_cast<size_t>(rank) >= token_list.size() || token_list[rank].empty()) {
    return InvalidArgument(fmt::format("{}: no token for rank {} (it holds {})", kTokensVar, rank, token_list.size()));
  }

  o.server_url = flags.server;
  o.ca_file = flags.ca_file;
  o.token = token_list[rank];
  o.node_name = flags.node_prefix + std::to_string(rank);
  o.data_dir = fmt::format("{}/{}.{}", flags.data_dir, job, rank);
  o.cpu_milli = cpus * 1000;
  o.memory_bytes = memory_mib << 20;
  o.labels = {{"slurm.job", std::to_string(job)}, {"slurm.node", slurm_node}, {"slurm.rank", std::to_string(rank)}};
  // The GPU type of --gpus-per-task=<type>:<n>, where the job named one.
  const std::string per_task = Get(env, "SLURM_GPUS_PER_TASK");
  const size_t colon = per_task.find(':');
  const std::string model = colon == std::string::npos ? "slurm gres gpu" : per_task.substr(0, colon);
  o.gpus = std::vector<agent::GpuInfo>();
  for (int index : gpus) o.gpus->push_back({index, model, 0, ""});
  // Notebooks need the server to reach a tunnel on the node: not through
  // Slurm's allocations. Containers' overlays neither: tasks use the host's network.
  o.tunnel_port = -1;
  o.network = "host";
  return o;
}

int RunSlurmStep(const StepFlags& flags) {
  // Without root, TaskUsers would run every user's task as this one uid.
  if (geteuid() != 0) Die("slurm-step runs as root (Slurm's jobs of a root server): it runs each task as its user's own uid");
  // Blocked before any thread starts, so that only sigtimedwait below sees them.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  const std::map<std::string, std::string> env = Environment();
  unsetenv(kTokensVar);  // nothing started from here on sees the tokens
  if (flags.assign_timeout_s <= 0) Die("--assign-timeout: must be > 0 seconds");
  if (flags.grace_s < 0) Die("--grace: must be >= 0 seconds");
  StepFlags abs = flags;
  if (!abs.data_dir.empty()) abs.data_dir = std::filesystem::absolute(abs.data_dir).lexically_normal().string();

  // The ordinary agent's defaults (task users, executor, registries), then the step's.
  NodeFlags node;
  // Each rank's wrapper is an agent of its own, so a namespace per wrapper
  // would split the ranks that Slurm put on one host; the network between
  // a Slurm job's tasks is the site's Slurm's to police (the job's secret
  // still guards ringcomm's rendezvous).
  node.task_network = "host";
  node.sandbox_root = flags.sandbox_root;
  if (!flags.gpu_devices.empty()) node.gpu_devices = flags.gpu_devices;
  AgentSetup setup = MakeAgentOptions(node, flags.server, "", "");
  auto step = StepAgentOptions(env, abs, std::move(setup.agent));
  if (!step.ok()) Die(step.status().message());
  setup.agent = std::move(*step);
  agent::AgentOptions& o = setup.agent;
  auto port = FreePort();
  if (!port.ok()) Die(port.status().message());
  o.port_lo = o.port_hi = *port;
  setup.executor.state_dir = o.data_dir;

  // A leftover of the same job and rank (a wrapper killed outright) is not
  // re-adopted: the server counts that rank's attempt as over. Removed only
  // once the directory holding it is known to be ours.
  if (Status st = OwnOnlyDir(abs.data_dir); !st.ok()) Die("--data-dir: " + st.message());
  std::error_code ec;
  std::filesystem::remove_all(o.data_dir, ec);
  if (Status st = OwnOnlyDir(o.data_dir); !st.ok()) Die("--data-dir: " + st.message());
  RemoveOnExit remove{o.data_dir};
  std::vector<int> gpus;
  for (const agent::GpuInfo& g : *o.gpus) gpus.push_back(g.index);
  spdlog::info("slurm-step: node {} ({} cpus, {} MiB, {} gpus [{}], port {}) for Slurm job {} on {}", o.node_name,
               o.cpu_milli / 1000, o.memory_bytes >> 20, o.gpus->size(), fmt::join(gpus, ","), o.port_lo,
               o.labels["slurm.job"], o.labels["slurm.node"]);

  auto agent = MakeAgent(setup);
  agent->Start();
  const auto started = std::chrono::steady_clock::now();
  const auto assign_timeout = std::chrono::milliseconds(std::llround(flags.assign_timeout_s * 1000));
  for (;;) {
    // A short tick: the step holds its Slurm slot until it sees its task over.
    timespec tick{0, 20'000'000};
    const int sig = sigtimedwait(&set, nullptr, &tick);
    if (sig == SIGTERM || sig == SIGINT) {
      spdlog::info("slurm-step: {}: stopping the task ({} s grace); its end is Slurm's to tell", strsignal(sig),
                   flags.grace_s);
      agent->Abandon(std::chrono::milliseconds(std::llround(flags.grace_s * 1000)));
      return kStepSignalled;
    }
    const agent::Agent::Held held = agent->Holding();
    if (held.ever_assigned && held.held == 0) {
      agent->Stop();
      spdlog::info("slurm-step: node {}: its task is over", o.node_name);
      return kStepDone;
    }
    if (!held.ever_assigned && std::chrono::steady_clock::now() - started > assign_timeout) {
      agent->Stop();
      std::cerr << fmt::format("ringmaster slurm-step: no task was assigned to node {} within {} s\n", o.node_name,
                               flags.assign_timeout_s);
      return kStepNoTask;
    }
  }
}

}  // namespace ringmaster::cli
