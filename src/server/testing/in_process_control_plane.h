// InProcessControlPlane: an agent's ControlPlane calling AgentService directly,
// so one test process holds a server and N agents. It acts only as `node` (as
// the routes check an agent's token) and can be cut off (every call
// Unavailable). The agent sees only agent/control_plane.h. Thread-safe.
#pragma once

#include <atomic>
#include <string>

#include "agent/control_plane.h"
#include "server/agent_service.h"

namespace ringmaster::server {

class InProcessControlPlane final : public agent::ControlPlane {
 public:
  // `service` must outlive this.
  InProcessControlPlane(AgentService* service, std::string node) : svc_(service), node_(std::move(node)) {}

  // false: every call fails as if the network were cut.
  void SetReachable(bool reachable) { reachable_ = reachable; }

  StatusOr<protocol::RegisterReply> Register(const protocol::RegisterRequest& request,
                                             std::chrono::milliseconds timeout) override;
  StatusOr<protocol::HeartbeatReply> Heartbeat(int64_t node_id, const protocol::Heartbeat& beat,
                                               std::chrono::milliseconds timeout) override;
  StatusOr<protocol::Assignments> PollAssignments(int64_t node_id, uint64_t index, std::chrono::seconds wait,
                                                  std::chrono::milliseconds timeout) override;
  StatusOr<protocol::TaskReportsReply> ReportStatuses(int64_t node_id, const protocol::TaskReports& reports,
                                                      std::chrono::milliseconds timeout) override;
  StatusOr<protocol::ShipReply> ShipOutput(const protocol::OutputChunk& chunk,
                                           std::chrono::milliseconds timeout) override;
  void Cancel() override {}
  std::string Describe() const override { return "the in-process server (node " + node_ + ")"; }

 private:
  Status Reachable() const;
  // The node of `node_id`, if it is this plane's (NotFound, PermissionDenied).
  StatusOr<store::Node> OwnNode(int64_t node_id) const;
  // The task, if it is placed on this plane's node (FailedPrecondition, as the routes say).
  StatusOr<store::Task> OwnTask(int64_t task_id) const;

  AgentService* const svc_;
  const std::string node_;
  std::atomic<bool> reachable_{true};
};

}  // namespace ringmaster::server
