// AgentService: the server's side of the agent protocol in the protocol's
// types: registration (its checks, the protocol versions served), heartbeats
// and samples, assignments, task status and output. Callers have checked who
// asks; the HTTP routes (api_agent.cc) and InProcessControlPlane only adapt.
// Thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <string_view>

#include "common/clock.h"
#include "monitor/monitor.h"
#include "protocol/agent.h"
#include "server/job_service.h"
#include "server/log_store.h"
#include "store/meta_store.h"

namespace ringmaster::server {

struct AgentServiceDeps {
  JobService* jobs = nullptr;
  store::MetaStore* store = nullptr;
  const Clock* clock = nullptr;
  monitor::Monitor* monitor = nullptr;  // null: samples and trainer records are not kept
  LogStore* logs = nullptr;             // null: output is refused
  LogStore* metrics = nullptr;
};

class AgentService {
 public:
  explicit AgentService(AgentServiceDeps deps) : d_(deps) {}

  // REQUIRES: the caller may act as request.name.
  StatusOr<protocol::RegisterReply> Register(const protocol::RegisterRequest& request);
  // The lease is renewed whatever the samples hold: bad ones are refused in
  // the answer (samples_refused), never by failing the heartbeat.
  StatusOr<protocol::HeartbeatReply> Heartbeat(const store::Node& node, const protocol::Heartbeat& beat);
  // The node's assignments, on disk before the node acts on them.
  StatusOr<protocol::Assignments> Assignments(int64_t node_id);
  // Assignments once `index` is stale, the node's assignments change, or
  // `wait` has passed. Blocks its thread (the HTTP route waits without one).
  StatusOr<protocol::Assignments> WaitAssignments(int64_t node_id, uint64_t index, std::chrono::milliseconds wait);
  // REQUIRES: `task` is on the caller's node.
  Status ReportStatus(const store::Task& task, const protocol::TaskStatusReport& report);
  // A node's reports of one tick (REQUIRES: `node` is the caller's), in one
  // transaction; a result per report. A report on another node's task is refused.
  protocol::TaskReportsReply ReportStatuses(const store::Node& node, const protocol::TaskReports& batch);
  // Appends a piece of output for the task's current attempt (FailedPrecondition
  // for another attempt, or once the task has ended).
  // `chunk.data` is left empty by the routes: the bytes are `data` (not copied).
  StatusOr<protocol::ShipReply> ShipOutput(const store::Task& task, const protocol::OutputChunk& chunk,
                                           std::string_view data);

  JobService* jobs() const { return d_.jobs; }
  store::MetaStore* store() const { return d_.store; }

 private:
  StatusOr<std::optional<protocol::Overlay>> OverlayOf(int64_t node_id);
  // A report as the job service takes it; InvalidArgument naming the field.
  StatusOr<TaskReport> ReadReport(const store::Task& task, const protocol::TaskStatusReport& report);

  const AgentServiceDeps d_;
};

}  // namespace ringmaster::server
