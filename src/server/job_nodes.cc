// The agent protocol's node side (split from job_service.cc): registration,
// heartbeats (held in memory, stored now and then), and what a node's silence
// means. Past its lease a node is unreachable (no new work); past its
// fencing window and a lease more it is lost, and its tasks with it. The
// window is the one its agent last said it keeps, when that is longer than
// the server's own (an agent told a longer one before a server restart).
#include <algorithm>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "server/job_service.h"

namespace ringmaster::server {

using store::State;
using store::Task;

int64_t JobService::LostAfterMs(const store::Node& node) const {
  return std::max(options_.node_lost_after_ms, node.fence_after_ms) + options_.node_timeout_ms;
}

bool JobService::NodeReady(const store::Node& node) const {
  std::lock_guard<std::mutex> l(live_mu_);
  auto it = live_.find(node.id);
  // Not heard from since this server started: ready while its last stored
  // heartbeat is recent (a quick restart), until it is heard from.
  if (it == live_.end()) return clock_->NowMs() - node.last_heartbeat_ms <= options_.node_timeout_ms;
  return clock_->SteadyMs() - it->second.seen_steady_ms <= options_.node_timeout_ms;
}

std::string JobService::NodeStateName(const store::Node& node) const {
  if (NodeReady(node)) return "ready";
  return SilentMs(node.id) > LostAfterMs(node) ? "lost" : "unreachable";
}

int64_t JobService::SilentMs(int64_t node_id) const {
  std::lock_guard<std::mutex> l(live_mu_);
  auto it = live_.find(node_id);
  // Never heard from since this server started: silent since then (agents get one lease to come back).
  return clock_->SteadyMs() - (it == live_.end() ? started_steady_ms_ : it->second.seen_steady_ms);
}

void JobService::ApplyLive(store::Node* node) const {
  std::lock_guard<std::mutex> l(live_mu_);
  auto it = live_.find(node->id);
  if (it == live_.end()) return;
  node->last_heartbeat_ms = it->second.heartbeat_ms;
  node->cpu_util = it->second.cpu_util;
  node->memory_used_bytes = it->second.memory_used_bytes;
}

StatusOr<int64_t> JobService::RegisterNode(const store::Node& node_in,
                                           const std::optional<std::set<std::pair<int64_t, int>>>& held) {
  std::lock_guard<std::mutex> l(mu_);
  store::Node node = node_in;
  node.registered_ms = node.last_heartbeat_ms = clock_->NowMs();
  // The agent adopts this server's window from the answer; until a heartbeat
  // says it has, the longer of the two counts.
  node.fence_after_ms = std::max(node_in.fence_after_ms, options_.node_lost_after_ms);
  RM_ASSIGN_OR_RETURN(node.overlay_block, OverlayBlockLocked(node));
  RM_ASSIGN_OR_RETURN(int64_t id, store_->UpsertNode(node));
  {
    std::lock_guard<std::mutex> ll(live_mu_);
    const int64_t steady = clock_->SteadyMs();
    live_[id] = Live{steady, node.last_heartbeat_ms, node.cpu_util, node.memory_used_bytes, steady, node.fence_after_ms};
  }
  if (held) {
    // Started here (reported running) and no longer held: the agent lost its
    // state with the task (a node reinstalled, its data dir wiped). Nothing
    // runs it: its gang need not wait for a lease to run out.
    RM_ASSIGN_OR_RETURN(auto placed, store_->ListPlacedTasks());
    for (Task t : placed) {
      if (t.node_id != id || t.state != State::kRunning || held->count({t.id, t.attempt})) continue;
      RM_RETURN_IF_ERROR(store_->InTransaction([&]() -> Status {
        RM_RETURN_IF_ERROR(SetTaskState(t, State::kLost, fmt::format("node {} registered again without it", node.name)));
        return SettleJobLocked(t.job_id);
      }));
      spdlog::warn("task {} (job {} rank {}) lost: node {} registered again without it", t.id, t.job_id, t.rank,
                   node.name);
    }
  }
  spdlog::info("node {} registered as {}", node.name, id);
  if (options_.backend == "slurm") {
    node.id = id;
    RM_RETURN_IF_ERROR(BindStepNodeLocked(node));
  }
  BumpNodeLocked(id);
  Wake();
  return id;
}

// Held in memory: the store gets a node's heartbeat when it comes back (or is
// first heard from after a server restart) and then once per
// kPersistHeartbeatMs, not every few seconds per node; and its agent's
// fencing window whenever that changes.
Status JobService::Heartbeat(int64_t node_id, double cpu_util, int64_t memory_used_bytes, int64_t fence_after_ms) {
  const int64_t steady = clock_->SteadyMs(), wall = clock_->NowMs();
  bool known, was_ready = false, persist = true, fence_changed = false;
  {
    std::lock_guard<std::mutex> l(live_mu_);
    auto it = live_.find(node_id);
    known = it != live_.end();
    if (known) {
      Live& live = it->second;
      was_ready = steady - live.seen_steady_ms <= options_.node_timeout_ms;
      persist = !was_ready || steady - live.persisted_steady_ms >= kPersistHeartbeatMs;
      fence_changed = fence_after_ms >= 0 && fence_after_ms != live.fence_ms;
      live = Live{steady,           wall,
                  cpu_util,         memory_used_bytes,
                  persist ? steady : live.persisted_steady_ms,
                  fence_after_ms >= 0 ? fence_after_ms : live.fence_ms};
    }
  }
  if (!known) {
    RM_ASSIGN_OR_RETURN(store::Node node, store_->GetNode(node_id));  // NotFound for a node never registered
    fence_changed = fence_after_ms >= 0 && fence_after_ms != node.fence_after_ms;
    std::lock_guard<std::mutex> l(live_mu_);
    live_[node_id] = Live{steady,   wall,   cpu_util, memory_used_bytes,
                          steady, fence_after_ms >= 0 ? fence_after_ms : node.fence_after_ms};
  }
  if (persist) RM_RETURN_IF_ERROR(store_->UpdateNodeStatus(node_id, wall, cpu_util, memory_used_bytes));
  if (fence_changed) RM_RETURN_IF_ERROR(store_->SetNodeFence(node_id, fence_after_ms));
  if (!was_ready) Wake();  // it is back (or first heard from): there may be work for it
  return Status::Ok();
}

}  // namespace ringmaster::server
