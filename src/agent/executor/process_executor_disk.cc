// ProcessExecutor's disk limits: the kubelet's way with ephemeral storage.
// A task's sandbox and its container's writable root are measured every
// disk_check_interval (DiskGuard); past its limit it is stopped (SIGTERM,
// then SIGKILL after disk_stop_grace) and its exit says so.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "agent/executor/process_executor.h"
#include "common/files.h"
#include "common/log.h"
#include "common/units.h"

namespace ringmaster::agent {

void ProcessExecutor::WatchDisk(const std::string& key, int64_t limit, const std::vector<std::string>& dirs) {
  const nlohmann::json j = {{"limit", limit}, {"dirs", dirs}};
  if (Status st = WriteFileAtomic(TaskDir(key) + "/" + kDiskWatchFile, j.dump(), 0600); !st.ok()) {
    spdlog::warn("agent: task {}: recording its disk limit: {}", key, st.ToString());  // watched until the agent restarts
  }
  disk_->Watch(key, limit, dirs);
}

void ProcessExecutor::RewatchDisk(const std::string& key) {
  const std::string dir = TaskDir(key);
  if (ReadFile(dir + "/" + kExitFile).ok() || ReadFile(dir + "/" + kDiskStopFile).ok()) return;  // ended, or being stopped
  auto text = ReadFile(dir + "/" + kDiskWatchFile);
  if (!text.ok()) return;
  try {
    const auto j = nlohmann::json::parse(*text);
    disk_->Watch(key, j.at("limit").get<int64_t>(), j.at("dirs").get<std::vector<std::string>>());
  } catch (const std::exception& e) {
    spdlog::warn("agent: task {}: unreadable {}: {}", key, kDiskWatchFile, e.what());
  }
}

void ProcessExecutor::StopForDisk(const std::string& key, int64_t used, int64_t limit) {
  const std::string why =
      used < 0 ? fmt::format("holds more files than its {} disk limit lets the agent measure", FormatBytes(limit))
               : fmt::format("used {} of its {} disk limit", FormatBytes(used), FormatBytes(limit));
  spdlog::warn("agent: task {} {}: stopping it", key, why);
  // Before the stop: the exit the task's end writes is read with it.
  if (Status st = WriteFileAtomic(TaskDir(key) + "/" + kDiskStopFile, why, 0600); !st.ok()) {
    spdlog::warn("agent: task {}: {}", key, st.ToString());
  }
  if (Status st = Stop(key, options_.disk_stop_grace); !st.ok()) spdlog::warn("agent: task {}: {}", key, st.ToString());
}

}  // namespace ringmaster::agent
