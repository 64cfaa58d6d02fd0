#include "agent/agent.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <unistd.h>

#include <fmt/format.h>

#include "common/log.h"

namespace ringmaster::agent {
namespace {

constexpr size_t kShipChunk = 1 << 20;
constexpr int kLongPollSeconds = 20;
constexpr const char* kAgentVersion = "0.1.0";

// The environment every task starts from; the server's variables go on top.
// Not the agent's HOME, USER or TMPDIR: those are root's (the executor sets
// HOME and USER for the task's own user).
std::map<std::string, std::string> BaseEnv() {
  std::map<std::string, std::string> env;
  for (const char* name : {"PATH", "LANG", "LC_ALL", "TZ"}) {
    if (const char* v = getenv(name)) env[name] = v;
  }
  if (!env.count("PATH")) env["PATH"] = "/usr/local/bin:/usr/bin:/bin";
  return env;
}

// The directories of the job's files a task is told about: made for it, as
// its user, before it starts.
std::vector<std::string> DirsToMake(const std::map<std::string, std::string>& env) {
  std::vector<std::string> dirs;
  for (const char* name : {"RINGMASTER_CHECKPOINT_DIR", "RINGMASTER_OUTPUT_DIR", "RINGMASTER_DATASETS_DIR"}) {
    auto it = env.find(name);
    if (it != env.end() && !it->second.empty() && it->second[0] == '/') dirs.push_back(it->second);
  }
  return dirs;
}

// This host's IPv4 address as its hostname resolves; 127.0.0.1 if none.
std::string HostAddress() {
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  addrinfo hints{};
  hints.ai_family = AF_INET;
  addrinfo* res = nullptr;
  std::string out = "127.0.0.1";
  if (getaddrinfo(host, nullptr, &hints, &res) == 0 && res) {
    char buf[INET_ADDRSTRLEN];
    auto* sin = reinterpret_cast<sockaddr_in*>(res->ai_addr);
    if (inet_ntop(AF_INET, &sin->sin_addr, buf, sizeof buf)) out = buf;
    freeaddrinfo(res);
  }
  return out;
}

}  // namespace

std::string Agent::TaskRef::Key() const { return fmt::format("{}.{}", task_id, attempt); }

Agent::Agent(AgentOptions options, std::unique_ptr<Executor> executor)
    : options_(std::move(options)), executor_(std::move(executor)), api_(options_.server_url, options_.token, options_.ca_file) {
  inventory_ = DetectNode();
  if (!options_.node_name.empty()) inventory_.name = options_.node_name;
  if (options_.cpu_milli > 0) inventory_.cpu_milli = options_.cpu_milli;
  if (options_.memory_bytes > 0) inventory_.memory_bytes = options_.memory_bytes;
  address_ = options_.address.empty() ? HostAddress() : options_.address;
}

Agent::~Agent() { Stop(); }

void Agent::Start() {
  if (options_.task_users.isolating()) {
    spdlog::info("agent: {}", options_.task_users.Describe());
  } else {
    spdlog::warn("agent: {}", options_.task_users.Describe());
  }
  {
    std::lock_guard<std::mutex> l(mu_);
    for (const auto& [key, meta] : executor_->Recover()) {
      LocalTask t;
      try {
        auto j = nlohmann::json::parse(meta);
        t.ref.task_id = j.at("task_id");
        t.ref.attempt = j.at("attempt");
      } catch (...) {
        executor_->Release(key);
        continue;
      }
      spdlog::info("agent: re-adopting task {} (attempt {})", t.ref.task_id, t.ref.attempt);
      tasks_[t.ref] = t;
    }
  }
  running_ = true;
  sync_thread_ = std::thread([this] { SyncLoop(); });
  tick_thread_ = std::thread([this] { TickLoop(); });
  heartbeat_thread_ = std::thread([this] { HeartbeatLoop(); });
}

void Agent::Stop() {
  if (!running_.exchange(false)) return;
  cv_.notify_all();
  api_.Cancel();  // ends the long-poll now instead of when it times out
  if (sync_thread_.joinable()) sync_thread_.join();
  if (tick_thread_.joinable()) tick_thread_.join();
  if (heartbeat_thread_.joinable()) heartbeat_thread_.join();
}

void Agent::SleepFor(std::chrono::milliseconds d) {
  std::unique_lock<std::mutex> l(mu_);
  cv_.wait_for(l, d, [this] { return !running_; });
}

bool Agent::Register() {
  nlohmann::json gpus = nlohmann::json::array();
  for (const auto& g : inventory_.gpus) {
    gpus.push_back({{"index", g.index}, {"model", g.model}, {"memory_bytes", g.memory_bytes}, {"uuid", g.uuid}});
  }
  nlohmann::json body = {{"name", inventory_.name},
                         {"cpu_milli", inventory_.cpu_milli},
                         {"memory_bytes", inventory_.memory_bytes},
                         {"gpus", gpus},
                         {"agent_version", kAgentVersion},
                         {"address", address_},
                         {"port_lo", options_.port_lo},
                         {"port_hi", options_.port_hi},
                         {"labels", options_.labels}};
  auto res = api_.Post("/api/v1/agent/register", body);
  if (!res.ok()) {
    spdlog::warn("agent: registering with {} failed: {}", options_.server_url, res.status().ToString());
    return false;
  }
  node_id_ = res->at("node_id").get<int64_t>();
  spdlog::info("agent: registered node {} as {} ({} cpus, {} memory, {} gpus)", inventory_.name,
               node_id_.load(), inventory_.cpu_milli / 1000.0, inventory_.memory_bytes, inventory_.gpus.size());
  return true;
}

void Agent::SyncLoop() {
  uint64_t index = 0;
  auto backoff = std::chrono::milliseconds(250);
  while (running_) {
    if (node_id_ == 0 && !Register()) {
      SleepFor(backoff);
      backoff = std::min(backoff * 2, std::chrono::milliseconds(5000));
      continue;
    }
    auto res = api_.Get(fmt::format("/api/v1/agent/nodes/{}/assignments?index={}&wait={}", node_id_.load(),
                                    index, kLongPollSeconds),
                        {std::chrono::seconds(kLongPollSeconds + 10)});
    if (!res.ok()) {
      if (res.status().code() == StatusCode::kNotFound) node_id_ = 0;  // server forgot us: register again
      spdlog::debug("agent: assignments: {}", res.status().ToString());
      index = 0;
      SleepFor(backoff);
      backoff = std::min(backoff * 2, std::chrono::milliseconds(5000));
      continue;
    }
    backoff = std::chrono::milliseconds(250);
    // A malformed answer is one poll's failure, never the agent's end.
    try {
      index = res->value("index", uint64_t{0});
      Reconcile(res->at("tasks"));
    } catch (const std::exception& e) {
      spdlog::warn("agent: a malformed assignments answer: {}", e.what());
      index = 0;
      SleepFor(backoff);
    }
  }
}

void Agent::Reconcile(const nlohmann::json& assignments) {
  std::lock_guard<std::mutex> l(mu_);
  ++replies_;
  std::set<TaskRef> wanted;
  for (const auto& a : assignments) {
    const TaskRef ref{a.at("task_id").get<int64_t>(), a.at("attempt").get<int>()};
    wanted.insert(ref);
    if (released_.count(ref)) continue;
    bool stop = a.at("desired") == "stop";
    auto grace = std::chrono::milliseconds(a.value("stop_grace_ms", 5000));
    auto it = tasks_.find(ref);
    if (it == tasks_.end()) {
      LocalTask t;
      t.ref = ref;
      if (stop) {
        t.exit = TaskExit{-1, 0, "stopped before it started"};
      } else {
        t.exit = Launch(ref, a);
      }
      tasks_[ref] = t;
    } else if (stop && !it->second.stop_sent && !it->second.exit) {
      it->second.stop_sent = true;
      (void)executor_->Stop(ref.Key(), grace);
    }
  }
  // Tasks the server no longer lists are not wanted: stop them.
  for (auto& [ref, t] : tasks_) {
    if (!wanted.count(ref)) t.unlisted_at = replies_;
    if (!wanted.count(ref) && !t.exit && !t.stop_sent) {
      spdlog::info("agent: stopping task {}: the server no longer assigns it here", ref.Key());
      t.stop_sent = true;
      (void)executor_->Stop(ref.Key(), std::chrono::seconds(5));
    }
  }
  // What the server no longer lists needs no guard against a stale reply any
  // more; forgetting it keeps this set small and lets an id that comes back run.
  std::erase_if(released_, [&](const TaskRef& r) { return !wanted.count(r); });
}

std::optional<TaskExit> Agent::Launch(const TaskRef& ref, const nlohmann::json& a) {
  const std::string key = ref.Key();
  TaskLaunch launch;
  launch.key = key;
  try {
    launch.argv = a.at("argv").get<std::vector<std::string>>();
    launch.env = BaseEnv();
    for (auto& [k, v] : a.at("env").items()) launch.env[k] = v.get<std::string>();
    launch.working_dir = a.value("working_dir", "");
    const auto& user = a.at("user");
    auto who = options_.task_users.Resolve(user.at("id").get<int64_t>(), user.value("name", ""));
    if (!who.ok()) {
      spdlog::warn("agent: task {} cannot run here: {}", key, who.status().message());
      return TaskExit{-1, 0, who.status().message()};
    }
    launch.identity = *who;
    launch.files_dir = user.value("files_dir", "");
  } catch (const nlohmann::json::exception& e) {
    spdlog::warn("agent: task {}: malformed assignment: {}", key, e.what());
    return TaskExit{-1, 0, std::string("malformed assignment: ") + e.what()};
  }
  launch.make_dirs = DirsToMake(launch.env);
  launch.meta_json = nlohmann::json{{"task_id", ref.task_id}, {"attempt", ref.attempt}}.dump();
  Status st = executor_->Start(launch);
  if (!st.ok()) {
    spdlog::warn("agent: task {} failed to start: {}", key, st.ToString());
    return TaskExit{-1, 0, st.message()};
  }
  spdlog::info("agent: started task {} (job {} rank {}) as {}", key, a.value("job_id", 0), a.value("rank", 0),
               launch.identity.Describe());
  return std::nullopt;
}

void Agent::TickLoop() {
  while (running_) {
    Tick();
    SleepFor(options_.tick_interval);
  }
}

void Agent::HeartbeatLoop() {
  while (running_) {
    if (node_id_ != 0) Heartbeat();
    SleepFor(options_.heartbeat_interval);
  }
}

void Agent::Tick() {
  int64_t budget = options_.ship_bytes_per_tick;
  std::vector<TaskRef> refs;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (const auto& [r, t] : tasks_) refs.push_back(r);
  }
  for (const auto& ref : refs) {
    const std::string key = ref.Key();
    LocalTask t;
    uint64_t replies_before = 0;  // replies seen before this round's reports
    {
      std::lock_guard<std::mutex> l(mu_);
      auto it = tasks_.find(ref);
      if (it == tasks_.end()) continue;
      t = it->second;
      replies_before = replies_;
    }
    if (!t.exit) t.exit = executor_->Poll(key);
    bool all_shipped = node_id_ != 0 && ShipOutput(TaskOutput::kLog, t, &t.shipped, &budget);
    all_shipped = node_id_ != 0 && ShipOutput(TaskOutput::kMetrics, t, &t.metrics_shipped, &budget) && all_shipped;
    bool stale = false, done = false;
    if (node_id_ != 0 && !t.reported_running && !t.exit) {
      t.reported_running = Report(t, "running", &stale);
      if (stale) {
        (void)executor_->Stop(key, std::chrono::seconds(5));
        t.stop_sent = true;
      }
    }
    if (t.exit && all_shipped) done = Report(t, "exited", &stale) || stale;
    std::lock_guard<std::mutex> l(mu_);
    auto it = tasks_.find(ref);
    if (it == tasks_.end()) continue;
    t.stop_sent = t.stop_sent || it->second.stop_sent;  // Reconcile may have asked meanwhile
    t.unlisted_at = it->second.unlisted_at;
    if (done) {
      executor_->Release(key);
      // A reply that may predate the report could still list the task: guard
      // against restarting it, unless a later reply has already dropped it.
      if (t.unlisted_at <= replies_before) released_.insert(ref);
      tasks_.erase(it);
    } else {
      it->second = t;
    }
  }
}

bool Agent::ShipOutput(TaskOutput what, LocalTask& t, int64_t* shipped, int64_t* budget) {
  const char* route = what == TaskOutput::kLog ? "logs" : "metrics";
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
    auto res = api_.PostText(fmt::format("/api/v1/agent/tasks/{}/{}?attempt={}&offset={}", t.ref.task_id, route,
                                         t.ref.attempt, *shipped),
                             chunk->data, "application/octet-stream");
    if (!res.ok()) {
      if (res.status().code() == StatusCode::kFailedPrecondition) return true;  // stale attempt: drop
      return false;
    }
    int64_t server_size = res->value("size", int64_t{0});
    *shipped = std::min<int64_t>(server_size, chunk->size);
    if (*shipped >= std::min(chunk->size, cap)) return true;
  }
  return false;
}

bool Agent::Report(const LocalTask& t, const char* state, bool* stale) {
  nlohmann::json body = {{"node_id", node_id_.load()}, {"attempt", t.ref.attempt}, {"state", state}};
  if (t.exit) {
    body["exit_code"] = t.exit->exit_code;
    body["signal"] = t.exit->signal;
    body["message"] = t.exit->message;
  }
  auto res = api_.Post(fmt::format("/api/v1/agent/tasks/{}/status", t.ref.task_id), body);
  if (res.ok()) return true;
  auto code = res.status().code();
  if (code == StatusCode::kFailedPrecondition || code == StatusCode::kNotFound) {
    *stale = true;
    spdlog::info("agent: task {} is stale: {}", t.ref.Key(), res.status().message());
  }
  return false;
}

void Agent::Heartbeat() {
  nlohmann::json body = {{"cpu_util", usage_.CpuUtil()}, {"memory_used_bytes", UsageSampler::MemoryUsedBytes()}};
  auto res = api_.Post(fmt::format("/api/v1/agent/nodes/{}/heartbeat", node_id_.load()), body);
  if (!res.ok() && res.status().code() == StatusCode::kNotFound) node_id_ = 0;
}

}  // namespace ringmaster::agent
