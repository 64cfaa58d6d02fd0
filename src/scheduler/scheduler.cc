#include "scheduler/scheduler.h"

#include <algorithm>
#include <cctype>

#include <fmt/format.h>

#include "common/units.h"

namespace ringmaster::scheduler {
namespace {

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool GpuTypeMatches(const NodeState& node, const JobRequest& job) {
  if (job.gpu_type.empty()) return true;
  return Lower(node.gpu_model).find(Lower(job.gpu_type)) != std::string::npos;
}

// Which nodes have the GPU type a job asks for, computed once per distinct type.
class TypeMatcher {
 public:
  explicit TypeMatcher(const std::vector<NodeState>& nodes) : nodes_(nodes) {}
  const std::vector<char>& For(const std::string& type) {
    auto it = cache_.find(type);
    if (it != cache_.end()) return it->second;
    std::vector<char> match(nodes_.size(), 1);
    if (!type.empty()) {
      const std::string want = Lower(type);
      for (size_t i = 0; i < nodes_.size(); ++i) match[i] = Lower(nodes_[i].gpu_model).find(want) != std::string::npos;
    }
    return cache_.emplace(type, std::move(match)).first->second;
  }

 private:
  const std::vector<NodeState>& nodes_;
  std::map<std::string, std::vector<char>> cache_;
};

Resources Free(const NodeState& n) {
  return {n.capacity.cpu_milli - n.allocated.cpu_milli,
          n.capacity.memory_bytes - n.allocated.memory_bytes, n.capacity.gpus - n.allocated.gpus};
}

bool Fits(const Resources& have, const Resources& need) {
  return have.cpu_milli >= need.cpu_milli && have.memory_bytes >= need.memory_bytes &&
         have.gpus >= need.gpus;
}

// How many replicas of `job` the node holds when empty.
int64_t SlotsWhenEmpty(const NodeState& n, const JobRequest& job) {
  if (!GpuTypeMatches(n, job)) return 0;
  const Resources& c = n.capacity;
  const Resources& r = job.per_task;
  int64_t slots = INT64_MAX;
  if (r.cpu_milli > 0) slots = std::min(slots, c.cpu_milli / r.cpu_milli);
  if (r.memory_bytes > 0) slots = std::min(slots, c.memory_bytes / r.memory_bytes);
  if (r.gpus > 0) slots = std::min<int64_t>(slots, c.gpus / r.gpus);
  return slots == INT64_MAX ? job.replicas : slots;
}

// Why one replica of `job` does not fit on `node` now ("" if it fits).
std::string NodeRejection(const NodeState& node, const JobRequest& job) {
  if (!node.ready) return fmt::format("node {} is not ready (no heartbeat)", node.name);
  if (!GpuTypeMatches(node, job)) {
    return fmt::format("node {} has no {} gpus (it has {})", node.name, job.gpu_type,
                       node.gpu_model.empty() ? "none" : node.gpu_model);
  }
  const Resources free = Free(node);
  const Resources& need = job.per_task;
  std::vector<std::string> parts;
  if (need.cpu_milli > free.cpu_milli) {
    parts.push_back(need.cpu_milli > node.capacity.cpu_milli
                        ? fmt::format("{} cpus in total, needs {}", FormatCpu(node.capacity.cpu_milli),
                                      FormatCpu(need.cpu_milli))
                        : fmt::format("{} free cpus, needs {}", FormatCpu(std::max<int64_t>(0, free.cpu_milli)),
                                      FormatCpu(need.cpu_milli)));
  }
  if (need.memory_bytes > free.memory_bytes) {
    parts.push_back(need.memory_bytes > node.capacity.memory_bytes
                        ? fmt::format("{} memory in total, needs {}",
                                      FormatBytes(node.capacity.memory_bytes), FormatBytes(need.memory_bytes))
                        : fmt::format("{} free memory, needs {}",
                                      FormatBytes(std::max<int64_t>(0, free.memory_bytes)),
                                      FormatBytes(need.memory_bytes)));
  }
  if (need.gpus > free.gpus) {
    parts.push_back(need.gpus > node.capacity.gpus
                        ? fmt::format("{} gpus in total, needs {}", node.capacity.gpus, need.gpus)
                        : fmt::format("{} free gpus, needs {}", std::max(0, free.gpus), need.gpus));
  }
  if (parts.empty()) return "";
  std::string out = fmt::format("node {} has ", node.name);
  for (size_t i = 0; i < parts.size(); ++i) out += (i ? "; " : "") + parts[i];
  return out;
}

std::string JoinRejections(const std::vector<NodeState>& nodes, const JobRequest& job) {
  constexpr size_t kMaxListed = 5;
  std::vector<std::string> rejections;
  for (const auto& n : nodes) {
    std::string r = NodeRejection(n, job);
    if (!r.empty()) rejections.push_back(std::move(r));
  }
  std::string out;
  for (size_t i = 0; i < rejections.size() && i < kMaxListed; ++i) out += (i ? ", " : "") + rejections[i];
  if (rejections.size() > kMaxListed) out += fmt::format(", and {} more", rejections.size() - kMaxListed);
  return out;
}

// Best fit: the fitting node left with the least free cpu (then memory, then
// gpus) after placement, so gangs pack onto few nodes. Ties go to the lower id.
int BestNode(const std::vector<NodeState>& nodes, const JobRequest& job, const std::vector<char>& type_ok) {
  int best = -1;
  Resources best_left{};
  for (size_t i = 0; i < nodes.size(); ++i) {
    const NodeState& n = nodes[i];
    if (!n.ready || !type_ok[i]) continue;
    Resources free = Free(n);
    if (!Fits(free, job.per_task)) continue;
    Resources left{free.cpu_milli - job.per_task.cpu_milli, free.memory_bytes - job.per_task.memory_bytes,
                   free.gpus - job.per_task.gpus};
    auto key = [](const Resources& r) { return std::tuple(r.gpus, r.cpu_milli, r.memory_bytes); };
    if (best < 0 || key(left) < key(best_left)) {
      best = static_cast<int>(i);
      best_left = left;
      if (left.gpus == 0 && left.cpu_milli == 0 && left.memory_bytes == 0) break;  // a perfect fit
    }
  }
  return best;
}

void Add(Resources& to, const Resources& r, int sign) {
  to.cpu_milli += sign * r.cpu_milli;
  to.memory_bytes += sign * r.memory_bytes;
  to.gpus += sign * r.gpus;
}

// Places replicas one by one (best fit), allocating as it goes; returns the
// node indices, fewer than job.replicas if the gang does not fit.
std::vector<int> PlaceReplicas(std::vector<NodeState>& nodes, const JobRequest& job, const std::vector<char>& type_ok) {
  std::vector<int> chosen;
  for (int r = 0; r < job.replicas; ++r) {
    int idx = BestNode(nodes, job, type_ok);
    if (idx < 0) break;
    Add(nodes[static_cast<size_t>(idx)].allocated, job.per_task, +1);
    chosen.push_back(idx);
  }
  return chosen;
}

}  // namespace

std::string DescribeRequest(const JobRequest& job) {
  std::string r = fmt::format("cpu {}, memory {}", FormatCpu(job.per_task.cpu_milli),
                              FormatBytes(job.per_task.memory_bytes));
  if (job.per_task.gpus > 0 || !job.gpu_type.empty()) {
    r += fmt::format(", gpu {}", job.per_task.gpus);
    if (!job.gpu_type.empty()) r += fmt::format(" ({})", job.gpu_type);
  }
  return fmt::format("{} x {{{}}}", job.replicas, r);
}

std::vector<int64_t> PlaceGang(std::vector<NodeState>& nodes, const JobRequest& job) {
  TypeMatcher types(nodes);
  std::vector<int> chosen = PlaceReplicas(nodes, job, types.For(job.gpu_type));
  if (static_cast<int>(chosen.size()) < job.replicas) {
    for (int idx : chosen) Add(nodes[static_cast<size_t>(idx)].allocated, job.per_task, -1);
    return {};
  }
  std::vector<int64_t> ids;
  for (int idx : chosen) ids.push_back(nodes[static_cast<size_t>(idx)].id);
  return ids;
}

Plan Schedule(const std::vector<NodeState>& nodes_in, const std::vector<JobRequest>& queue) {
  Plan plan;
  std::vector<NodeState> nodes = nodes_in;  // allocations grow as we place
  TypeMatcher types(nodes);
  int64_t head_blocker = 0;
  // Replicas each request shape fits on the idle cluster, computed once per shape.
  std::map<std::tuple<int64_t, int64_t, int, std::string>, int64_t> slots_by_shape;

  for (const JobRequest& job : queue) {
    const auto shape = std::tuple(job.per_task.cpu_milli, job.per_task.memory_bytes, job.per_task.gpus, job.gpu_type);
    auto cached = slots_by_shape.find(shape);
    if (cached == slots_by_shape.end()) {
      JobRequest one = job;
      one.replicas = INT32_MAX;
      int64_t slots = 0;
      for (const auto& n : nodes) slots += SlotsWhenEmpty(n, one);
      cached = slots_by_shape.emplace(shape, slots).first;
    }
    const int64_t slots = cached->second;
    const bool can_ever_fit = slots >= job.replicas;

    if (!can_ever_fit) {
      // Judge against capacity, not what is free now: this job waits for a bigger node.
      std::vector<NodeState> idle = nodes_in;
      for (auto& n : idle) n.allocated = {};
      std::string why = nodes.empty() ? std::string("no nodes registered") : JoinRejections(idle, job);
      if (why.empty()) why = fmt::format("all {} nodes together hold only {} replicas", nodes.size(), slots);
      plan.pending_reasons[job.job_id] =
          fmt::format("needs {}; it cannot fit this cluster even when idle: {}", DescribeRequest(job), why);
      continue;
    }
    if (head_blocker != 0) {
      plan.pending_reasons[job.job_id] = fmt::format(
          "needs {}; waiting behind job {} (FIFO: earlier jobs are placed first)", DescribeRequest(job), head_blocker);
      continue;
    }

    std::vector<int> chosen = PlaceReplicas(nodes, job, types.For(job.gpu_type));
    if (static_cast<int>(chosen.size()) == job.replicas) {
      Placement placement{job.job_id, {}};
      for (int idx : chosen) placement.node_ids.push_back(nodes[static_cast<size_t>(idx)].id);
      plan.placements.push_back(std::move(placement));
      continue;
    }
    head_blocker = job.job_id;
    const std::string needs = "needs " + DescribeRequest(job);
    if (chosen.empty()) {
      plan.pending_reasons[job.job_id] = fmt::format("{}; 0 of {} nodes fit: {}", needs, nodes.size(),
                                                     JoinRejections(nodes, job));
    } else {
      // Explain against the state with the partial gang held (what was left), then undo it.
      std::string why = JoinRejections(nodes, job);
      for (int idx : chosen) Add(nodes[static_cast<size_t>(idx)].allocated, job.per_task, -1);
      plan.pending_reasons[job.job_id] = fmt::format(
          "{}; only {} of {} replicas fit now and a gang starts all or none: {}", needs, chosen.size(),
          job.replicas, why);
    }
  }
  return plan;
}

}  // namespace ringmaster::scheduler
