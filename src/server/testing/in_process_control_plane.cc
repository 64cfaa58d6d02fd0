#include "server/testing/in_process_control_plane.h"

#include <algorithm>

#include <fmt/format.h>

namespace ringmaster::server {

Status InProcessControlPlane::Reachable() const {
  return reachable_ ? Status::Ok() : Unavailable(fmt::format("node {} is cut off from the server", node_));
}

StatusOr<store::Node> InProcessControlPlane::OwnNode(int64_t node_id) const {
  RM_ASSIGN_OR_RETURN(store::Node node, svc_->store()->GetNode(node_id));
  if (node.name != node_) return PermissionDenied(fmt::format("this agent is node {}, not {}", node_, node.name));
  return node;
}

StatusOr<store::Task> InProcessControlPlane::OwnTask(int64_t task_id) const {
  RM_ASSIGN_OR_RETURN(store::Task task, svc_->store()->GetTask(task_id));
  auto node = task.node_id ? svc_->store()->GetNode(task.node_id) : StatusOr<store::Node>(NotFound("no node"));
  if (!node.ok() || node->name != node_) {
    return FailedPrecondition(fmt::format("task {} is not assigned to node {}", task.id, node_));
  }
  return task;
}

StatusOr<protocol::RegisterReply> InProcessControlPlane::Register(const protocol::RegisterRequest& request,
                                                                  std::chrono::milliseconds) {
  RM_RETURN_IF_ERROR(Reachable());
  if (request.name != node_) return PermissionDenied(fmt::format("this agent is node {}, not {}", node_, request.name));
  return svc_->Register(request);
}

StatusOr<protocol::HeartbeatReply> InProcessControlPlane::Heartbeat(int64_t node_id, const protocol::Heartbeat& beat,
                                                                    std::chrono::milliseconds) {
  RM_RETURN_IF_ERROR(Reachable());
  RM_ASSIGN_OR_RETURN(store::Node node, OwnNode(node_id));
  return svc_->Heartbeat(node, beat);
}

StatusOr<protocol::Assignments> InProcessControlPlane::PollAssignments(int64_t node_id, uint64_t index,
                                                                       std::chrono::seconds wait,
                                                                       std::chrono::milliseconds timeout) {
  RM_RETURN_IF_ERROR(Reachable());
  RM_ASSIGN_OR_RETURN(store::Node node, OwnNode(node_id));
  return svc_->WaitAssignments(node.id, index, std::min<std::chrono::milliseconds>(wait, timeout));
}

StatusOr<protocol::TaskReportsReply> InProcessControlPlane::ReportStatuses(int64_t node_id,
                                                                           const protocol::TaskReports& reports,
                                                                           std::chrono::milliseconds) {
  RM_RETURN_IF_ERROR(Reachable());
  RM_ASSIGN_OR_RETURN(store::Node node, OwnNode(node_id));
  return svc_->ReportStatuses(node, reports);
}

StatusOr<protocol::ShipReply> InProcessControlPlane::ShipOutput(const protocol::OutputChunk& chunk,
                                                                std::chrono::milliseconds) {
  RM_RETURN_IF_ERROR(Reachable());
  RM_ASSIGN_OR_RETURN(store::Task task, OwnTask(chunk.task_id));
  return svc_->ShipOutput(task, chunk, chunk.data);
}

}  // namespace ringmaster::server
