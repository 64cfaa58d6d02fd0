// ControlPlane: the agent's one way to talk to its server (registration,
// heartbeats, assignments, status, output), in the protocol's types; backends:
// HTTP (http_control_plane.h) and server/testing/in_process_control_plane.h.
// Errors carry the server's codes (FailedPrecondition: a stale attempt or a
// refused agent; NotFound: an unknown node or task). Thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "common/status.h"
#include "protocol/agent.h"

namespace ringmaster::agent {

class ControlPlane {
 public:
  virtual ~ControlPlane() = default;

  // Each call gives up after `timeout` (DeadlineExceeded or Unavailable).
  virtual StatusOr<protocol::RegisterReply> Register(const protocol::RegisterRequest& request,
                                                     std::chrono::milliseconds timeout) = 0;
  virtual StatusOr<protocol::HeartbeatReply> Heartbeat(int64_t node_id, const protocol::Heartbeat& beat,
                                                       std::chrono::milliseconds timeout) = 0;
  // Answers at once when `index` is stale, else when the node's assignments
  // change or `wait` has passed.
  virtual StatusOr<protocol::Assignments> PollAssignments(int64_t node_id, uint64_t index, std::chrono::seconds wait,
                                                          std::chrono::milliseconds timeout) = 0;
  // A tick's reports in one call: a result per report, in order (the
  // server's code name and message; "" = recorded). An error: none recorded.
  virtual StatusOr<protocol::TaskReportsReply> ReportStatuses(int64_t node_id, const protocol::TaskReports& reports,
                                                              std::chrono::milliseconds timeout) = 0;
  virtual StatusOr<protocol::ShipReply> ShipOutput(const protocol::OutputChunk& chunk,
                                                   std::chrono::milliseconds timeout) = 0;
  // Ends the calls in flight (a long poll) and fails later ones: the agent is stopping.
  virtual void Cancel() = 0;
  // The server, for messages ("https://ringmaster:8443").
  virtual std::string Describe() const = 0;
};

}  // namespace ringmaster::agent
