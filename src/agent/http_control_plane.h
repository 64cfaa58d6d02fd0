// HttpControlPlane: the agent's ControlPlane over the REST API's agent routes
// (POST /api/v1/agent/register, .../nodes/{id}/heartbeat, the assignments
// long poll, .../tasks/{id}/status and its logs and metrics), through ApiClient.
// Thread-safe: each call opens its own connection.
#pragma once

#include "agent/control_plane.h"
#include "client/api_client.h"

namespace ringmaster::agent {

class HttpControlPlane final : public ControlPlane {
 public:
  // `api` is copied; copies share its calls in flight, so Cancel ends them all.
  explicit HttpControlPlane(client::ApiClient api) : api_(std::move(api)) {}

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
  void Cancel() override { api_.Cancel(); }
  std::string Describe() const override { return api_.server_url(); }

 private:
  const client::ApiClient api_;
};

}  // namespace ringmaster::agent
