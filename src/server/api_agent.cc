// The agent protocol's routes. Only agent tokens reach them, and each only
// for its own node: a token made for node gpu-1 can register as gpu-1,
// heartbeat and long-poll as gpu-1, and report on and ship logs of tasks
// placed on gpu-1. They check that and adapt HTTP to AgentService, which
// holds the logic. These routes run on the agent pool, which user traffic
// never occupies.
#include <memory>

#include <fmt/format.h>

#include "common/log.h"
#include "protocol/agent.h"
#include "server/agent_service.h"
#include "server/api.h"

namespace ringmaster::server {
namespace {

using nlohmann::json;

// The node of the route's {id}, if it is the caller's.
StatusOr<store::Node> OwnNode(Api& api, const http::Request& req, const Caller& c) {
  RM_ASSIGN_OR_RETURN(store::Node node, api.store->GetNode(PathId(req)));
  RM_RETURN_IF_ERROR(Auth::CheckNode(c, node.name));
  return node;
}

// The body as a protocol message.
template <typename T>
StatusOr<T> BodyMessage(const http::Request& req) {
  RM_ASSIGN_OR_RETURN(json b, BodyObject(req));
  return protocol::Parse<T>(b);
}

// The long-poll's shared state: answered exactly once, by a change or by the timer.
struct Poll {
  std::atomic<bool> done{false};
  std::mutex mu;
  uint64_t watch = 0;                  // GUARDED_BY(mu)
  std::shared_ptr<http::Timer> timer;  // GUARDED_BY(mu)
};

// A heartbeat's body: the samples of up to two minutes (protocol::kMaxSamplesPerBody).
constexpr size_t kMaxHeartbeatBytes = 4 << 20;
// A tick's reports: up to protocol::kMaxReportsPerBody, each with an exit
// message of at most 4 KiB kept (longer ones are cut, not refused).
constexpr size_t kMaxReportsBytes = 5 << 20;

}  // namespace

StatusOr<store::Task> AgentTask(Api& api, const http::Request& req, const Caller& c) {
  RM_ASSIGN_OR_RETURN(store::Task task, api.store->GetTask(PathId(req)));
  auto node = task.node_id ? api.store->GetNode(task.node_id) : StatusOr<store::Node>(NotFound("no node"));
  if (!node.ok() || !Auth::CheckNode(c, node->name).ok()) {
    return FailedPrecondition(fmt::format("task {} is not assigned to node {}", task.id, c.token.node));
  }
  return task;
}

void StartAgentService(Api& api) {
  api.agent_service = std::make_shared<AgentService>(
      AgentServiceDeps{api.jobs, api.store, api.clock, api.monitor, api.logs, api.metrics});
}

void AddAgentRoutes(Api& api) {
  http::RouteOptions agent{api.limits.max_body_bytes, http::Pool::kAgent, true, access::kAgent};
  http::RouteOptions ship{api.limits.max_agent_chunk, http::Pool::kAgent, true, access::kAgent};
  // Made by StartAgentService once the jobs and the monitor run (a standby
  // has none); no request reaches these routes before.
  auto svc = [&api] { return api.agent_service; };

  api.http->Route("POST", "/api/v1/agent/register", agent, Json([&api, svc](const http::Request& req, const Caller& c) -> StatusOr<Reply> {
    RM_ASSIGN_OR_RETURN(auto b, BodyMessage<protocol::RegisterRequest>(req));
    if (b.name.empty()) return InvalidArgument("name: required");
    RM_RETURN_IF_ERROR(Auth::CheckNode(c, b.name));
    RM_ASSIGN_OR_RETURN(protocol::RegisterReply reply, svc()->Register(b));
    if (api.lab) {  // notebooks: where the agent takes tunnels, and the key their tickets are signed with
      api.lab->SetPort(reply.node_id, b.tunnel_port);
      reply.tunnel_key = api.lab->NodeKey(b.name);
    }
    api.auth->Audit(req, c.user.name, "agent.register", "node " + b.name, "ok", b.address);
    return Reply{200, protocol::ToJson(reply)};
  }));

  http::RouteOptions beat{kMaxHeartbeatBytes, http::Pool::kAgent, true, access::kAgent};
  api.http->Route("POST", "/api/v1/agent/nodes/{id}/heartbeat", beat,
                  Json([svc, &api](const http::Request& req, const Caller& c) -> StatusOr<Reply> {
                    RM_ASSIGN_OR_RETURN(store::Node node, OwnNode(api, req, c));
                    RM_ASSIGN_OR_RETURN(auto b, BodyMessage<protocol::Heartbeat>(req));
                    if (api.lab && b.tunnel_port > 0) api.lab->SetPort(node.id, b.tunnel_port);
                    RM_ASSIGN_OR_RETURN(protocol::HeartbeatReply reply, svc()->Heartbeat(node, b));
                    return Reply{200, protocol::ToJson(reply)};
                  }));

  // Long-poll: answers at once if `index` is stale, else when the node's
  // assignments change or after `wait` seconds. No thread waits meanwhile.
  api.http->Route("GET", "/api/v1/agent/nodes/{id}/assignments", agent, [&api, svc](http::Request& req, http::Responder respond) {
    const Caller& c = CallerOf(req);
    auto node = OwnNode(api, req, c);
    if (!node.ok()) return respond(ErrorFor(req, node.status()));
    auto index = IntParam(req, "index", 0, 0, INT64_MAX);
    if (!index.ok()) return respond(ErrorFor(req, index.status()));
    auto wait = IntParam(req, "wait", 0, 0, 25);
    if (!wait.ok()) return respond(ErrorFor(req, wait.status()));
    const int64_t node_id = node->id;
    auto answer = [svc, node_id, respond, req_copy = req]() {
      auto a = svc()->Assignments(node_id);
      respond(a.ok() ? JsonResponse(200, protocol::ToJson(*a)) : ErrorFor(req_copy, a.status()));
    };
    if (*wait == 0) return answer();
    auto poll = std::make_shared<Poll>();
    auto finish = [&api, poll, answer] {
      if (poll->done.exchange(true)) return;
      std::lock_guard<std::mutex> l(poll->mu);
      if (poll->watch) api.jobs->Unwatch(poll->watch);
      if (poll->timer) poll->timer->Cancel();
      api.http->Post(http::Pool::kAgent, answer);
    };
    std::lock_guard<std::mutex> l(poll->mu);
    poll->watch = api.jobs->WatchNode(node_id, static_cast<uint64_t>(*index), finish);
    if (poll->watch == 0) {
      poll->done = true;
      return answer();  // stale index: the node has news now
    }
    if (!poll->done) poll->timer = api.http->After(std::chrono::seconds(*wait), finish);
  });

  api.http->Route("POST", "/api/v1/agent/tasks/{id}/status", agent, Json([&api, svc](const http::Request& req, const Caller& c) -> StatusOr<Reply> {
    RM_ASSIGN_OR_RETURN(store::Task task, AgentTask(api, req, c));
    RM_ASSIGN_OR_RETURN(auto b, BodyMessage<protocol::TaskStatusReport>(req));
    RM_RETURN_IF_ERROR(svc()->ReportStatus(task, b));
    return Reply{200, json::object()};
  }));

  // A tick's reports together (protocol 3): one transaction, a result each.
  http::RouteOptions reports{kMaxReportsBytes, http::Pool::kAgent, true, access::kAgent};
  api.http->Route("POST", "/api/v1/agent/nodes/{id}/reports", reports,
                  Json([&api, svc](const http::Request& req, const Caller& c) -> StatusOr<Reply> {
                    RM_ASSIGN_OR_RETURN(store::Node node, OwnNode(api, req, c));
                    RM_ASSIGN_OR_RETURN(auto b, BodyMessage<protocol::TaskReports>(req));
                    return Reply{200, protocol::ToJson(svc()->ReportStatuses(node, b))};
                  }));

  // Logs and metrics arrive the same way: bytes appended at an offset, for the task's current attempt.
  for (const auto kind : {protocol::OutputKind::kLogs, protocol::OutputKind::kMetrics}) {
    api.http->Route("POST", fmt::format("/api/v1/agent/tasks/{{id}}/{}", protocol::OutputRoute(kind)), ship,
                    Json([&api, svc, kind](const http::Request& req, const Caller& c) -> StatusOr<Reply> {
                      RM_ASSIGN_OR_RETURN(store::Task task, AgentTask(api, req, c));
                      protocol::OutputChunk chunk{task.id, kind, 0, 0, ""};
                      RM_ASSIGN_OR_RETURN(chunk.attempt, IntParam(req, "attempt", 0, 0, INT32_MAX));
                      RM_ASSIGN_OR_RETURN(chunk.offset, IntParam(req, "offset", 0, 0, INT64_MAX / 2));
                      RM_ASSIGN_OR_RETURN(protocol::ShipReply reply, svc()->ShipOutput(task, chunk, req.body));
                      return Reply{200, protocol::ToJson(reply)};
                    }));
  }
}

}  // namespace ringmaster::server
