// JobService on an outside cluster manager (backend "slurm"): a pass admits
// pending gangs in the policy's order within quotas and hands each over as a
// new attempt (its tasks SCHEDULED on no node); the manager starts one step
// per rank, whose node registers (BindStepNodeLocked) and gets its rank's task
// once the whole gang has; how the manager's job ended comes back through
// EndExternalGang. Where Ringmaster decides and where Slurm does: docs/slurm.md.
#include <algorithm>
#include <charconv>
#include <set>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "common/units.h"
#include "server/control/pass.h"
#include "server/control/snapshot.h"
#include "server/job_service.h"

namespace ringmaster::server {

using store::Desired;
using store::IsTerminal;
using store::Job;
using store::State;
using store::StateName;
using store::Task;

std::string JobService::StepNodeName(int64_t job_id, int attempt, int rank) {
  return fmt::format("slurm-{}-{}-{}", job_id, attempt, rank);
}

bool JobService::ParseStepNodeName(const std::string& name, int64_t* job_id, int* attempt, int* rank) {
  constexpr std::string_view kPrefix = "slurm-";
  if (name.rfind(kPrefix, 0) != 0) return false;
  const char* p = name.data() + kPrefix.size();
  const char* end = name.data() + name.size();
  auto number = [&](auto* out) {
    auto [next, ec] = std::from_chars(p, end, *out);
    if (ec != std::errc() || next == p) return false;
    p = next;
    return true;
  };
  if (!number(job_id) || p == end || *p++ != '-' || !number(attempt) || p == end || *p++ != '-' || !number(rank)) {
    return false;
  }
  return p == end && *job_id > 0 && *attempt > 0 && *rank >= 0;
}

scheduler::Plan JobService::AdmitExternalLocked(const PassInput& in) {
  scheduler::Plan plan;
  // The manager's queue is its own: a gang goes over in priority order, then
  // the order of submission; quotas count what is handed over and running.
  std::vector<const scheduler::JobRequest*> order;
  for (const auto& r : in.queue) order.push_back(&r);
  std::stable_sort(order.begin(), order.end(), [](const scheduler::JobRequest* a, const scheduler::JobRequest* b) {
    if (a->priority != b->priority) return a->priority > b->priority;
    if (a->submit_ms != b->submit_ms) return a->submit_ms < b->submit_ms;
    return a->job_id < b->job_id;
  });
  std::map<int64_t, const Job*> jobs;
  for (const Job& j : in.active) jobs[j.id] = &j;
  std::map<int64_t, std::string> owner;  // job -> user name, for the quotas
  for (const auto& r : in.queue) owner[r.job_id] = r.user;
  for (const auto& rj : in.snap.running) owner[rj.request.job_id] = rj.request.user;
  struct Use {
    int64_t cpu_milli = 0;
    int gpus = 0;
  };
  std::map<std::string, Use> used;
  std::set<int64_t> waiting;  // handed over, not started: no task on a node yet
  for (const Task& t : in.placed) {
    auto o = owner.find(t.job_id);
    if (o != owner.end()) {
      used[o->second].cpu_milli += t.cpu_milli;
      used[o->second].gpus += t.gpus;
    }
    if (t.node_id == 0) waiting.insert(t.job_id);
  }
  std::map<std::string, int> waiting_of;  // user -> their gangs waiting in Slurm's queue
  for (int64_t job : waiting) {
    if (auto o = owner.find(job); o != owner.end()) ++waiting_of[o->second];
  }
  int handed = static_cast<int>(waiting.size());
  for (const scheduler::JobRequest* r : order) {
    plan.queue_order.push_back(r->job_id);
    if (handed >= options_.max_handed_over) {
      plan.pending_reasons[r->job_id] = fmt::format(
          "waiting in Ringmaster's queue: {} jobs already wait in Slurm's (the server's --slurm-max-queued)", handed);
      continue;
    }
    // One user's jobs never fill Slurm's share of the queue for everyone.
    if (waiting_of[r->user] >= options_.max_handed_over_per_user) {
      plan.pending_reasons[r->job_id] =
          fmt::format("waiting in Ringmaster's queue: {} of {}'s jobs already wait in Slurm's "
                      "(the server's --slurm-max-queued-per-user)",
                      waiting_of[r->user], r->user);
      continue;
    }
    const int64_t cpu = r->per_task.cpu_milli * r->replicas;
    const int gpus = r->per_task.gpus * r->replicas;
    auto q = options_.scheduler.quotas.find(r->user);
    if (q != options_.scheduler.quotas.end() && !q->second.borrow) {
      const Use& u = used[r->user];
      const scheduler::Quota& quota = q->second;
      if (quota.gpus >= 0 && u.gpus + gpus > quota.gpus) {
        plan.pending_reasons[r->job_id] =
            fmt::format("quota: {} holds {} of {} GPUs and this job needs {}", r->user, u.gpus, quota.gpus, gpus);
        continue;
      }
      if (quota.cpu_milli >= 0 && u.cpu_milli + cpu > quota.cpu_milli) {
        plan.pending_reasons[r->job_id] = fmt::format("quota: {} holds {} of {} CPUs and this job needs {}", r->user,
                                                      FormatCpu(u.cpu_milli), FormatCpu(quota.cpu_milli), FormatCpu(cpu));
        continue;
      }
    }
    used[r->user].cpu_milli += cpu;
    used[r->user].gpus += gpus;
    ++waiting_of[r->user];
    ++handed;
    plan.placements.push_back({r->job_id, {}, false, {}});
  }
  return plan;
}

Status JobService::HandOverLocked(const scheduler::Plan& plan, PassInput& in) {
  for (const auto& p : plan.placements) {
    Job& job = *in.by_id[p.job_id];
    RM_RETURN_IF_ERROR(store_->InTransaction([&]() -> Status {
      RM_ASSIGN_OR_RETURN(auto tasks, store_->ListTasks(job.id));
      for (Task& t : tasks) {
        t.node_id = 0;
        t.attempt += 1;
        t.desired = Desired::kRun;
        t.port = 0;
        t.gpu_indices.clear();
        t.overlay_ip.clear();
        RM_RETURN_IF_ERROR(SetTaskState(t, State::kScheduled, "handed to Slurm"));
      }
      return SetJobState(job, State::kScheduled, "handed to Slurm");
    }));
    std::lock_guard<std::mutex> sl(stats_mu_);
    ++stats_.placements;
  }
  if (!plan.placements.empty() && options_.on_external_work) options_.on_external_work();
  return Status::Ok();
}

StatusOr<std::vector<ExternalGang>> JobService::ExternalGangs() {
  std::lock_guard<std::mutex> l(mu_);
  RM_ASSIGN_OR_RETURN(auto placed, store_->ListPlacedTasks());
  std::map<int64_t, std::vector<const Task*>> by_job;
  for (const Task& t : placed) by_job[t.job_id].push_back(&t);
  std::map<int64_t, std::string> users;
  std::vector<ExternalGang> out;
  for (const auto& [job_id, tasks] : by_job) {
    auto got = store_->GetJob(job_id);
    if (!got.ok()) continue;  // deleted meanwhile: one job never stops the others' sync
    const Job& job = *got;
    auto spec = SpecLocked(job);
    if (!spec.ok()) continue;  // the pass fails it
    if (!users.count(job.user_id)) {
      auto u = store_->GetUser(job.user_id);
      users[job.user_id] = u.ok() ? u->name : "";
    }
    ExternalGang g;
    g.job_id = job.id;
    g.attempt = tasks.front()->attempt;
    g.user_id = job.user_id;
    g.user = users[job.user_id];
    g.job_name = job.name;
    g.spec = *spec;
    g.replicas = static_cast<int>(tasks.size());
    g.bound = std::all_of(tasks.begin(), tasks.end(), [](const Task* t) { return t->node_id != 0; });
    g.stopping = job.stop_state.has_value() ||
                 std::any_of(tasks.begin(), tasks.end(), [](const Task* t) { return t->desired == Desired::kStop; });
    g.stop_reason = job.stop_reason;
    g.reason = job.reason;
    g.stop_since_ms = job.updated_ms;
    out.push_back(std::move(g));
  }
  return out;
}

Status JobService::NoteExternalReason(int64_t job_id, int attempt, const std::string& reason) {
  std::lock_guard<std::mutex> l(mu_);
  RM_ASSIGN_OR_RETURN(Job job, store_->GetJob(job_id));
  if (job.state != State::kScheduled || job.stop_state || job.reason == reason) return Status::Ok();
  RM_ASSIGN_OR_RETURN(auto tasks, store_->ListTasks(job_id));
  if (tasks.empty() || tasks.front().attempt != attempt) return Status::Ok();
  // The job's reason (what `show` prints), without an event: Slurm cycles
  // through reasons while a job waits, and events are for transitions.
  job.reason = reason;
  job.updated_ms = clock_->NowMs();
  return store_->UpdateJob(job);
}

Status JobService::EndExternalGang(int64_t job_id, int attempt, ExternalEnd how, const std::string& reason) {
  std::lock_guard<std::mutex> l(mu_);
  RM_ASSIGN_OR_RETURN(Job job, store_->GetJob(job_id));
  if (IsTerminal(job.state)) return Status::Ok();
  RM_ASSIGN_OR_RETURN(auto tasks, store_->ListTasks(job_id));
  bool ours = false;
  for (const Task& t : tasks) ours |= t.attempt == attempt && !IsTerminal(t.state) && t.state != State::kPending;
  if (!ours) return Status::Ok();
  const Status st = store_->InTransaction([&]() -> Status {
    const int64_t now = clock_->NowMs();
    if (how == ExternalEnd::kRequeue && job.stop_state != State::kCancelled && job.stop_state != State::kSucceeded) {
      // A node failed under it: whatever its ranks said as it went down, the
      // gang starts again at once and resumes from its checkpoint.
      RM_RETURN_IF_ERROR(store_->AddEvent({0, job.id, 0, -1, now, StateName(job.state), StateName(job.state), reason}));
      job.resize_to = job.replicas;
      job.stop_state = State::kPending;
      job.stop_reason = reason + ": requeued, it resumes from its checkpoint";
      RM_RETURN_IF_ERROR(store_->UpdateJob(job));
    } else if (how == ExternalEnd::kFatal && !job.stop_state) {
      job.stop_state = State::kFailed;
      job.stop_reason = reason;
      RM_RETURN_IF_ERROR(store_->UpdateJob(job));
    }
    for (Task& t : tasks) {
      if (t.attempt != attempt || IsTerminal(t.state) || t.state == State::kPending) continue;
      State to = State::kLost;
      if (how == ExternalEnd::kFailed) to = State::kFailed;
      if (how == ExternalEnd::kStopped || how == ExternalEnd::kFatal || t.desired == Desired::kStop) {
        to = State::kCancelled;
      }
      const std::string why = to == State::kCancelled && !job.stop_reason.empty()
                                  ? fmt::format("{} ({})", job.stop_reason, reason)
                                  : reason;
      RM_RETURN_IF_ERROR(SetTaskState(t, to, why));
    }
    return SettleJobLocked(job.id);
  });
  spdlog::info("job {} attempt {}: {}", job_id, attempt, reason);
  Wake();
  return st;
}

Status JobService::BindStepNodeLocked(const store::Node& node) {
  int64_t job_id = 0;
  int attempt = 0, rank = 0;
  if (!ParseStepNodeName(node.name, &job_id, &attempt, &rank)) return Status::Ok();
  auto job = store_->GetJob(job_id);
  if (!job.ok() || IsTerminal(job->state) || job->stop_state) return Status::Ok();
  RM_ASSIGN_OR_RETURN(auto tasks, store_->ListTasks(job_id));
  for (const Task& t : tasks) {
    if (t.attempt != attempt || t.state != State::kScheduled || t.node_id != 0) return Status::Ok();
  }
  // Every rank's step node, by name: the gang starts when all have come.
  RM_ASSIGN_OR_RETURN(auto nodes, store_->ListNodes());
  std::map<std::string, const store::Node*> by_name;
  for (const store::Node& n : nodes) by_name[n.name] = &n;
  std::vector<const store::Node*> step(tasks.size());
  std::set<std::string> hosts;
  for (size_t i = 0; i < tasks.size(); ++i) {
    auto it = by_name.find(StepNodeName(job_id, attempt, tasks[i].rank));
    if (it == by_name.end()) return Status::Ok();
    step[i] = it->second;
  }
  std::string slurm_job, where;
  for (const store::Node* n : step) {
    auto labels = nlohmann::json::parse(n->labels_json, nullptr, false);
    if (!labels.is_object()) continue;
    if (slurm_job.empty()) slurm_job = labels.value("slurm.job", "");
    const std::string host = labels.value("slurm.node", n->address);
    if (hosts.insert(host).second) where += (where.empty() ? "" : ", ") + host;
  }
  const std::string why = fmt::format("started by Slurm as job {} on {}", slurm_job, where);
  RM_RETURN_IF_ERROR(store_->InTransaction([&]() -> Status {
    for (size_t i = 0; i < tasks.size(); ++i) {
      Task& t = tasks[i];
      const store::Node& n = *step[i];
      t.node_id = n.id;
      t.port = n.port_hi >= n.port_lo ? n.port_lo : 0;
      // Every GPU of the step: its place in the step's list (the agent maps it
      // to the device Slurm bound, as it maps an agent's to NVML's index).
      std::vector<int> gpus;
      for (int g = 0; g < n.gpu_count; ++g) gpus.push_back(g);
      t.gpu_indices = fmt::format("{}", fmt::join(gpus, ","));
      RM_RETURN_IF_ERROR(SetTaskState(t, State::kScheduled, why));
    }
    Job j = *job;
    j.reason = why;
    j.updated_ms = clock_->NowMs();
    return store_->UpdateJob(j);
  }));
  {
    std::lock_guard<std::mutex> sl(stats_mu_);
    for (size_t i = 0; i < tasks.size(); ++i) tasks_on_[step[i]->id].insert(tasks[i].id);
  }
  for (const store::Node* n : step) BumpNodeLocked(n->id);
  spdlog::info("job {} attempt {}: {}", job_id, attempt, why);
  return Status::Ok();
}

}  // namespace ringmaster::server
