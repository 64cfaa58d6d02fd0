#include "agent/http_control_plane.h"

#include <fmt/format.h>

namespace ringmaster::agent {

namespace {

// The reply as T; a reply that does not read is the server's failure, for now.
template <typename T>
StatusOr<T> Read(StatusOr<nlohmann::json> reply) {
  if (!reply.ok()) return reply.status();
  auto m = protocol::Parse<T>(*reply);
  if (!m.ok()) return Unavailable("a malformed answer from the server: " + m.status().message());
  return m;
}

// Every agent call may be sent again on another server: registration is by
// node name, heartbeats are state, status reports are fenced by attempt and
// replays have no second effect, output is appended at an offset.
client::CallOptions ReportCall(std::chrono::milliseconds timeout) {
  client::CallOptions o(timeout);
  o.replayable = true;
  return o;
}

}  // namespace

StatusOr<protocol::RegisterReply> HttpControlPlane::Register(const protocol::RegisterRequest& request,
                                                             std::chrono::milliseconds timeout) {
  return Read<protocol::RegisterReply>(api_.Post("/api/v1/agent/register", protocol::ToJson(request), ReportCall(timeout)));
}

StatusOr<protocol::HeartbeatReply> HttpControlPlane::Heartbeat(int64_t node_id, const protocol::Heartbeat& beat,
                                                               std::chrono::milliseconds timeout) {
  return Read<protocol::HeartbeatReply>(
      api_.Post(fmt::format("/api/v1/agent/nodes/{}/heartbeat", node_id), protocol::ToJson(beat), ReportCall(timeout)));
}

StatusOr<protocol::Assignments> HttpControlPlane::PollAssignments(int64_t node_id, uint64_t index,
                                                                  std::chrono::seconds wait,
                                                                  std::chrono::milliseconds timeout) {
  return Read<protocol::Assignments>(api_.Get(
      fmt::format("/api/v1/agent/nodes/{}/assignments?index={}&wait={}", node_id, index, wait.count()), ReportCall(timeout)));
}

StatusOr<protocol::TaskReportsReply> HttpControlPlane::ReportStatuses(int64_t node_id,
                                                                      const protocol::TaskReports& reports,
                                                                      std::chrono::milliseconds timeout) {
  auto reply = Read<protocol::TaskReportsReply>(
      api_.Post(fmt::format("/api/v1/agent/nodes/{}/reports", node_id), protocol::ToJson(reports), ReportCall(timeout)));
  if (reply.ok() && reply->results.size() != reports.reports.size()) {
    return Unavailable(fmt::format("the server answered {} reports with {} results", reports.reports.size(),
                                   reply->results.size()));
  }
  return reply;
}

StatusOr<protocol::ShipReply> HttpControlPlane::ShipOutput(const protocol::OutputChunk& chunk,
                                                           std::chrono::milliseconds timeout) {
  return Read<protocol::ShipReply>(api_.PostText(
      fmt::format("/api/v1/agent/tasks/{}/{}?attempt={}&offset={}", chunk.task_id, protocol::OutputRoute(chunk.kind),
                  chunk.attempt, chunk.offset),
      chunk.data, "application/octet-stream", ReportCall(timeout)));
}

}  // namespace ringmaster::agent
