#include "agent/executor/fake_executor.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <filesystem>

namespace ringmaster::agent {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

struct FakeExecutor::Task {
  TaskLaunch launch;
  std::optional<TaskExit> exit;
  std::string log, metrics;
  bool metrics_written = false;
  bool log_written = false;
  bool ignores_term = false;
  std::optional<Clock::time_point> kill_at;  // set by Stop
  std::optional<LiveUsage> usage;
  int exit_event = -1;  // an eventfd, readable once the task ended
  std::string sandbox;  // "" = none
};

struct FakeExecutor::Node {
  mutable std::mutex mu;
  std::map<std::string, Task> tasks;
  std::vector<TaskLaunch> launches;
  std::vector<std::string> stopped, released;
  std::optional<Status> fail_next_start;

  ~Node() {
    for (auto& [key, t] : tasks) close(t.exit_event);
  }
};

FakeExecutor::FakeExecutor(FakeExecutorOptions options, std::shared_ptr<Node> node)
    : options_(std::move(options)), node_(node ? std::move(node) : std::make_shared<Node>()) {}

FakeExecutor::~FakeExecutor() = default;

// Ends `t` (once) and wakes whoever waits on its ExitFd.
static void EndTask(FakeExecutor::Task& t, TaskExit exit) {
  if (t.exit) return;
  t.exit = std::move(exit);
  const uint64_t one = 1;
  (void)!write(t.exit_event, &one, sizeof one);
}

Status FakeExecutor::Start(const TaskLaunch& launch) {
  std::lock_guard<std::mutex> l(node_->mu);
  if (node_->fail_next_start) {
    Status st = *node_->fail_next_start;
    node_->fail_next_start.reset();
    return st;
  }
  if (launch.key.empty() || launch.key.find('/') != std::string::npos || launch.key[0] == '.') {
    return InvalidArgument("bad task key \"" + launch.key + "\"");
  }
  if (node_->tasks.count(launch.key)) return AlreadyExists("task " + launch.key + " already exists on this node");
  bool offered = false;
  for (const auto& r : options_.runtimes) offered |= r == launch.runtime;
  if (!offered) return InvalidArgument("this node has no " + launch.runtime + " executor");
  Task t;
  if (!options_.sandbox_dir.empty()) {
    t.sandbox = options_.sandbox_dir + "/" + launch.key;
    std::error_code ec;
    fs::remove_all(t.sandbox, ec);
    fs::create_directories(t.sandbox + "/work", ec);
    if (ec) return Internal("sandbox " + t.sandbox + ": " + ec.message());
    if (launch.prepare) {
      const int fd = open((t.sandbox + "/work").c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
      if (fd < 0) return Internal("open " + t.sandbox + "/work");
      Status st = launch.prepare(fd);
      close(fd);
      if (!st.ok()) {
        fs::remove_all(t.sandbox, ec);
        return st;
      }
    }
  }
  t.launch = launch;
  t.exit_event = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (options_.exit_at_start) EndTask(t, *options_.exit_at_start);
  node_->launches.push_back(launch);
  node_->tasks.emplace(launch.key, std::move(t));
  return Status::Ok();
}

Status FakeExecutor::Stop(const std::string& key, std::chrono::milliseconds grace) {
  std::lock_guard<std::mutex> l(node_->mu);
  auto it = node_->tasks.find(key);
  if (it == node_->tasks.end()) return NotFound("task " + key + " is not on this node");
  node_->stopped.push_back(key);
  Task& t = it->second;
  if (t.exit) return Status::Ok();
  if (!t.kill_at) t.kill_at = options_.now() + grace;
  if (!t.ignores_term) EndTask(t, TaskExit{-1, SIGTERM, ""});
  return Status::Ok();
}

std::optional<TaskExit> FakeExecutor::Poll(const std::string& key) {
  std::lock_guard<std::mutex> l(node_->mu);
  auto it = node_->tasks.find(key);
  if (it == node_->tasks.end()) return TaskExit{-1, 0, "task " + key + " is not on this node"};
  Task& t = it->second;
  if (!t.exit && t.kill_at && options_.now() >= *t.kill_at) EndTask(t, TaskExit{-1, SIGKILL, ""});
  return t.exit;
}

StatusOr<OutputChunk> FakeExecutor::ReadOutput(const std::string& key, TaskOutput what, int64_t offset,
                                               size_t max_bytes) {
  std::lock_guard<std::mutex> l(node_->mu);
  auto it = node_->tasks.find(key);
  if (it == node_->tasks.end()) return NotFound("task " + key + " is not on this node");
  const Task& t = it->second;
  const bool written = what == TaskOutput::kLog ? t.log_written : t.metrics_written;
  if (!written) return NotFound("no output yet");
  const std::string& data = what == TaskOutput::kLog ? t.log : t.metrics;
  OutputChunk out;
  out.size = static_cast<int64_t>(data.size());
  if (offset < out.size) out.data = data.substr(static_cast<size_t>(offset), max_bytes);
  return out;
}

StatusOr<TaskSandbox> FakeExecutor::SandboxOf(const std::string& key) {
  std::lock_guard<std::mutex> l(node_->mu);
  auto it = node_->tasks.find(key);
  if (it == node_->tasks.end() || it->second.sandbox.empty()) return NotFound("no sandbox for task " + key);
  const TaskIdentity& who = it->second.launch.identity;
  return TaskSandbox{it->second.sandbox, who.uid, who.gid};
}

std::map<std::string, std::string> FakeExecutor::Recover() {
  std::lock_guard<std::mutex> l(node_->mu);
  std::map<std::string, std::string> out;
  for (auto& [key, t] : node_->tasks) {
    if (options_.exit_at_start) EndTask(t, *options_.exit_at_start);
    out[key] = t.launch.meta_json;
  }
  return out;
}

void FakeExecutor::Release(const std::string& key) {
  std::lock_guard<std::mutex> l(node_->mu);
  node_->released.push_back(key);
  auto it = node_->tasks.find(key);
  if (it == node_->tasks.end()) return;
  if (!it->second.sandbox.empty()) {
    std::error_code ec;
    fs::remove_all(it->second.sandbox, ec);
  }
  close(it->second.exit_event);
  node_->tasks.erase(it);
}

int FakeExecutor::ExitFd(const std::string& key) {
  std::lock_guard<std::mutex> l(node_->mu);
  auto it = node_->tasks.find(key);
  return it == node_->tasks.end() ? -1 : fcntl(it->second.exit_event, F_DUPFD_CLOEXEC, 0);
}

std::optional<LiveUsage> FakeExecutor::Usage(const std::string& key) {
  std::lock_guard<std::mutex> l(node_->mu);
  auto it = node_->tasks.find(key);
  return it == node_->tasks.end() ? std::nullopt : it->second.usage;
}

void FakeExecutor::AddLeftover(const std::string& key, const std::string& meta_json, std::optional<TaskExit> exit) {
  std::lock_guard<std::mutex> l(node_->mu);
  Task& t = node_->tasks[key];
  t.launch.key = key;
  t.launch.meta_json = meta_json;
  if (t.exit_event < 0) t.exit_event = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (exit) EndTask(t, *exit);
}

void FakeExecutor::Finish(const std::string& key, TaskExit exit) {
  std::lock_guard<std::mutex> l(node_->mu);
  if (auto it = node_->tasks.find(key); it != node_->tasks.end()) EndTask(it->second, std::move(exit));
}

void FakeExecutor::Write(const std::string& key, TaskOutput what, const std::string& data) {
  std::lock_guard<std::mutex> l(node_->mu);
  auto it = node_->tasks.find(key);
  if (it == node_->tasks.end()) return;
  Task& t = it->second;
  (what == TaskOutput::kLog ? t.log : t.metrics) += data;
  (what == TaskOutput::kLog ? t.log_written : t.metrics_written) = true;
}

void FakeExecutor::IgnoreTerm(const std::string& key) {
  std::lock_guard<std::mutex> l(node_->mu);
  if (auto it = node_->tasks.find(key); it != node_->tasks.end()) it->second.ignores_term = true;
}

void FakeExecutor::SetExitAtStart(std::optional<TaskExit> exit) {
  std::lock_guard<std::mutex> l(node_->mu);
  options_.exit_at_start = std::move(exit);
}

void FakeExecutor::FailNextStart(Status status) {
  std::lock_guard<std::mutex> l(node_->mu);
  node_->fail_next_start = std::move(status);
}

void FakeExecutor::SetUsage(const std::string& key, LiveUsage usage) {
  std::lock_guard<std::mutex> l(node_->mu);
  if (auto it = node_->tasks.find(key); it != node_->tasks.end()) it->second.usage = usage;
}

std::vector<TaskLaunch> FakeExecutor::launches() const {
  std::lock_guard<std::mutex> l(node_->mu);
  return node_->launches;
}

std::vector<std::string> FakeExecutor::stopped() const {
  std::lock_guard<std::mutex> l(node_->mu);
  return node_->stopped;
}

std::vector<std::string> FakeExecutor::released() const {
  std::lock_guard<std::mutex> l(node_->mu);
  return node_->released;
}

bool FakeExecutor::Running(const std::string& key) const {
  std::lock_guard<std::mutex> l(node_->mu);
  auto it = node_->tasks.find(key);
  return it != node_->tasks.end() && !it->second.exit;
}

}  // namespace ringmaster::agent
