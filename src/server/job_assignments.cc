// JobService's side of the agents' long-poll: the tasks placed on a node,
// each with everything its agent needs to run it (argv, image, limits, GPU
// indices) and its environment, which carries the conventions of every
// framework the platform supports (ringcomm, torch.distributed, Horovod/MPI
// style ranks, MXNet's ps-lite). Split from job_service.cc.
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>

#include "common/crypto.h"
#include "common/strings.h"
#include "server/job_service.h"
#include "server/lab_proxy.h"

namespace ringmaster::server {

using store::Desired;
using store::Job;
using store::Task;

namespace {

// "0,1" -> {0, 1}: a task's GPU indices as stored.
std::vector<int> GpuIndices(const std::string& text) {
  std::vector<int> out;
  for (const std::string& index : Split(text, ',')) out.push_back(std::atoi(index.c_str()));
  return out;
}

// Where the gang's other tasks come from, as `task`'s filter sees them: a
// container's overlay address, else the address of its node (what leaves a
// job's namespace there is masqueraded as the node). Tasks on `task`'s node
// share its namespace and are no peers. `shared_address`: another node of the
// gang off the overlay has this node's address, or a loopback one (several
// agents on one host, as tests and one-machine trials run them), so a
// namespace per node could not reach the others: the task keeps the host's
// network.
struct GangPeers {
  std::vector<std::string> addresses;
  bool shared_address = false;
};
StatusOr<GangPeers> Peers(store::MetaStore* store, const Task& task, const std::vector<Task>& gang) {
  std::set<std::string> out;
  GangPeers p;
  std::string own;
  for (const Task& t : gang) {
    if (t.id == task.id || t.node_id == 0) continue;
    if (!t.overlay_ip.empty()) {
      out.insert(t.overlay_ip);
    } else if (t.node_id != task.node_id) {
      RM_ASSIGN_OR_RETURN(store::Node n, store->GetNode(t.node_id));
      if (own.empty() && task.node_id != 0) {
        RM_ASSIGN_OR_RETURN(store::Node mine, store->GetNode(task.node_id));
        own = mine.address.empty() ? "-" : mine.address;
      }
      if (!n.address.empty()) out.insert(n.address);
      // A loopback address is every namespace's own: one of those cannot
      // reach another node's namespace either.
      const bool loopback = n.address.rfind("127.", 0) == 0 || n.address == "::1" || n.address == "localhost";
      if (task.overlay_ip.empty() && (n.address.empty() || n.address == own || own == "-" || loopback)) {
        p.shared_address = true;
      }
    }
  }
  p.addresses.assign(out.begin(), out.end());
  return p;
}

// A task's network (protocol::Assignment::network): the overlay where it has
// an address; `network: host` (a privilege checked at submit) and `none` as
// asked; else its job's own namespace on the node, unless the gang's nodes
// share an address (Peers).
std::string TaskNetwork(const protocol::JobSpec& spec, const Task& t, bool shared_address) {
  if (!t.overlay_ip.empty()) return "overlay";
  if (spec.network == "none" || spec.network == "host") return spec.network;
  return shared_address ? "host" : "job";
}

}  // namespace

StatusOr<nlohmann::json> JobService::Assignments(int64_t node_id) {
  std::lock_guard<std::mutex> l(mu_);
  RM_RETURN_IF_ERROR(store_->GetNode(node_id).status());
  const uint64_t index = NodeIndex(node_id);  // read under mu_: no change can slip between it and the list
  RM_ASSIGN_OR_RETURN(auto placed, store_->ListPlacedTasks());
  nlohmann::json tasks = nlohmann::json::array();
  std::map<int64_t, Job> jobs;
  std::map<int64_t, std::vector<Task>> gangs;
  std::map<int64_t, std::string> users;
  for (const Task& t : placed) {
    if (t.node_id != node_id) continue;
    if (!jobs.count(t.job_id)) {
      RM_ASSIGN_OR_RETURN(jobs[t.job_id], store_->GetJob(t.job_id));
    }
    const Job& job = jobs[t.job_id];
    auto spec_or = SpecLocked(job);
    if (!spec_or.ok()) continue;  // the scheduler fails that job
    const protocol::JobSpec& spec = **spec_or;
    if (!gangs.count(t.job_id)) {
      RM_ASSIGN_OR_RETURN(gangs[t.job_id], store_->ListTasks(t.job_id));
    }
    RM_ASSIGN_OR_RETURN(auto env, TaskEnvironment(job, spec, t, gangs[t.job_id]));
    RM_ASSIGN_OR_RETURN(auto peers, Peers(store_, t, gangs[t.job_id]));
    if (!users.count(job.user_id)) {
      auto u = store_->GetUser(job.user_id);
      users[job.user_id] = u.ok() ? u->name : "";
    }
    // Who the task runs as: the agent maps the user to a uid of its own
    // (agent --task-uids / --task-user) and never runs a task as root.
    nlohmann::json user = {{"id", job.user_id}, {"name", users[job.user_id]}};
    tasks.push_back({{"task_id", t.id},
                     {"user", user},
                     {"job_id", t.job_id},
                     {"rank", t.rank},
                     {"attempt", t.attempt},
                     {"desired", t.desired == Desired::kStop ? "stop" : "run"},
                     {"argv", spec.notebook() ? NotebookCommand(job.id, spec.idle_timeout_ms) : spec.command},
                     {"env", env},
                     {"working_dir", spec.working_dir},
                     {"image", spec.image},
                     {"executor", spec.executor},
                     {"network", TaskNetwork(spec, t, peers.shared_address)},
                     {"overlay_address", t.overlay_ip},
                     {"peers", peers.addresses},
                     {"limits", {{"cpu_milli", spec.cpu_milli}, {"memory_bytes", spec.memory_bytes}, {"pids", spec.pids},
                                 {"io_read_bps", spec.io.read_bps}, {"io_write_bps", spec.io.write_bps},
                                 {"io_read_iops", spec.io.read_iops}, {"io_write_iops", spec.io.write_iops},
                                 {"disk_bytes", spec.disk_bytes}}},
                     {"gpus", GpuIndices(t.gpu_indices)},
                     {"stop_grace_ms", job.resize_to > 0 ? options_.checkpoint_grace_ms : options_.stop_grace_ms}});
  }
  return nlohmann::json{{"index", index}, {"tasks", tasks}};
}

StatusOr<std::map<std::string, std::string>> JobService::TaskEnvironment(const Job& job, const protocol::JobSpec& spec,
                                                                      const Task& task,
                                                                      const std::vector<Task>& gang) {
  std::map<std::string, std::string> env = spec.env;
  std::map<int64_t, store::Node> nodes;
  for (const Task& t : gang) {
    if (t.node_id && !nodes.count(t.node_id)) {
      RM_ASSIGN_OR_RETURN(nodes[t.node_id], store_->GetNode(t.node_id));
    }
  }
  // Where peers reach a task: its overlay address, else its node's.
  auto addr = [&](const Task& t) {
    if (!t.overlay_ip.empty()) return t.overlay_ip;
    auto it = nodes.find(t.node_id);
    return it == nodes.end() || it->second.address.empty() ? std::string("127.0.0.1") : it->second.address;
  };
  // The gang's tasks on this task's node, and the nodes it spans in the
  // order of the lowest rank on each (RINGMASTER_LOCAL_*, RINGMASTER_NODE_*).
  int local_task_rank = 0, local_tasks = 0;
  std::map<int64_t, int> lowest_rank;  // node -> its lowest rank
  const Task* rank0 = &task;
  for (const Task& t : gang) {
    if (t.rank == 0) rank0 = &t;
    auto [it, fresh] = lowest_rank.emplace(t.node_id, t.rank);
    if (!fresh) it->second = std::min(it->second, t.rank);
    if (t.node_id != task.node_id) continue;
    if (t.rank < task.rank) ++local_task_rank;
    ++local_tasks;
  }
  const int mine = lowest_rank[task.node_id];
  int node_rank = 0;
  for (const auto& [node, lowest] : lowest_rank) node_rank += lowest < mine;
  const std::string master_addr = addr(*rank0), master_port = std::to_string(rank0->port);
  auto set = [&](const char* k, std::string v) { env[k] = std::move(v); };
  set("RINGMASTER_JOB_ID", std::to_string(job.id));
  set("RINGMASTER_JOB_NAME", job.name);
  set("RINGMASTER_TASK_ID", std::to_string(task.id));
  set("RINGMASTER_RANK", std::to_string(task.rank));
  set("RINGMASTER_REPLICAS", std::to_string(job.replicas));
  set("RINGMASTER_ATTEMPT", std::to_string(task.attempt));
  set("RINGMASTER_ADDR", addr(task));
  set("RINGMASTER_PORT", std::to_string(task.port));
  // The job's files (RINGMASTER_WORK_DIR, _CHECKPOINT_DIR, _OUTPUT_DIR) are the
  // agent's to set: node-local directories it stages and uploads.
  // Rendezvous for ringcomm: rank 0 serves a TcpStore at MASTER_ADDR:MASTER_PORT;
  // each attempt of the gang forms a new generation.
  set("RINGMASTER_STORE", master_addr + ":" + master_port);
  // The gang's start count (its highest attempt): every restart, resize or
  // preemption forms a new generation, so no rank meets a stale one.
  int generation = 0;
  for (const Task& t : gang) generation = std::max(generation, t.attempt);
  set("RINGMASTER_GENERATION", std::to_string(generation));
  // What ringcomm's store and hellos check, so only this gang's tasks join:
  // one per job and generation, derived (never stored), in the tasks'
  // environment and nowhere else (not in the jobs API, logs or argv).
  set("RINGMASTER_JOB_SECRET",
      HexEncode(HmacSha256(options_.job_secret_key, fmt::format("ringmaster-job-secret/{}/{}", job.id, generation))));
  // Where it runs among the gang: its node's place and how many of the
  // gang's tasks share that node (and its CPUs), itself included.
  set("RINGMASTER_NODE_RANK", std::to_string(node_rank));
  set("RINGMASTER_NODES", std::to_string(lowest_rank.size()));
  set("RINGMASTER_LOCAL_TASK_RANK", std::to_string(local_task_rank));
  set("RINGMASTER_LOCAL_TASKS", std::to_string(local_tasks));
  // torch.distributed (env:// init, torchrun's names). A task sees only its
  // own GPUs, so it is its own node-local group, as a Kubeflow PyTorchJob
  // worker pod is: LOCAL_RANK 0 of 1 (torch.cuda.set_device(LOCAL_RANK) picks
  // its first GPU), and its group's rank is its rank, so that torchrun's
  // RANK = GROUP_RANK * LOCAL_WORLD_SIZE + LOCAL_RANK holds (docs/jobspec.md).
  set("RANK", std::to_string(task.rank));
  set("WORLD_SIZE", std::to_string(job.replicas));
  set("LOCAL_RANK", "0");
  set("LOCAL_WORLD_SIZE", "1");
  set("GROUP_RANK", std::to_string(task.rank));
  set("GROUP_WORLD_SIZE", std::to_string(job.replicas));
  set("NODE_RANK", std::to_string(task.rank));
  set("MASTER_ADDR", master_addr);
  set("MASTER_PORT", master_port);
  // Its role (job_roles.h) and the frameworks' cluster descriptions. A job
  // without roles is all workers and gets both: TF_CONFIG for
  // MultiWorkerMirroredStrategy, and DMLC_* naming rank 0 as ps-lite's root.
  const protocol::TaskRole role = protocol::RoleOfRank(spec.roles, task.rank);
  set("RINGMASTER_ROLE", role.name);
  set("RINGMASTER_ROLE_INDEX", std::to_string(role.index));
  const std::string framework = protocol::RolesFramework(spec.roles);
  if (framework != "mxnet") {
    // TensorFlow: every role's addresses by index; an evaluator watches the
    // checkpoints and is not part of the cluster it describes.
    nlohmann::json cluster = nlohmann::json::object();
    for (const Task& t : gang) {
      const protocol::TaskRole r = protocol::RoleOfRank(spec.roles, t.rank);
      if (r.name == "evaluator") continue;
      nlohmann::json& list = cluster[r.name];
      if (list.is_null()) list = nlohmann::json::array();
      while (static_cast<int>(list.size()) <= r.index) list.push_back("");
      list[r.index] = fmt::format("{}:{}", addr(t), t.port);
    }
    set("TF_CONFIG", nlohmann::json{{"cluster", cluster}, {"task", {{"type", role.name}, {"index", role.index}}}}.dump());
  }
  if (framework != "tensorflow") {
    // MXNet (ps-lite): the scheduler's task (rank 0 without roles) is the
    // root every server and worker reports to; DMLC_NODE_HOST is the address
    // this task's peers reach it at (its overlay address in a container).
    const Task* root = rank0;
    int n_servers = 0, n_workers = 0;
    for (const Task& t : gang) {
      const protocol::TaskRole r = protocol::RoleOfRank(spec.roles, t.rank);
      if (r.name == "scheduler") root = &t;
      n_servers += r.name == "server";
      n_workers += r.name == "worker";
    }
    set("DMLC_ROLE", role.name);
    set("DMLC_PS_ROOT_URI", addr(*root));
    set("DMLC_PS_ROOT_PORT", std::to_string(root->port));
    set("DMLC_NUM_WORKER", std::to_string(n_workers));
    set("DMLC_NUM_SERVER", std::to_string(n_servers));
    set("DMLC_NODE_HOST", addr(task));
  }
  return env;
}

}  // namespace ringmaster::server
