#include "agent/agent.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>

#include <fmt/format.h>

#include "agent/executor/safe_fs.h"
#include "agent/http_control_plane.h"
#include "protocol/image_ref.h"
#include "common/files.h"
#include "common/log.h"
#include "common/thread_name.h"

namespace ringmaster::agent {
namespace {

constexpr int kLongPollSeconds = 20;

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

Agent::Agent(AgentOptions options, std::unique_ptr<Executor> executor, std::unique_ptr<ControlPlane> control,
             const Clock* clock)
    : options_(std::move(options)),
      executor_(std::move(executor)),
      api_(options_.server_url, options_.token, options_.ca_file),
      control_(control ? std::move(control) : std::make_unique<HttpControlPlane>(api_)),
      clock_(clock ? clock : RealClock::Get()),
      files_(&api_, TaskFilesOptions{options_.data_dir + "/cache", options_.input_cache_bytes}),
      images_(&api_, options_.image_cache_dir.empty() ? options_.data_dir + "/images" : options_.image_cache_dir),
      registry_images_((options_.image_cache_dir.empty() ? options_.data_dir + "/images" : options_.image_cache_dir) +
                           "/layers",
                       options_.layer_cache_bytes, options_.unpack_limits, [this] {
        RegistryImageOptions o = WithServerRegistry(options_.registry, options_.server_url, options_.ca_file);
        if (o.manifest_dir.empty()) {
          o.manifest_dir = (options_.image_cache_dir.empty() ? options_.data_dir + "/images" : options_.image_cache_dir) +
                           "/manifests";
        }
        return o;
      }()) {
  inventory_ = DetectNode(options_.nvml_library);
  if (options_.gpus) inventory_.gpus = *options_.gpus;
  if (!options_.node_name.empty()) inventory_.name = options_.node_name;
  if (options_.cpu_milli > 0) inventory_.cpu_milli = options_.cpu_milli;
  if (options_.memory_bytes > 0) inventory_.memory_bytes = options_.memory_bytes;
  address_ = options_.address.empty() ? HostAddress() : options_.address;
}

Agent::~Agent() { Stop(); }

void Agent::Start() {
  Open();
  StartLabTunnel();
  // Several: removing a job's network waits on the kernel (tens of ms) more than it works.
  for (int i = 0; i < kJanitors; ++i) {
    janitors_.emplace_back([this] {
      NameThisThread("agent-janitor");
      DetachLoop();
    });
  }
  sync_thread_ = std::thread([this] {
    NameThisThread("agent-sync");
    SyncLoop();
  });
  tick_thread_ = std::thread([this] {
    NameThisThread("agent-tick");
    TickLoop();
  });
  heartbeat_thread_ = std::thread([this] {
    NameThisThread("agent-beat");
    HeartbeatLoop();
  });
  sample_thread_ = std::thread([this] {
    NameThisThread("agent-sample");
    SampleLoop();
  });
  // Fencing has a thread of its own: every other one may wait on the network.
  fence_thread_ = std::thread([this] {
    NameThisThread("agent-fence");
    while (running_) {
      FenceOnce();
      SleepFor(std::chrono::milliseconds(250));
    }
  });
}

void Agent::Open() {
  if (options_.task_users.isolating()) {
    spdlog::info("agent: {}", options_.task_users.Describe());
  } else {
    spdlog::warn("agent: {}", options_.task_users.Describe());
  }
  if (Status st = files_.Init(); !st.ok()) spdlog::error("agent: the input cache: {}", st.ToString());
  (void)MakeDirs(options_.data_dir + "/synced", 0700);
  running_ = true;
  std::vector<std::pair<std::string, std::string>> netns;  // re-adopted tasks' job namespaces
  {
    std::lock_guard<std::mutex> l(mu_);
    for (const auto& [key, meta] : executor_->Recover()) {
      LocalTask t;
      try {
        auto j = nlohmann::json::parse(meta);
        t.ref.task_id = j.at("task_id");
        t.ref.attempt = j.at("attempt");
        t.job_id = j.value("job_id", int64_t{0});
        t.outputs = j.value("outputs", std::vector<std::string>{});
        t.gpus = j.value("gpus", std::vector<int>{});
        netns.emplace_back(key, j.value("netns", ""));
      } catch (...) {
        executor_->Release(key);
        continue;
      }
      spdlog::info("agent: re-adopting task {} (attempt {})", t.ref.task_id, t.ref.attempt);
      t.launched = true;
      tasks_[t.ref] = t;
      StartWorkerLocked(t.ref, std::nullopt);
    }
  }
  AdoptJobNetworks(netns);
  // Re-adopted tasks are fenced on the clock of the agent that started them.
  LoadFencing();
}

void Agent::Stop() {
  if (!running_.exchange(false)) return;
  cv_.notify_all();
  control_->Cancel();  // ends the long-poll and any transfer now instead of when they time out
  if (sync_thread_.joinable()) sync_thread_.join();
  if (tick_thread_.joinable()) tick_thread_.join();
  if (heartbeat_thread_.joinable()) heartbeat_thread_.join();
  if (sample_thread_.joinable()) sample_thread_.join();
  if (fence_thread_.joinable()) fence_thread_.join();
  {
    std::lock_guard<std::mutex> l(detach_mu_);
    detach_stop_ = true;
    detach_cv_.notify_all();
  }
  for (std::thread& t : janitors_) t.join();
  janitors_.clear();
  if (lab_tunnel_) lab_tunnel_->Stop();
  std::map<TaskRef, Worker> workers;
  std::vector<Worker> zombies;
  {
    std::lock_guard<std::mutex> l(mu_);
    workers.swap(workers_);
    zombies.swap(zombies_);
  }
  for (auto& [ref, w] : workers) w.thread.join();
  for (Worker& w : zombies) w.thread.join();
}

bool Agent::WaitSettled(std::chrono::milliseconds guard) {
  std::unique_lock<std::mutex> l(mu_);
  return cv_.wait_for(l, guard, [this] {
    return std::all_of(tasks_.begin(), tasks_.end(), [](const auto& t) {
      return (t.second.launched || t.second.exit) && (!t.second.exit || t.second.files_done);
    });
  });
}

void Agent::SleepFor(std::chrono::milliseconds d) {
  std::unique_lock<std::mutex> l(mu_);
  cv_.wait_for(l, d, [this] { return !running_; });
}

void Agent::SyncLoop() {
  auto backoff = std::chrono::milliseconds(250);
  while (running_) {
    Status st = SyncOnce(std::chrono::seconds(kLongPollSeconds));
    if (st.ok()) {
      backoff = std::chrono::milliseconds(250);
      continue;
    }
    // Refused (a protocol this server does not speak): tried again slowly,
    // since the server may be upgraded meanwhile.
    SleepFor(st.code() == StatusCode::kFailedPrecondition ? std::chrono::milliseconds(30'000) : backoff);
    backoff = std::min(backoff * 2, std::chrono::milliseconds(5000));
  }
}

Status Agent::SyncOnce(std::chrono::seconds wait) {
  if (node_id_ == 0) RM_RETURN_IF_ERROR(Register());
  auto res = control_->PollAssignments(node_id_, index_, wait, wait + std::chrono::seconds(10));
  if (!res.ok()) {
    if (res.status().code() == StatusCode::kNotFound) node_id_ = 0;  // server forgot us: register again
    spdlog::debug("agent: assignments: {}", res.status().ToString());
    index_ = 0;
    // A malformed answer is one poll's failure, never the agent's end.
    return Unavailable("assignments: " + res.status().message());
  }
  index_ = res->index;
  Reconcile(res->tasks);
  return Status::Ok();
}

void Agent::Reconcile(const std::vector<protocol::Assignment>& assignments) {
  std::lock_guard<std::mutex> l(mu_);
  ++replies_;
  std::set<TaskRef> wanted;
  for (const auto& a : assignments) {
    const TaskRef ref{a.task_id, a.attempt};
    wanted.insert(ref);
    if (released_.count(ref)) continue;
    const bool stop = a.stop;
    auto grace = std::chrono::milliseconds(a.stop_grace_ms);
    auto it = tasks_.find(ref);
    // Fenced (the server has not answered a heartbeat for its fencing
    // window): nothing new starts until it does; a later answer lists it again.
    if (it == tasks_.end() && fenced_ && !stop) continue;
    if (it == tasks_.end()) {
      ever_assigned_ = true;
      LocalTask t;
      t.ref = ref;
      t.times.assigned = SteadyMs();
      if (stop) {
        t.exit = TaskExit{-1, 0, "stopped before it started"};
        t.files_done = true;
        tasks_[ref] = t;
      } else {
        tasks_[ref] = t;
        // Staging may take long: the task's own thread does it.
        StartWorkerLocked(ref, a);
      }
    } else if (stop && !it->second.stop_sent && !it->second.exit) {
      it->second.stop_sent = true;
      it->second.stop_grace = grace;
      if (it->second.launched) (void)executor_->Stop(ref.Key(), grace);  // else its thread will, or not start it
    }
  }
  // Tasks the server no longer lists are not wanted: stop them.
  for (auto& [ref, t] : tasks_) {
    if (!wanted.count(ref)) t.unlisted_at = replies_;
    if (!wanted.count(ref) && !t.exit && !t.stop_sent) {
      spdlog::info("agent: stopping task {}: the server no longer assigns it here", ref.Key());
      t.stop_sent = true;
      t.stop_grace = std::chrono::seconds(5);
      if (t.launched) (void)executor_->Stop(ref.Key(), t.stop_grace);
    }
  }
  // What the server no longer lists needs no guard against a stale reply any
  // more; forgetting it keeps this set small and lets an id that comes back run.
  std::erase_if(released_, [&](const TaskRef& r) { return !wanted.count(r); });
}

std::optional<TaskExit> Agent::Launch(const TaskRef& ref, const protocol::Assignment& a, LocalTask* t) {
  const std::string key = ref.Key();
  TaskLaunch launch;
  launch.key = key;
  {
    launch.argv = a.argv;
    // How it runs: the executor the job pins, else for an image the first
    // container runtime this node has (runc starts faster than Docker).
    const std::string& image = a.image;
    const std::string& pinned = a.executor;
    const auto offered = executor_->Runtimes();
    auto offers = [&offered](const std::string& r) { return std::find(offered.begin(), offered.end(), r) != offered.end(); };
    launch.runtime = !pinned.empty() ? pinned : image.empty() ? "process" : offers("runc") ? "runc" : "docker";
    if (!offers(launch.runtime)) return TaskExit{-1, 0, "this node has no " + launch.runtime + " executor"};
    if (launch.runtime != "process" && image.empty()) return TaskExit{-1, 0, "a container task needs an image"};
    if (!image.empty()) {
      const size_t at = image.find("@sha256:");
      if (at == std::string::npos) return TaskExit{-1, 0, "image " + image + " is not pinned to a digest"};
      launch.image.name = image.substr(0, at);
      launch.image.digest = image.substr(at + 8);
      // A registry's image ("host/repo..."): pulled below, with its owner's login.
      if (auto ref = protocol::ParseImageRef(image); ref.ok() && !ref->registry.empty()) launch.image.reference = image;
    }
    // A container gets the image's environment, not this host's.
    if (launch.runtime == "process") launch.env = BaseEnv();
    for (const auto& [k, v] : a.env) launch.env[k] = v;
    if (auto refused = PrepareNetwork(key, a, &launch)) return refused;
    t->times.network = SteadyMs();
    const protocol::TaskLimits& l = a.limits;
    launch.limits.cpu_milli = l.cpu_milli;
    launch.limits.memory_bytes = l.memory_bytes;
    launch.limits.pids = l.pids;
    launch.limits.io = {l.io_read_bps, l.io_write_bps, l.io_read_iops, l.io_write_iops};
    launch.disk_bytes = l.disk_bytes;  // 0: the executor's default (--default-task-disk)
    // The server hands out GPUs by their place in the node's list; the device
    // is the index the node registered there (NVML's, or the one Slurm bound).
    for (int p : a.gpus) {
      if (p < 0 || static_cast<size_t>(p) >= inventory_.gpus.size()) {
        return TaskExit{-1, 0, fmt::format("GPU {} is not one of this node's {}", p, inventory_.gpus.size())};
      }
      launch.gpus.push_back(inventory_.gpus[p].index);
    }
    launch.working_dir = a.working_dir;
    auto who = options_.task_users.Resolve(a.user_id, a.user_name);
    if (!who.ok()) {
      spdlog::warn("agent: task {} cannot run here: {}", key, who.status().message());
      return TaskExit{-1, 0, who.status().message()};
    }
    launch.identity = *who;
  }
  // Its files: the plan, then everything it names into the node's cache, then
  // (once the executor has made the work dir) into place.
  // A stop asked for meanwhile ends staging between files, and the task never starts.
  const auto stopped = [this, &ref] {
    std::lock_guard<std::mutex> l(mu_);
    auto it = tasks_.find(ref);
    return !running_ || it == tasks_.end() || it->second.stop_sent;
  };
  ReportPhase(*t, "staging");
  StatusOr<StagePlan> plan = Unavailable("not fetched");
  // A store or server that is briefly away (503, a cut connection) is waited
  // for; a refusal is not.
  const auto deadline = std::chrono::steady_clock::now() + options_.upload_deadline;
  for (auto backoff = std::chrono::milliseconds(500);; backoff = std::min(backoff * 2, std::chrono::milliseconds(10'000))) {
    plan = options_.stage_plan ? options_.stage_plan(ref.task_id, ref.attempt) : files_.Plan(ref.task_id, ref.attempt);
    if (plan.ok()) {
      if (!plan->inputs.empty() || !plan->checkpoint.empty()) {
        spdlog::info("agent: task {}: staging {} input files and {} checkpoint files", key, plan->inputs.size(),
                     plan->checkpoint.size());
      }
      if (Status st = files_.Fetch(ref.task_id, ref.attempt, launch.identity.uid, &*plan, stopped); !st.ok()) plan = st;
    }
    if (plan.ok() || stopped()) break;
    const auto code = plan.status().code();
    const bool transient = code == StatusCode::kUnavailable || code == StatusCode::kDeadlineExceeded ||
                           code == StatusCode::kInternal;
    if (!transient || std::chrono::steady_clock::now() > deadline) break;
    spdlog::info("agent: task {}: staging: {}; again in {} ms", key, plan.status().ToString(), backoff.count());
    SleepFor(backoff);
  }
  if (stopped()) return TaskExit{-1, 0, "stopped before it started"};
  if (!plan.ok()) {
    spdlog::warn("agent: task {}: staging its files failed: {}", key, plan.status().ToString());
    return TaskExit{-1, 0, "staging the job's files: " + plan.status().message()};
  }
  t->times.planned = SteadyMs();
  t->job_id = plan->job_id;
  t->outputs = plan->outputs;
  t->gpus = a.gpus;
  for (const StageEntry& e : plan->checkpoint) {
    if (e.to != "latest") plan->checkpoint_name = e.to.substr(0, e.to.find('/'));
  }
  if (!launch.image.name.empty()) ReportPhase(*t, "pulling");
  if (!launch.image.reference.empty()) {
    auto img = PullRegistryImage(ref, launch.image.reference, launch.runtime, stopped);
    if (stopped()) return TaskExit{-1, 0, "stopped before it started"};
    if (!img.ok()) {
      spdlog::warn("agent: task {}: pulling its image: {}", key, img.status().ToString());
      return TaskExit{-1, 0, "pulling image " + launch.image.name + ": " + img.status().message()};
    }
    launch.image = img->image;
    t->layers = img->lease;
  } else if (!launch.image.name.empty()) {
    auto img = images_.Ensure(launch.image.name, launch.image.digest, launch.runtime == "runc", stopped);
    if (stopped()) return TaskExit{-1, 0, "stopped before it started"};
    if (!img.ok()) {
      spdlog::warn("agent: task {}: pulling its image: {}", key, img.status().ToString());
      return TaskExit{-1, 0, "pulling image " + launch.image.name + ": " + img.status().message()};
    }
    launch.image = *img;
    if (launch.runtime != "runc") {
      // Docker asks for the tar only when its dockerd lacks the image; the
      // hold keeps the tar while the launch (and so the import) lasts.
      auto hold = std::make_shared<std::shared_ptr<void>>();
      launch.image.fetch_tar = [this, ref, hold, name = launch.image.name, digest = launch.image.digest] {
        const auto cancelled = [this, ref] {
          std::lock_guard<std::mutex> l(mu_);
          auto it = tasks_.find(ref);
          return !running_ || it == tasks_.end() || it->second.stop_sent;
        };
        return images_.EnsureTar(name, digest, cancelled, hold.get());
      };
    }
  }
  const TaskIdentity who = launch.identity;
  launch.prepare = [this, &plan, who](int work_fd) { return files_.Place(*plan, work_fd, who.uid, who.gid); };
  launch.meta_json = nlohmann::json{{"task_id", ref.task_id}, {"attempt", ref.attempt}, {"job_id", plan->job_id},
                                    {"outputs", plan->outputs}, {"gpus", t->gpus}, {"netns", launch.netns}}
                         .dump();
  (void)WriteFileAtomic(SyncedPath(ref), plan->checkpoint_name, 0600);
  if (stopped()) return TaskExit{-1, 0, "stopped before it started"};
  ReportPhase(*t, "starting");
  Status st = executor_->Start(launch);
  if (!st.ok()) {
    spdlog::warn("agent: task {} failed to start: {}", key, st.ToString());
    return TaskExit{-1, 0, st.message()};
  }
  t->times.started = SteadyMs();
  spdlog::info("agent: started task {} (job {} rank {}) as {} with {}{}{}", key, a.job_id, a.rank,
               launch.identity.Describe(), launch.runtime,
               launch.image.name.empty() ? "" : " (image " + launch.image.name + "@" + launch.image.digest.substr(0, 12) + ")",
               plan->checkpoint_name.empty() ? "" : ", with checkpoint " + plan->checkpoint_name);
  return std::nullopt;
}

void Agent::StartWorkerLocked(const TaskRef& ref, std::optional<protocol::Assignment> assignment) {
  if (auto w = workers_.find(ref); w != workers_.end()) {
    zombies_.push_back(std::move(w->second));  // an earlier one of the same id: joined once it has ended
    workers_.erase(w);
  }
  Worker w;
  w.finished = std::make_shared<std::atomic<bool>>(false);
  w.thread = std::thread([this, ref, a = std::move(assignment), f = w.finished] {
    NameThisThread("agent-task");
    RunTask(ref, a, f);
  });
  workers_[ref] = std::move(w);
}

void Agent::ReapWorkers() {
  std::vector<Worker> done;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (auto it = zombies_.begin(); it != zombies_.end();) {
      if (*it->finished) {
        done.push_back(std::move(*it));
        it = zombies_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (Worker& w : done) w.thread.join();  // they have returned: no wait
}

std::string Agent::SyncedPath(const TaskRef& ref) const { return options_.data_dir + "/synced/" + ref.Key(); }

void Agent::RunTask(TaskRef ref, std::optional<protocol::Assignment> a, std::shared_ptr<std::atomic<bool>> finished) {
  struct Finish {
    std::shared_ptr<std::atomic<bool>> flag;
    ~Finish() { *flag = true; }
  } finish{std::move(finished)};
  const std::string key = ref.Key();
  LocalTask t;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = tasks_.find(ref);
    if (it == tasks_.end()) return;
    t = it->second;
  }
  if (a) {
    auto exit = Launch(ref, *a, &t);
    std::lock_guard<std::mutex> l(mu_);
    auto it = tasks_.find(ref);
    if (it == tasks_.end()) return;
    it->second.job_id = t.job_id;
    it->second.outputs = t.outputs;
    it->second.gpus = t.gpus;
    it->second.times = t.times;
    it->second.layers = t.layers;  // held while the task runs (the layer store's LRU spares them)
    if (!running_) {
      // The agent is stopping: the next one re-adopts what started, and the
      // server assigns again what did not.
      if (!exit) it->second.launched = true;
      return;
    }
    if (exit) {
      it->second.exit = exit;
      it->second.files_done = true;
      kick_ = true;
      cv_.notify_all();
      return;
    }
    it->second.launched = true;
    if (it->second.stop_sent) (void)executor_->Stop(key, it->second.stop_grace);
    kick_ = true;  // report it running now, not a tick later
    cv_.notify_all();
    t = it->second;
  }
  if (t.job_id == 0) {  // adopted from an agent that kept no job id: nothing to upload
    std::lock_guard<std::mutex> l(mu_);
    if (auto it = tasks_.find(ref); it != tasks_.end()) it->second.files_done = true;
    cv_.notify_all();
    return;
  }
  std::string synced;
  if (auto text = ReadFile(SyncedPath(ref)); text.ok()) synced = *text;
  int failures = 0;
  auto retry_at = std::chrono::steady_clock::now();
  // The moment it ends, its thread collects its exit and uploads what it
  // left, then wakes the tick to report it: no tick polls it meanwhile.
  UniqueFd exit_fd(executor_->ExitFd(key));
  if (exit_fd) {
    std::lock_guard<std::mutex> l(mu_);
    if (auto it = tasks_.find(ref); it != tasks_.end()) it->second.exit_watched = true;
  }
  // While it runs: each new checkpoint, as soon as `latest` names it.
  while (true) {
    bool exited = false;
    if (exit_fd) {
      pollfd p{exit_fd.get(), POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(options_.checkpoint_poll.count())) > 0) {
        exit_fd = UniqueFd();
        std::optional<TaskExit> exit = executor_->Poll(key);
        std::lock_guard<std::mutex> l(mu_);
        if (auto it = tasks_.find(ref); it != tasks_.end()) {
          it->second.exit_watched = false;  // the tick polls it from now on, if it has not ended
          if (exit && !it->second.exit) {
            it->second.exit = exit;
            it->second.times.exited = SteadyMs();
          }
        }
        kick_ = true;
        cv_.notify_all();
      }
    }
    {
      std::unique_lock<std::mutex> l(mu_);
      cv_.wait_for(l, exit_fd ? std::chrono::milliseconds(0) : options_.checkpoint_poll, [&] {
        auto it = tasks_.find(ref);
        return !running_ || it == tasks_.end() || it->second.exit.has_value();
      });
      if (!running_) return;
      auto it = tasks_.find(ref);
      if (it == tasks_.end()) return;
      exited = it->second.exit.has_value();
      t = it->second;
    }
    if (exited) break;
    if (std::chrono::steady_clock::now() < retry_at) continue;
    auto box = executor_->SandboxOf(key);
    if (!box.ok()) continue;
    const std::string before = synced;
    Status st = files_.SyncCheckpoint(ref.task_id, ref.attempt, t.job_id, *box, &synced);
    if (!st.ok()) {
      // Each failure waits twice as long before the next try (up to 30 s).
      failures = std::min(failures + 1, 7);
      retry_at = std::chrono::steady_clock::now() + std::chrono::milliseconds(250 << failures);
      spdlog::warn("agent: task {}: {}", key, st.ToString());
    } else {
      failures = 0;
    }
    if (synced != before) (void)WriteFileAtomic(SyncedPath(ref), synced, 0600);
  }
  if (!t.outputs.empty()) ReportPhase(t, "uploading");
  std::string failed = FinalUploads(t, &synced);
  if (!running_) return;  // the next agent uploads them
  std::lock_guard<std::mutex> l(mu_);
  auto it = tasks_.find(ref);
  if (it == tasks_.end()) return;
  if (!failed.empty() && it->second.exit) {
    it->second.exit->message += (it->second.exit->message.empty() ? "" : "; ") + failed;
  }
  it->second.files_done = true;
  it->second.times.uploaded = SteadyMs();
  kick_ = true;  // report the exit now, not a tick later: peers' reports race with it
  cv_.notify_all();
}

std::string Agent::FinalUploads(const LocalTask& t, std::string* synced) {
  const std::string key = t.ref.Key();
  const auto deadline = std::chrono::steady_clock::now() + options_.upload_deadline;
  auto backoff = std::chrono::milliseconds(500);
  while (running_) {
    auto box = executor_->SandboxOf(key);
    if (!box.ok() && box.status().code() == StatusCode::kNotFound) return "";  // it left no files
    if (!box.ok()) return "outputs not uploaded: " + box.status().message();
    const std::string before = *synced;
    // Both, whatever the other did: a broken checkpoint keeps no output back.
    Status ckpt = files_.SyncCheckpoint(t.ref.task_id, t.ref.attempt, t.job_id, *box, synced);
    if (*synced != before) (void)WriteFileAtomic(SyncedPath(t.ref), *synced, 0600);
    UploadCount count;
    Status outs = files_.UploadOutputs(t.ref.task_id, t.ref.attempt, t.job_id, *box, t.outputs, &count);
    if (ckpt.ok() && outs.ok()) {
      if (count.files) spdlog::info("agent: task {}: {} output files uploaded to jobs/{}/outputs/", key, count.files, t.job_id);
      if (count.skipped) return fmt::format("{} output files not uploaded: their names are not valid files paths", count.skipped);
      return "";
    }
    Status st = !outs.ok() ? outs : ckpt;
    const auto code = st.code();
    // No longer this agent's attempt, or refused for good (quota, access, a bad path): no retry.
    if (code == StatusCode::kFailedPrecondition || code == StatusCode::kResourceExhausted ||
        code == StatusCode::kPermissionDenied || code == StatusCode::kInvalidArgument ||
        code == StatusCode::kNotFound || std::chrono::steady_clock::now() > deadline) {
      spdlog::warn("agent: task {}: uploading its files failed: {}", key, st.ToString());
      std::string why;
      if (!ckpt.ok()) why = "last checkpoint not uploaded: " + ckpt.message();
      if (!outs.ok()) why += (why.empty() ? "" : "; ") + std::string("outputs not uploaded: ") + outs.message();
      return why;
    }
    spdlog::info("agent: task {}: uploading its files: {}; again in {} ms", key, st.ToString(), backoff.count());
    SleepFor(backoff);
    backoff = std::min(backoff * 2, std::chrono::milliseconds(10'000));
  }
  return "";
}

}  // namespace ringmaster::agent
