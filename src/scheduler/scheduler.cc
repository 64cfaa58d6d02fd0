#include "scheduler/scheduler.h"

#include <algorithm>
#include <cctype>
#include <optional>
#include <set>
#include <tuple>

#include <fmt/format.h>

#include "common/clock.h"
#include "common/units.h"
#include "scheduler/plugins.h"
#include "scheduler/policy.h"
#include "scheduler/pools.h"
#include "scheduler/shares.h"

namespace ringmaster::scheduler {
namespace {

void Add(Resources& to, const Resources& r, int sign) {
  to.cpu_milli += sign * r.cpu_milli;
  to.memory_bytes += sign * r.memory_bytes;
  to.gpus += sign * r.gpus;
}

bool EqualsIgnoreCase(const std::string& a, const std::string& b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

// Kubernetes' percentageOfNodesToScore default: every node below 100, then
// 50% less 1% per 125 nodes, at least 5% and at least 100 nodes.
size_t NodesToScore(int configured, size_t n) {
  if (configured < 0 || n < 100) return n;
  if (configured > 0) return std::min(n, static_cast<size_t>(configured));
  const int64_t pct = std::max<int64_t>(5, 50 - static_cast<int64_t>(n) / 125);
  return std::min(n, std::max<size_t>(100, n * static_cast<size_t>(pct) / 100));
}

std::string JobList(const std::vector<int64_t>& ids) {
  std::vector<std::string> s;
  for (int64_t id : ids) s.push_back(std::to_string(id));
  return (ids.size() == 1 ? "job " : "jobs ") + fmt::format("{}", fmt::join(s, ", "));
}

}  // namespace

double Devices(const Resources& r) { return r.gpus > 0 ? r.gpus : static_cast<double>(r.cpu_milli) / 1000; }

double DeviceWeight(const JobRequest& job) { return Devices(job.per_task) * job.replicas; }

std::string DescribeRequest(const JobRequest& job) {
  std::string r = fmt::format("cpu {}, memory {}", FormatCpu(job.per_task.cpu_milli),
                              FormatBytes(job.per_task.memory_bytes));
  if (job.per_task.gpus > 0 || !job.gpu_types.empty()) {
    r += fmt::format(", gpu {}", job.per_task.gpus);
    if (!job.gpu_types.empty()) r += fmt::format(" ({})", fmt::join(job.gpu_types, "|"));
  }
  return fmt::format("{} x {{{}}}", job.replicas, r);
}

// The working state of one pass (or one PlaceGang call): static-filter masks
// cached per job constraint, and where the last limited scan stopped.
class Scheduler::Pass {
 public:
  // A gang's replicas: node indices, and what each took by identity.
  struct Chosen {
    std::vector<int> nodes;
    std::vector<ReplicaSlot> slots;
    size_t size() const { return nodes.size(); }
    bool empty() const { return nodes.empty(); }
  };

  Pass(const Scheduler& s, const std::vector<NodeState>& nodes) : s_(s), nodes_(nodes) {
    limit_ = NodesToScore(s.config_.nodes_to_score, nodes.size());
    pools_ = s.pool_filters_.size();
    has_pools_ = std::any_of(nodes.begin(), nodes.end(), [](const NodeState& n) {
      return n.port_hi >= n.port_lo || n.gpu_indices || n.address_count > 0;
    });
  }

  // Adds (sign +1) or removes (-1) a running job's allocation in `view`.
  void AddJob(std::vector<NodeState>& view, const RunningJob& rj, int sign) {
    if (index_of_.empty()) {
      for (size_t i = 0; i < nodes_.size(); ++i) index_of_[nodes_[i].id] = i;
    }
    for (size_t r = 0; r < rj.node_ids.size(); ++r) {
      auto it = index_of_.find(rj.node_ids[r]);
      if (it == index_of_.end()) continue;
      Add(view[it->second].allocated, rj.request.per_task, sign);
      if (r < rj.slots.size()) {
        if (sign > 0) HoldSlot(view[it->second], rj.slots[r]);
        else GiveSlot(view[it->second], rj.slots[r]);
      }
    }
  }

  // Which nodes the job's static filters (health, GPU type, labels, executor) allow.
  const std::vector<char>& Mask(const JobRequest& job, const std::string& only_type = "") {
    // The constraint as a key (case kept: "V100" and "v100" only cache twice).
    key_.clear();
    key_ += only_type;
    key_ += '\x1f';
    for (const auto& t : job.gpu_types) (key_ += t) += '\x1e';
    key_ += '\x1f';
    for (const auto& [k, v] : job.node_selector) (((key_ += k) += '=') += v) += '\x1e';
    key_ += '\x1f';
    for (const auto& e : job.executors) (key_ += e) += '\x1e';
    key_ += job.needs_overlay ? "\x1fo" : "\x1f";
    const std::string& key = key_;
    auto it = masks_.find(key);
    if (it != masks_.end()) return it->second;
    std::vector<char> mask(nodes_.size(), 1);
    for (size_t i = 0; i < nodes_.size(); ++i) {
      for (const auto& f : s_.static_filters_) {
        if (!f->Pass(nodes_[i], job)) {
          mask[i] = 0;
          break;
        }
      }
      if (mask[i] && !only_type.empty()) mask[i] = GpuTypeMatches(nodes_[i].gpu_model, only_type);
    }
    return masks_.emplace(key, std::move(mask)).first->second;
  }

  // Places replicas one by one on the best-scoring allowed node, allocating
  // (and taking ports, GPU indices, addresses) as it goes. Fewer than
  // job.replicas if the gang does not fit (those stay allocated: the caller
  // releases or explains them).
  Chosen PlaceReplicas(std::vector<NodeState>& nodes, const JobRequest& job, const std::vector<char>& mask) {
    double max_total = 0;
    for (const auto& [plugin, w] : s_.scores_) max_total += w;
    Chosen chosen;
    const size_t n = nodes.size();
    for (int r = 0; r < job.replicas; ++r) {
      int best = -1;
      double best_score = -1;
      size_t scored = 0, k = 0;
      const size_t start = limit_ < n ? next_start_ : 0;
      for (; k < n; ++k) {
        const size_t i = (start + k) % n;
        if (!mask[i]) continue;
        const NodeState& node = nodes[i];
        if (!Fits(Free(node), job.per_task)) continue;
        bool ok = true;
        for (size_t f = 1; f < s_.dynamic_filters_.size() && ok; ++f) ok = s_.dynamic_filters_[f]->Pass(node, job);
        for (size_t f = 0; f < pools_ && ok && has_pools_; ++f) ok = s_.pool_filters_[f]->Pass(node, job);
        if (!ok) continue;
        GangState gang{job.replicas - r,
                       static_cast<int>(std::count(chosen.nodes.begin(), chosen.nodes.end(), static_cast<int>(i)))};
        double score = 0;
        if (job.rank_by_measured_use) {
          score = MeasuredHeadroom(node, job, gang.already_here);
        } else {
          for (const auto& [plugin, w] : s_.scores_) score += w * plugin->Score(node, job, gang);
        }
        if (score > best_score + 1e-12) {
          best = static_cast<int>(i);
          best_score = score;
          if (best_score >= (job.rank_by_measured_use ? 1.0 : max_total) - 1e-9) break;  // cannot be beaten
        }
        if (++scored >= limit_) break;
      }
      if (limit_ < n) next_start_ = (start + k + 1) % n;
      if (best < 0) break;
      NodeState& node = nodes[static_cast<size_t>(best)];
      Add(node.allocated, job.per_task, +1);
      chosen.nodes.push_back(best);
      chosen.slots.push_back(has_pools_ ? TakeSlot(node, job) : ReplicaSlot{});
    }
    return chosen;
  }

  void Release(std::vector<NodeState>& nodes, const Chosen& chosen, const JobRequest& job) {
    for (size_t r = 0; r < chosen.size(); ++r) {
      NodeState& node = nodes[static_cast<size_t>(chosen.nodes[r])];
      Add(node.allocated, job.per_task, -1);
      GiveSlot(node, chosen.slots[r]);
    }
  }

  // A whole gang joins the overlay, or none of it: addresses back where its
  // nodes do not share one. False where the job needs the overlay and they do not.
  bool SettleOverlay(std::vector<NodeState>& nodes, const JobRequest& job, Chosen& chosen) const {
    if (!job.joins_overlay || !has_pools_) return true;
    std::vector<const NodeState*> on;
    for (int idx : chosen.nodes) on.push_back(&nodes[static_cast<size_t>(idx)]);
    if (GangJoinsOverlay(on, job)) return true;
    if (job.needs_overlay && pools_ == s_.pool_filters_.size()) return false;
    for (size_t r = 0; r < chosen.size(); ++r) GiveAddress(nodes[static_cast<size_t>(chosen.nodes[r])], chosen.slots[r]);
    return true;
  }

  // The whole gang or nothing; heterogeneity-aware when configured: the
  // accepted GPU types in order of the job's throughput, one type per gang.
  Chosen PlaceGang(std::vector<NodeState>& nodes, const JobRequest& job) {
    std::vector<std::string> types;
    if (s_.config_.heterogeneity_aware && !job.throughput.empty()) {
      std::vector<std::pair<double, std::string>> ranked;
      for (const auto& entry : job.throughput) {
        const std::string& type = entry.first;  // not a structured binding: clang 14 cannot capture one
        const bool accepted = job.gpu_types.empty() ||
                              std::any_of(job.gpu_types.begin(), job.gpu_types.end(),
                                          [&](const std::string& t) { return EqualsIgnoreCase(t, type); });
        if (accepted && entry.second > 0) ranked.push_back({-entry.second, type});
      }
      std::sort(ranked.begin(), ranked.end());
      for (auto& [neg, type] : ranked) types.push_back(type);
    }
    if (types.empty()) types.push_back("");
    for (const std::string& type : types) {
      Chosen chosen = PlaceReplicas(nodes, job, Mask(job, type));
      if (static_cast<int>(chosen.size()) == job.replicas && SettleOverlay(nodes, job, chosen)) return chosen;
      Release(nodes, chosen, job);
    }
    return {};
  }

  // Why a gang that does not fit would fit but for a pool (ports, GPU
  // indices, overlay addresses): "waiting for ports: <per node>"; "" when
  // resources already refuse it. Leaves `nodes` as they were.
  std::string PoolRefusal(std::vector<NodeState>& nodes, const JobRequest& job) {
    if (!has_pools_) return "";
    const size_t all = s_.pool_filters_.size(), start = next_start_;
    std::string out;
    for (size_t k = 0; k < all && out.empty(); ++k) {
      pools_ = k;
      Chosen without = PlaceGang(nodes, job);  // with the pools before k only
      if (without.empty()) break;
      Release(nodes, without, job);
      pools_ = k + 1;
      Chosen with = PlaceGang(nodes, job);
      if (!with.empty()) {
        Release(nodes, with, job);
        continue;
      }
      Chosen partial = PlaceReplicas(nodes, job, Mask(job));
      out = PoolWaitPrefix(k) +
            (static_cast<int>(partial.size()) == job.replicas ? std::string(kSplitOverlay) : Explain(nodes, job, k));
      Release(nodes, partial, job);
    }
    pools_ = all;
    next_start_ = start;
    return out;
  }

  // Why each node rejects one replica, the first few, in words. With
  // `only_pool`, only that pool filter's reasons, of the nodes the others pass.
  std::string Explain(const std::vector<NodeState>& nodes, const JobRequest& job, size_t only_pool = SIZE_MAX) const {
    constexpr size_t kMaxListed = 5;
    std::vector<std::string> rejections;
    size_t count = 0;
    for (const NodeState& node : nodes) {
      std::string why;
      for (const auto& f : s_.static_filters_) {
        if (!f->Pass(node, job)) {
          why = f->Reject(node, job);
          break;
        }
      }
      for (size_t i = 0; i < s_.dynamic_filters_.size() && why.empty(); ++i) {
        if (!s_.dynamic_filters_[i]->Pass(node, job)) why = s_.dynamic_filters_[i]->Reject(node, job);
      }
      if (only_pool != SIZE_MAX) {
        const FilterPlugin& pool = *s_.pool_filters_[only_pool];
        why = why.empty() && !pool.Pass(node, job) ? pool.Reject(node, job) : "";
      }
      for (size_t i = 0; i < s_.pool_filters_.size() && why.empty() && has_pools_ && only_pool == SIZE_MAX; ++i) {
        if (!s_.pool_filters_[i]->Pass(node, job)) why = s_.pool_filters_[i]->Reject(node, job);
      }
      if (why.empty()) continue;
      if (++count <= kMaxListed) rejections.push_back(std::move(why));
    }
    std::string out = fmt::format("{}", fmt::join(rejections, ", "));
    if (count > kMaxListed) out += fmt::format(", and {} more", count - kMaxListed);
    return out;
  }

  // Replicas of this shape the idle cluster holds (cached per shape).
  int64_t SlotsWhenIdle(const JobRequest& job) {
    const auto shape = std::tuple(job.per_task.cpu_milli, job.per_task.memory_bytes, job.per_task.gpus);
    const std::vector<char>& mask = Mask(job);
    auto key = std::pair(shape, &mask);
    auto it = slots_.find(key);
    if (it != slots_.end()) return it->second;
    int64_t total = 0;
    const Resources& r = job.per_task;
    for (size_t i = 0; i < nodes_.size(); ++i) {
      if (!mask[i]) continue;
      const Resources& c = nodes_[i].capacity;
      int64_t slots = INT32_MAX;
      if (r.cpu_milli > 0) slots = std::min(slots, c.cpu_milli / r.cpu_milli);
      if (r.memory_bytes > 0) slots = std::min(slots, c.memory_bytes / r.memory_bytes);
      if (r.gpus > 0) slots = std::min<int64_t>(slots, c.gpus / r.gpus);
      total += std::max<int64_t>(0, slots);
    }
    return slots_.emplace(key, total).first->second;
  }

 private:
  const Scheduler& s_;
  const std::vector<NodeState>& nodes_;  // node facts the masks are computed from
  size_t limit_ = 0;
  size_t next_start_ = 0;
  size_t pools_ = 0;        // how many pool filters (in order) are enforced: all but in PoolRefusal
  bool has_pools_ = false;  // some node has a port range, GPU indices or addresses
  std::string key_;  // scratch for Mask
  std::map<int64_t, size_t> index_of_;  // node id -> index, built on first use
  std::map<std::string, std::vector<char>, std::less<>> masks_;
  std::map<std::pair<std::tuple<int64_t, int64_t, int>, const std::vector<char>*>, int64_t> slots_;
};

Scheduler::Scheduler(SchedulerConfig config) : config_(std::move(config)) {}
Scheduler::~Scheduler() = default;

StatusOr<std::unique_ptr<Scheduler>> Scheduler::Create(const SchedulerConfig& config) {
  std::unique_ptr<Scheduler> s(new Scheduler(config));
  std::unique_ptr<FilterPlugin> resources;
  for (const std::string& name : config.filters) {
    auto f = MakeFilter(name);
    if (!f.ok()) return InvalidArgument("filters: " + f.status().message());
    if (name == "resources") {
      resources = std::move(*f);
    } else if ((*f)->Static()) {
      s->static_filters_.push_back(std::move(*f));
    } else {
      s->dynamic_filters_.push_back(std::move(*f));
    }
  }
  if (!resources) return InvalidArgument("filters: 'resources' is required (without it nodes are overcommitted)");
  // The resources filter goes first: the placement loop checks it inline.
  s->dynamic_filters_.insert(s->dynamic_filters_.begin(), std::move(resources));
  s->pool_filters_ = MakePoolFilters();  // always: two tasks never share a port, GPU or address
  for (const auto& [name, weight] : config.scores) {
    auto sc = MakeScore(name);
    if (!sc.ok()) return InvalidArgument("scores: " + sc.status().message());
    if (!(weight >= 0)) return InvalidArgument(fmt::format("scores: the weight of {} must be >= 0, got {}", name, weight));
    s->scores_.push_back({std::move(*sc), weight});
  }
  auto policy = MakePolicy(config);
  if (!policy.ok()) return policy.status();
  s->policy_ = std::move(*policy);
  for (const auto& [user, q] : config.quotas) {
    if (q.cpu_milli < -1 || q.gpus < -1) return InvalidArgument(fmt::format("quotas.{}: must be >= 0 (or -1: unlimited)", user));
  }
  if (config.backfill_depth < 0) return InvalidArgument("backfill_depth: must be >= 0");
  return s;
}

std::vector<int64_t> Scheduler::PlaceGang(std::vector<NodeState>& nodes, const JobRequest& job) const {
  return NewPlacer(nodes).PlaceGang(nodes, job);
}

Scheduler::Placer::Placer(std::unique_ptr<Pass> pass) : pass_(std::move(pass)) {}
Scheduler::Placer::Placer(Placer&&) noexcept = default;
Scheduler::Placer::~Placer() = default;

Scheduler::Placer Scheduler::NewPlacer(const std::vector<NodeState>& facts) const {
  return Placer(std::make_unique<Pass>(*this, facts));
}

std::vector<int64_t> Scheduler::Placer::PlaceGang(std::vector<NodeState>& nodes, const JobRequest& job) {
  Pass::Chosen chosen = pass_->PlaceGang(nodes, job);
  std::vector<int64_t> ids;
  for (int idx : chosen.nodes) ids.push_back(nodes[static_cast<size_t>(idx)].id);
  return ids;
}

std::vector<Preemption> Scheduler::ChooseVictims(Pass& pass, const Snapshot& snap, const std::vector<NodeState>& future,
                                                 const JobRequest& job, bool within_share,
                                                 const std::map<int64_t, std::string>& beyond_share,
                                                 const std::set<int64_t>& going) const {
  struct Candidate {
    const RunningJob* rj;
    double lost_s;
    std::string why;
  };
  std::vector<Candidate> candidates;
  for (const auto& rj : snap.running) {
    const int64_t id = rj.request.job_id;
    if (going.count(id)) continue;
    std::string cause;
    if (rj.request.user != job.user) {
      // Never for a number the other user picked: only what they hold beyond their share.
      auto beyond = beyond_share.find(id);
      if (!within_share || beyond == beyond_share.end()) continue;
      cause = beyond->second;
    } else if (policy_->MayPreempt(job, rj, snap.now_ms)) {
      cause = policy_->Outranks(job, rj);
    } else {
      continue;
    }
    const int64_t since = std::max(rj.started_ms, rj.last_checkpoint_ms);
    const double lost = static_cast<double>(std::max<int64_t>(0, snap.now_ms - since)) / 1000 * DeviceWeight(rj.request);
    candidates.push_back({&rj, lost, std::move(cause)});
  }
  std::stable_sort(candidates.begin(), candidates.end(), [](const Candidate& a, const Candidate& b) {
    return std::tuple(a.lost_s, a.rj->request.priority, -a.rj->started_ms, a.rj->request.job_id) <
           std::tuple(b.lost_s, b.rj->request.priority, -b.rj->started_ms, b.rj->request.job_id);
  });
  auto fits = [&](const std::vector<NodeState>& view) {
    std::vector<NodeState> attempt = view;
    return !pass.PlaceGang(attempt, job).empty();
  };
  // Take victims in order until the job fits ...
  std::vector<NodeState> trial = future;
  std::vector<size_t> taken;
  bool room = false;
  for (size_t c = 0; c < candidates.size() && !room; ++c) {
    pass.AddJob(trial, *candidates[c].rj, -1);
    taken.push_back(c);
    room = fits(trial);
  }
  if (!room) return {};
  // ... then reprieve those it does not need, the most lost work first.
  for (size_t k = taken.size(); k-- > 0;) {
    const RunningJob& rj = *candidates[taken[k]].rj;
    pass.AddJob(trial, rj, +1);
    if (fits(trial)) {
      taken.erase(taken.begin() + static_cast<std::ptrdiff_t>(k));
    } else {
      pass.AddJob(trial, rj, -1);
    }
  }
  std::vector<Preemption> out;
  for (size_t c : taken) {
    const Candidate& cand = candidates[c];
    out.push_back({cand.rj->request.job_id, job.job_id, cand.lost_s,
                   fmt::format("preempted for job {} ({}); {:.0f} device-seconds since its last checkpoint",
                               job.job_id, cand.why, cand.lost_s)});
  }
  return out;
}

Plan Scheduler::Schedule(const Snapshot& snap, const std::vector<JobRequest>& pending) const {
  Plan plan;
  const int64_t now = snap.now_ms;
  std::vector<NodeState> nodes = snap.nodes;  // allocations grow as we place
  Pass pass(*this, snap.nodes);
  // Records a placement and its quota use.
  std::vector<const JobRequest*> placed;  // in this pass: they run from now on
  auto place = [&](const JobRequest& job, const Pass::Chosen& chosen, bool borrowing) {
    placed.push_back(&job);
    Placement p{job.job_id, {}, borrowing, chosen.slots};
    for (int idx : chosen.nodes) p.node_ids.push_back(nodes[static_cast<size_t>(idx)].id);
    plan.placements.push_back(std::move(p));
    plan.pending_reasons.erase(job.job_id);
  };

  // What each user holds, and which running jobs another user's job may reclaim.
  Shares shares = CountShares(config_, snap, pending);
  const Quota& fair = shares.fair;
  std::map<std::string, Usage>& usage = shares.usage;
  const std::map<int64_t, std::string>& beyond_share = shares.beyond;
  std::set<int64_t> going;  // running jobs stopping already or preempted in this pass
  for (const auto& rj : snap.running) {
    if (rj.stopping) going.insert(rj.request.job_id);
  }

  std::vector<const JobRequest*> queue;
  for (const auto& j : pending) queue.push_back(&j);
  policy_->Order(queue);
  plan.queue_order.reserve(queue.size());
  for (const JobRequest* j : queue) plan.queue_order.push_back(j->job_id);

  // The cluster as it would be with every node up and uncordoned: what tells a
  // job that waits for nodes to come back from one too big for the cluster.
  std::vector<NodeState> all_up;
  std::optional<Pass> all_up_pass;
  int64_t head = 0;  // the blocked head job, 0 while none
  // Backfill: the head's reservation in its bottleneck resource (GPUs, else CPU).
  int64_t shadow_ms = INT64_MAX, extra = 0;
  int looked_behind = 0;
  auto amount = [](const JobRequest& j, bool gpus) { return gpus ? Total(j).gpus : Total(j).cpu_milli; };
  bool head_gpus = false;
  auto describe_amount = [&](int64_t a) { return head_gpus ? fmt::format("{} gpus", a) : FormatCpu(a) + " cpus"; };
  // Why a job does not fit now, per node (a partial gang is placed and released).
  auto not_fitting = [&](const JobRequest& job) {
    Pass::Chosen partial = pass.PlaceReplicas(nodes, job, pass.Mask(job));
    std::string why = partial.empty()
                          ? fmt::format("0 of {} nodes fit: {}", nodes.size(), pass.Explain(nodes, job))
                          : fmt::format("only {} of {} replicas fit now and a gang starts all or none: {}",
                                        partial.size(), job.replicas, pass.Explain(nodes, job));
    pass.Release(nodes, partial, job);
    return why;
  };

  for (const JobRequest* jp : queue) {
    const JobRequest& job = *jp;
    const std::string needs = "needs " + DescribeRequest(job);
    std::string& reason = plan.pending_reasons[job.job_id];

    if (pass.SlotsWhenIdle(job) < job.replicas) {
      // Judged against capacity, not what is free now: it waits for a bigger cluster, and blocks nobody.
      std::vector<NodeState> idle = snap.nodes;
      for (auto& n : idle) {
        n.allocated = {};
        n.ports_used.clear();
        n.gpus_used.clear();
        n.addresses_used.clear();
      }
      std::string why = nodes.empty() ? std::string("no nodes registered") : pass.Explain(idle, job);
      if (why.empty()) {
        why = fmt::format("all {} nodes together hold only {} replicas", nodes.size(), pass.SlotsWhenIdle(job));
      }
      if (!all_up_pass) {
        all_up = snap.nodes;
        for (auto& n : all_up) {
          n.ready = true;
          n.cordoned.clear();
        }
        all_up_pass.emplace(*this, all_up);
      }
      reason = all_up_pass->SlotsWhenIdle(job) >= job.replicas
                   ? fmt::format("{}; no node that could hold it takes work now: {}", needs, why)
                   : fmt::format("{}; it cannot fit this cluster even when idle: {}", needs, why);
      continue;
    }

    const Quota* quota = nullptr;
    if (auto q = config_.quotas.find(job.user); q != config_.quotas.end()) quota = &q->second;
    Usage after = usage[job.user];
    after += Total(job);
    const bool over_quota = quota && Exceeds(*quota, after);
    if (over_quota && !quota->borrow) {
      reason = fmt::format("{}; over quota: {}, and its quota may not borrow", needs,
                           DescribeQuota(job.user, *quota, usage[job.user]));
      continue;
    }

    if (head != 0) {
      if (!policy_->Backfills() || over_quota) {
        reason = fmt::format("{}; waiting behind job {} ({}: earlier jobs are placed first)", needs, head,
                             policy_->Name());
        continue;
      }
      if (++looked_behind > config_.backfill_depth) {
        reason = fmt::format("{}; waiting behind job {} (past the backfill depth of {})", needs, head,
                             config_.backfill_depth);
        continue;
      }
      const bool ends_in_time = job.expected_runtime_ms > 0 && shadow_ms != INT64_MAX &&
                                now + job.expected_runtime_ms <= shadow_ms;
      const int64_t take = amount(job, head_gpus);
      std::string why;
      if (ends_in_time || take <= extra) {
        Pass::Chosen chosen = pass.PlaceGang(nodes, job);
        if (!chosen.empty()) {
          place(job, chosen, false);
          usage[job.user] = after;
          if (!ends_in_time) extra -= take;
          continue;
        }
        why = "it does not fit now: " + not_fitting(job);
      } else {
        why = shadow_ms <= now ? std::string("the head starts as soon as the jobs it waits for have stopped")
              : shadow_ms == INT64_MAX
                  ? fmt::format("the head waits for jobs without a time limit, so only what it will never need "
                                "may be used ({} left), and this job needs {}",
                                describe_amount(extra), describe_amount(take))
                  : fmt::format("it would not end before the head's reservation in {} ({}) nor fit in what the "
                                "head leaves ({})",
                                FormatDuration(shadow_ms - now),
                                job.expected_runtime_ms > 0 ? "runs " + FormatDuration(job.expected_runtime_ms)
                                                            : std::string("no time limit"),
                                describe_amount(extra));
      }
      reason = fmt::format("{}; waiting behind job {} (backfill: {})", needs, head, why);
      continue;
    }

    Pass::Chosen chosen = pass.PlaceGang(nodes, job);
    if (!chosen.empty()) {
      place(job, chosen, over_quota);
      usage[job.user] = after;
      continue;
    }
    // Refused for a port, a GPU index or an address only: it waits for one,
    // and holds nobody back (as if it had not been looked at).
    if (std::string wait = pass.PoolRefusal(nodes, job); !wait.empty()) {
      reason = std::move(wait);
      continue;
    }

    // It does not fit now. Why, per node, with any partial gang held.
    const std::string why = not_fitting(job);
    if (over_quota) {
      // A borrower waits for idle capacity; it neither preempts nor holds anyone back.
      reason = fmt::format("{}; borrowing beyond its quota ({}), so it waits for idle capacity: {}", needs,
                           DescribeQuota(job.user, *quota, usage[job.user]), why);
      continue;
    }
    head = job.job_id;

    // Will jobs already stopping make room?
    std::vector<NodeState> future = nodes;
    std::vector<int64_t> stopping;
    for (const auto& rj : snap.running) {
      if (!going.count(rj.request.job_id)) continue;
      pass.AddJob(future, rj, -1);
      stopping.push_back(rj.request.job_id);
    }
    if (!stopping.empty()) {
      std::vector<NodeState> trial = future;
      if (!pass.PlaceGang(trial, job).empty()) {
        reason = fmt::format("{}; starts when {} stopped: {}", needs, JobList(stopping), why);
        shadow_ms = now;  // nothing may take what they free
        continue;
      }
    }

    // Preemption: the fewest victims, least lost work first, that make room.
    if (config_.preemption) {
      const bool within_share = quota != nullptr || !Exceeds(fair, after);  // over quota: it waited above
      std::vector<Preemption> victims = ChooseVictims(pass, snap, future, job, within_share, beyond_share, going);
      if (!victims.empty()) {
        std::vector<int64_t> ids;
        for (Preemption& v : victims) {
          ids.push_back(v.job_id);
          going.insert(v.job_id);
          plan.preemptions.push_back(std::move(v));
        }
        reason = fmt::format("{}; preempting {} to make room (they checkpoint and stop first): {}", needs,
                             JobList(ids), why);
        shadow_ms = now;
        continue;
      }
    }

    reason = fmt::format("{}; {}", needs, why);
    if (policy_->Backfills()) {
      // EASY: reserve for the head at the earliest time enough frees up. Jobs
      // without a time limit end at an unknown time: if the head needs what
      // they hold, its start is unknown, and jobs behind it may use only what
      // it will not need even once everything has ended.
      head_gpus = job.per_task.gpus > 0;
      int64_t avail = 0, unknown_ends = 0;
      for (const NodeState& n : nodes) {
        if (n.ready) avail += head_gpus ? std::max(0, Free(n).gpus) : std::max<int64_t>(0, Free(n).cpu_milli);
      }
      std::vector<std::pair<int64_t, int64_t>> ends;
      for (const auto& rj : snap.running) {
        if (rj.request.expected_runtime_ms <= 0) {
          unknown_ends += amount(rj.request, head_gpus);
        } else {
          ends.push_back({rj.started_ms + rj.request.expected_runtime_ms, amount(rj.request, head_gpus)});
        }
      }
      for (const JobRequest* j : placed) {
        if (j->expected_runtime_ms <= 0) {
          unknown_ends += amount(*j, head_gpus);
        } else {
          ends.push_back({now + j->expected_runtime_ms, amount(*j, head_gpus)});
        }
      }
      std::sort(ends.begin(), ends.end());
      const int64_t want = amount(job, head_gpus);
      for (const auto& [end, amt] : ends) {
        avail += amt;
        if (avail >= want) {
          shadow_ms = end;
          extra = avail - want;
          break;
        }
      }
      if (shadow_ms == INT64_MAX) extra = std::max<int64_t>(0, avail + unknown_ends - want);
    }
  }
  return plan;
}

}  // namespace ringmaster::scheduler
