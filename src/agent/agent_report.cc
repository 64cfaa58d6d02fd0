// What the agent tells its server as tasks go (split from agent.cc): the
// tick's loop, which collects exits, ships output and sends every report
// of the tick in one call, and the janitors, which release what a reported
// task held. Members of Agent: see agent.h for their contracts.
#include <algorithm>
#include <cstddef>

#include <fmt/format.h>

#include "agent/agent.h"
#include "common/log.h"

namespace ringmaster::agent {
namespace {

constexpr size_t kShipChunk = 1 << 20;
// Reports and output pieces: the HTTP client's default read deadline.
constexpr std::chrono::milliseconds kCallTimeout{30'000};

}  // namespace

void Agent::TickLoop() {
  while (running_) {
    Tick();
    // Until the next tick, or until a task's thread has something to report.
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait_for(l, options_.tick_interval, [this] { return !running_ || kick_; });
    kick_ = false;
  }
}

void Agent::Tick() {
  int64_t budget = options_.ship_bytes_per_tick;
  std::vector<TaskRef> refs;
  std::vector<std::pair<TaskRef, std::string>> phases;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (const auto& [r, t] : tasks_) refs.push_back(r);
    phases.swap(phases_);
  }
  // Every report of this tick goes in one call: phases first (they happened
  // before), then starts and exits.
  enum class Sent { kNothing, kRunning, kExited };
  struct Round {
    TaskRef ref;
    LocalTask t;
    uint64_t replies_before = 0;  // replies seen before this round's reports
    bool had_exit = false;
    Sent sent = Sent::kNothing;
    size_t report = 0;  // its place in the batch
  };
  std::vector<Round> rounds;
  protocol::TaskReports batch;
  const int64_t node = node_id_;
  if (node != 0) {
    for (const auto& [ref, phase] : phases) {
      batch.reports.push_back({ref.task_id, {node, ref.attempt, "", std::nullopt, phase}});
    }
  }
  for (const auto& ref : refs) {
    Round r{ref};
    {
      std::lock_guard<std::mutex> l(mu_);
      auto it = tasks_.find(ref);
      if (it == tasks_.end()) continue;
      r.t = it->second;
      r.replies_before = replies_;
    }
    LocalTask& t = r.t;
    if (!t.launched && !t.exit) continue;  // still staging
    r.had_exit = t.exit.has_value();
    // A task whose thread watches its exit is polled once a second (a safety
    // net; watched_exit_poll), or on every tick while being stopped (Poll
    // sends the SIGKILL when due).
    const int64_t now = SteadyMs();
    if (!t.exit && (!t.exit_watched || t.stop_sent || now - t.polled_ms >= options_.watched_exit_poll.count())) {
      t.exit = executor_->Poll(ref.Key());
      t.polled_ms = now;
      if (t.exit) t.times.exited = now;
    }
    bool all_shipped = true;
    if (t.launched) {
      all_shipped = node != 0 && ShipOutput(TaskOutput::kLog, t, &t.shipped, &budget);
      all_shipped = node != 0 && ShipOutput(TaskOutput::kMetrics, t, &t.metrics_shipped, &budget) && all_shipped;
    }
    if (node != 0 && !t.reported_running && !t.exit) {
      r.sent = Sent::kRunning;
    } else if (node != 0 && t.exit && all_shipped && t.files_done) {
      // An exit is reported once its output is shipped and its files uploaded.
      r.sent = Sent::kExited;
    }
    if (r.sent != Sent::kNothing) {
      r.report = batch.reports.size();
      protocol::TaskStatusReport st{node, ref.attempt, r.sent == Sent::kRunning ? "running" : "exited", std::nullopt, ""};
      if (r.sent == Sent::kExited) st.exit = protocol::TaskExitInfo{t.exit->exit_code, t.exit->signal, t.exit->message};
      batch.reports.push_back({ref.task_id, std::move(st)});
    }
    rounds.push_back(std::move(r));
  }
  const std::vector<protocol::TaskReportResult> results = SendReports(node, batch);
  std::vector<std::string> released;
  for (Round& r : rounds) {
    LocalTask& t = r.t;
    const std::string key = r.ref.Key();
    bool stale = false, accepted = false;
    if (r.sent != Sent::kNothing && r.report < results.size()) {
      const protocol::TaskReportResult& res = results[r.report];
      accepted = res.code.empty();
      stale = res.code == "FailedPrecondition" || res.code == "NotFound";
      if (stale) spdlog::info("agent: task {} is stale: {}", key, res.message);
      // Refused as it is: sending it again would be refused again, every tick.
      if (res.code == "InvalidArgument") {
        spdlog::error("agent: task {}: the server refused its {} report: {}", key,
                      r.sent == Sent::kRunning ? "running" : "exit", res.message);
        accepted = true;
      }
    }
    if (r.sent == Sent::kRunning) {
      t.reported_running = accepted;
      if (stale) {
        (void)executor_->Stop(key, std::chrono::seconds(5));
        t.stop_sent = true;
      }
    }
    const bool done = t.exit && (r.sent == Sent::kExited ? accepted || stale : stale);
    {
      std::lock_guard<std::mutex> l(mu_);
      auto it = tasks_.find(r.ref);
      if (it == tasks_.end()) continue;
      LocalTask& cur = it->second;  // its thread may have changed it meanwhile: only what Tick owns is written
      if (!cur.exit && t.exit) {
        cur.exit = t.exit;
        cur.times.exited = t.times.exited;
      }
      cur.polled_ms = t.polled_ms;
      cur.shipped = t.shipped;
      cur.metrics_shipped = t.metrics_shipped;
      cur.reported_running = t.reported_running;
      cur.metrics_refused = t.metrics_refused;
      cur.stop_sent = cur.stop_sent || t.stop_sent;
      if (done) {
        // A reply that may predate the report could still list the task: guard
        // against restarting it, unless a later reply has already dropped it.
        if (cur.unlisted_at <= r.replies_before) released_.insert(r.ref);
        tasks_.erase(it);
        if (auto w = workers_.find(r.ref); w != workers_.end()) {
          zombies_.push_back(std::move(w->second));  // its thread sees the task gone and returns
          workers_.erase(w);
        }
        ::unlink(SyncedPath(r.ref).c_str());
        released.push_back(key);
        LogTimeline(key, cur.times);
      }
    }
    if ((!r.had_exit && t.exit) || done) cv_.notify_all();  // its thread uploads what it left, or ends
  }
  // Its files, cgroups, namespace, ports and flows go on the janitor's
  // thread: removing them takes a while, and no report waits for it.
  if (!released.empty() && janitors_.empty()) {
    for (const std::string& key : released) Release(key);  // stepped by a test: no janitor
  } else if (!released.empty()) {
    std::lock_guard<std::mutex> l(detach_mu_);
    for (std::string& key : released) detach_queue_.push_back(std::move(key));
    detach_cv_.notify_all();
  }
  ReapWorkers();
}

// Each step's own length, ms: `bench/node_launch` reads these.
void Agent::LogTimeline(const std::string& key, const LocalTask::Timeline& t) const {
  if (t.assigned == 0 || t.started == 0 || !spdlog::should_log(spdlog::level::debug)) return;
  const int64_t now = SteadyMs();
  const int64_t exited = t.exited ? t.exited : now, uploaded = std::max(t.uploaded, exited);
  spdlog::debug("agent: task {} launch timeline: network={} plan={} start={} run={} upload={} report={}", key,
                t.network - t.assigned, t.planned - t.network, t.started - t.planned, exited - t.started,
                uploaded - exited, now - uploaded);
}

std::vector<protocol::TaskReportResult> Agent::SendReports(int64_t node, const protocol::TaskReports& batch) {
  std::vector<protocol::TaskReportResult> results;
  if (abandoned_ || batch.reports.empty()) return results;
  for (size_t from = 0; from < batch.reports.size(); from += protocol::kMaxReportsPerBody) {
    protocol::TaskReports part;
    const size_t to = std::min(batch.reports.size(), from + protocol::kMaxReportsPerBody);
    part.reports.assign(batch.reports.begin() + static_cast<std::ptrdiff_t>(from),
                        batch.reports.begin() + static_cast<std::ptrdiff_t>(to));
    auto reply = control_->ReportStatuses(node, part, kCallTimeout);
    if (!reply.ok()) {
      // None of these recorded: the starts and exits go again next tick (phases are best effort).
      spdlog::debug("agent: reports: {}", reply.status().ToString());
      break;
    }
    for (auto& r : reply->results) results.push_back(std::move(r));
  }
  return results;
}

void Agent::Release(const std::string& key) {
  executor_->Release(key);
  Detach(key);
}

void Agent::DetachLoop() {
  std::unique_lock<std::mutex> l(detach_mu_);
  while (true) {
    detach_cv_.wait(l, [this] { return !detach_queue_.empty() || detach_stop_; });
    if (detach_queue_.empty()) return;  // stopping, with nothing left
    std::string key = std::move(detach_queue_.front());
    detach_queue_.pop_front();
    l.unlock();
    Release(key);
    l.lock();
  }
}

bool Agent::ShipOutput(TaskOutput what, LocalTask& t, int64_t* shipped, int64_t* budget) {
  const protocol::OutputKind kind = what == TaskOutput::kLog ? protocol::OutputKind::kLogs : protocol::OutputKind::kMetrics;
  const char* route = protocol::OutputRoute(kind);
  // Metrics past the cap are not shipped: the server would keep none of them,
  // and a sparse file of terabytes must not keep the agent busy for days.
  const int64_t cap = what == TaskOutput::kMetrics ? options_.max_metrics_bytes : INT64_MAX;
  for (int rounds = 0; rounds < 8; ++rounds) {
    if (*shipped >= cap) return true;
    if (*budget <= 0) return false;  // the rest next tick
    const size_t want = static_cast<size_t>(std::min<int64_t>({int64_t{kShipChunk}, cap - *shipped, *budget}));
    auto chunk = executor_->ReadOutput(t.ref.Key(), what, *shipped, want);
    if (!chunk.ok()) {
      if (chunk.status().code() == StatusCode::kNotFound) return true;  // nothing written yet
      if (chunk.status().code() == StatusCode::kPermissionDenied) {
        // Not a file the agent may read for this task (e.g. a symlink the task
        // planted): ship nothing of it, and say so once.
        if (!t.metrics_refused) {
          spdlog::warn("agent: task {}: not shipping its {}: {}", t.ref.Key(), route, chunk.status().message());
          t.metrics_refused = true;
        }
        return true;
      }
      return false;
    }
    if (chunk->data.empty()) return *shipped >= chunk->size;
    *budget -= static_cast<int64_t>(chunk->data.size());
    auto res = control_->ShipOutput({t.ref.task_id, kind, t.ref.attempt, *shipped, std::move(chunk->data)},
                                    kCallTimeout);
    if (!res.ok()) {
      if (res.status().code() == StatusCode::kFailedPrecondition) return true;  // stale attempt: drop
      return false;
    }
    int64_t server_size = res->size;
    *shipped = std::min<int64_t>(server_size, chunk->size);
    if (*shipped >= std::min(chunk->size, cap)) return true;
  }
  return false;
}

// Rides on the next tick's reports; an older server refuses it (no state it knows): the task runs all the same.
void Agent::ReportPhase(const LocalTask& t, const char* phase) {
  std::lock_guard<std::mutex> l(mu_);
  phases_.emplace_back(t.ref, phase);
}

}  // namespace ringmaster::agent
