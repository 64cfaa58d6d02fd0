#include "scheduler/plugins.h"

#include <algorithm>
#include <cctype>
#include <map>

#include <fmt/format.h>

#include "common/units.h"

namespace ringmaster::scheduler {

bool GpuTypeMatches(const std::string& gpu_model, const std::string& type) {
  auto lower = [](unsigned char c) { return std::tolower(c); };
  auto it = std::search(gpu_model.begin(), gpu_model.end(), type.begin(), type.end(),
                        [&](char a, char b) { return lower(a) == lower(b); });
  return it != gpu_model.end() || type.empty();
}

namespace {

class HealthFilter final : public FilterPlugin {
 public:
  std::string_view Name() const override { return "health"; }
  bool Static() const override { return true; }
  bool Pass(const NodeState& node, const JobRequest&) const override { return node.ready; }
  std::string Reject(const NodeState& node, const JobRequest&) const override {
    if (!node.cordoned.empty()) return fmt::format("node {} is {}", node.name, node.cordoned);
    return fmt::format("node {} is not ready (no heartbeat)", node.name);
  }
};

class GpuTypeFilter final : public FilterPlugin {
 public:
  std::string_view Name() const override { return "gpu-type"; }
  bool Static() const override { return true; }
  bool Pass(const NodeState& node, const JobRequest& job) const override {
    if (job.gpu_types.empty()) return true;
    return std::any_of(job.gpu_types.begin(), job.gpu_types.end(),
                       [&](const std::string& t) { return GpuTypeMatches(node.gpu_model, t); });
  }
  std::string Reject(const NodeState& node, const JobRequest& job) const override {
    return fmt::format("node {} has no {} gpus (it has {})", node.name, fmt::join(job.gpu_types, " or "),
                       node.gpu_model.empty() ? "none" : node.gpu_model);
  }
};

class LabelsFilter final : public FilterPlugin {
 public:
  std::string_view Name() const override { return "labels"; }
  bool Static() const override { return true; }
  bool Pass(const NodeState& node, const JobRequest& job) const override {
    for (const auto& [k, v] : job.node_selector) {
      auto it = node.labels.find(k);
      if (it == node.labels.end() || it->second != v) return false;
    }
    return true;
  }
  std::string Reject(const NodeState& node, const JobRequest& job) const override {
    for (const auto& [k, v] : job.node_selector) {
      auto it = node.labels.find(k);
      if (it == node.labels.end()) return fmt::format("node {} has no label {}", node.name, k);
      if (it->second != v) return fmt::format("node {} has label {}={}, not {}", node.name, k, it->second, v);
    }
    return "";
  }
};

// Can the node's agent run the job's tasks: an image needs a container
// executor (runc or docker), a bare command the process executor, and a job
// may pin one (`executor:`); `network: overlay` needs a node with a container overlay.
class ExecutorFilter final : public FilterPlugin {
 public:
  std::string_view Name() const override { return "executor"; }
  bool Static() const override { return true; }
  bool Pass(const NodeState& node, const JobRequest& job) const override {
    if (job.needs_overlay && !node.overlay) return false;
    if (job.executors.empty()) return true;
    const std::vector<std::string>& offered = Offered(node);
    return std::any_of(job.executors.begin(), job.executors.end(), [&](const std::string& e) {
      return std::find(offered.begin(), offered.end(), e) != offered.end();
    });
  }
  std::string Reject(const NodeState& node, const JobRequest& job) const override {
    if (job.needs_overlay && !node.overlay) {
      return fmt::format("node {} has no container overlay (agent --network vxlan or ovs-gre)", node.name);
    }
    return fmt::format("node {} runs tasks with {}, the job needs {}", node.name, fmt::join(Offered(node), ", "),
                       fmt::join(job.executors, " or "));
  }

 private:
  static const std::vector<std::string>& Offered(const NodeState& node) {
    static const std::vector<std::string> kProcessOnly = {"process"};
    return node.executors.empty() ? kProcessOnly : node.executors;
  }
};

class ResourcesFilter final : public FilterPlugin {
 public:
  std::string_view Name() const override { return "resources"; }
  bool Static() const override { return false; }
  bool Pass(const NodeState& node, const JobRequest& job) const override { return Fits(Free(node), job.per_task); }
  std::string Reject(const NodeState& node, const JobRequest& job) const override {
    const Resources free = Free(node);
    const Resources& need = job.per_task;
    std::vector<std::string> parts;
    auto part = [&](bool short_total, const std::string& total, const std::string& have_free, const std::string& needs,
                    const char* what) {
      parts.push_back(short_total ? fmt::format("{} {} in total, needs {}", total, what, needs)
                                  : fmt::format("{} free {}, needs {}", have_free, what, needs));
    };
    if (need.cpu_milli > free.cpu_milli) {
      part(need.cpu_milli > node.capacity.cpu_milli, FormatCpu(node.capacity.cpu_milli),
           FormatCpu(std::max<int64_t>(0, free.cpu_milli)), FormatCpu(need.cpu_milli), "cpus");
    }
    if (need.memory_bytes > free.memory_bytes) {
      part(need.memory_bytes > node.capacity.memory_bytes, FormatBytes(node.capacity.memory_bytes),
           FormatBytes(std::max<int64_t>(0, free.memory_bytes)), FormatBytes(need.memory_bytes), "memory");
    }
    if (need.gpus > free.gpus) {
      part(need.gpus > node.capacity.gpus, std::to_string(node.capacity.gpus), std::to_string(std::max(0, free.gpus)),
           std::to_string(need.gpus), "gpus");
    }
    return fmt::format("node {} has {}", node.name, fmt::join(parts, "; "));
  }
};

// The share of each resource the job asks for that would be allocated on the
// node after this replica, averaged: 1 = the replica fills the node exactly.
double FillAfter(const NodeState& n, const JobRequest& job) {
  const Resources& r = job.per_task;
  double sum = 0;
  int dims = 0;
  auto add = [&](double cap, double alloc, double need) {
    if (need <= 0 || cap <= 0) return;
    sum += std::min(1.0, (alloc + need) / cap);
    ++dims;
  };
  add(static_cast<double>(n.capacity.gpus), n.allocated.gpus, r.gpus);
  add(static_cast<double>(n.capacity.cpu_milli), static_cast<double>(n.allocated.cpu_milli),
      static_cast<double>(r.cpu_milli));
  add(static_cast<double>(n.capacity.memory_bytes), static_cast<double>(n.allocated.memory_bytes),
      static_cast<double>(r.memory_bytes));
  return dims ? sum / dims : 1.0;
}

// Best fit: fuller nodes first, so large gangs find empty nodes later.
class BinpackScore final : public ScorePlugin {
 public:
  std::string_view Name() const override { return "binpack"; }
  double Score(const NodeState& n, const JobRequest& job, const GangState&) const override { return FillAfter(n, job); }
};

// Worst fit: emptier nodes first (less interference, more headroom).
class SpreadScore final : public ScorePlugin {
 public:
  std::string_view Name() const override { return "spread"; }
  double Score(const NodeState& n, const JobRequest& job, const GangState&) const override {
    return 1.0 - FillAfter(n, job);
  }
};

}  // namespace

double MeasuredHeadroom(const NodeState& n, const JobRequest& job, int already_here) {
  auto share = [](double request, double capacity) { return capacity > 0 ? request / capacity : 0.0; };
  const double k = already_here;
  double busiest = std::max(n.cpu_util + k * share(static_cast<double>(job.per_task.cpu_milli), static_cast<double>(n.capacity.cpu_milli)),
                            n.memory_util + k * share(static_cast<double>(job.per_task.memory_bytes),
                                                      static_cast<double>(n.capacity.memory_bytes)));
  if (job.per_task.gpus > 0) busiest = std::max(busiest, n.gpu_util + k * share(job.per_task.gpus, n.capacity.gpus));
  return 1.0 - std::clamp(busiest, 0.0, 1.0);
}

namespace {

// Load-based host choice: nodes with low measured use first, whatever
// their allocations say (a node can be busy with work the platform does not own).
class LoadAwareScore final : public ScorePlugin {
 public:
  std::string_view Name() const override { return "load-aware"; }
  double Score(const NodeState& n, const JobRequest& job, const GangState& gang) const override {
    return MeasuredHeadroom(n, job, gang.already_here);
  }
};

// Ring locality: a gang on as few hosts as possible (its ring crosses the
// network fewer times). Half for a node that already holds part of the gang,
// half for the share of the rest that fits on it.
class LocalityScore final : public ScorePlugin {
 public:
  std::string_view Name() const override { return "locality"; }
  double Score(const NodeState& n, const JobRequest& job, const GangState& gang) const override {
    if (job.replicas <= 1) return 1.0;
    const Resources free = Free(n);
    const Resources& r = job.per_task;
    int64_t slots = gang.remaining;
    if (r.cpu_milli > 0) slots = std::min(slots, free.cpu_milli / r.cpu_milli);
    if (r.memory_bytes > 0) slots = std::min(slots, free.memory_bytes / r.memory_bytes);
    if (r.gpus > 0) slots = std::min<int64_t>(slots, free.gpus / r.gpus);
    return (gang.already_here > 0 ? 0.5 : 0.0) + 0.5 * static_cast<double>(slots) / gang.remaining;
  }
};

template <typename T>
struct Registry {
  std::map<std::string, std::function<std::unique_ptr<T>()>> factories;
};

Registry<FilterPlugin>& Filters() {
  static auto* r = new Registry<FilterPlugin>{{
      {"health", [] { return std::make_unique<HealthFilter>(); }},
      {"gpu-type", [] { return std::make_unique<GpuTypeFilter>(); }},
      {"labels", [] { return std::make_unique<LabelsFilter>(); }},
      {"executor", [] { return std::make_unique<ExecutorFilter>(); }},
      {"resources", [] { return std::make_unique<ResourcesFilter>(); }},
  }};
  return *r;
}

Registry<ScorePlugin>& Scores() {
  static auto* r = new Registry<ScorePlugin>{{
      {"binpack", [] { return std::make_unique<BinpackScore>(); }},
      {"spread", [] { return std::make_unique<SpreadScore>(); }},
      {"load-aware", [] { return std::make_unique<LoadAwareScore>(); }},
      {"locality", [] { return std::make_unique<LocalityScore>(); }},
  }};
  return *r;
}

template <typename T>
StatusOr<std::unique_ptr<T>> Make(Registry<T>& r, const std::string& name, const char* what) {
  auto it = r.factories.find(name);
  if (it != r.factories.end()) return it->second();
  std::vector<std::string> known;
  for (const auto& [n, f] : r.factories) known.push_back(n);
  return NotFound(fmt::format("no {} plugin named '{}' (known: {})", what, name, fmt::join(known, ", ")));
}

template <typename T>
std::vector<std::string> Names(const Registry<T>& r) {
  std::vector<std::string> out;
  for (const auto& [n, f] : r.factories) out.push_back(n);
  return out;
}

}  // namespace

void RegisterFilter(const std::string& name, FilterFactory factory) { Filters().factories[name] = std::move(factory); }
void RegisterScore(const std::string& name, ScoreFactory factory) { Scores().factories[name] = std::move(factory); }
StatusOr<std::unique_ptr<FilterPlugin>> MakeFilter(const std::string& name) { return Make(Filters(), name, "filter"); }
StatusOr<std::unique_ptr<ScorePlugin>> MakeScore(const std::string& name) { return Make(Scores(), name, "score"); }
std::vector<std::string> FilterNames() { return Names(Filters()); }
std::vector<std::string> ScoreNames() { return Names(Scores()); }

}  // namespace ringmaster::scheduler
