// Notebooks behind the server: /jobs/{id}/lab/{path...} (every method and
// WebSocket upgrades) reaches a running notebook job's Jupyter through its
// node's agent (protocol/lab_tunnel.h), with the caller's credentials checked
// here and stripped from what the notebook sees (lab_proxy.h).
#include <fmt/format.h>

#include "protocol/job_spec.h"
#include "protocol/lab_tunnel.h"
#include "server/api.h"
#include "server/lab_proxy.h"

namespace ringmaster::server {
namespace {

struct Notebook {
  int64_t job_id = 0;
  store::Task task;
  store::Node node;
};

// The running notebook of job `id`, if the caller may open it: its owner
// alone. Not admins: a notebook's pages run its owner's code on the
// dashboard's origin, so an admin opening one would lend that code the
// admin's session (docs/security.md). Everything else is the same NotFound,
// so another user's job ids are not confirmed.
StatusOr<Notebook> OpenableNotebook(Api& api, int64_t id, const Caller& c) {
  RM_ASSIGN_OR_RETURN(store::Job job, VisibleJob(api, id, c));
  const Status none = NotFound(fmt::format("job {} has no running notebook", id));
  if (job.user_id != c.user.id) return NotFound(fmt::format("job {} not found", id));
  if (job.state != store::State::kRunning || job.kind != "dev") return none;
  auto spec = protocol::JobSpecFromJson(job.spec_json);
  if (!spec.ok() || !spec->notebook()) return none;
  RM_ASSIGN_OR_RETURN(auto tasks, api.store->ListTasks(id));
  for (const store::Task& t : tasks) {
    if (t.rank != 0 || t.state != store::State::kRunning || t.node_id == 0) continue;
    RM_ASSIGN_OR_RETURN(store::Node node, api.store->GetNode(t.node_id));
    return Notebook{id, t, std::move(node)};
  }
  return none;
}

}  // namespace

std::optional<std::string> LabUrl(const store::Job& job) {
  if (job.state != store::State::kRunning || job.kind != "dev") return std::nullopt;
  auto spec = protocol::JobSpecFromJson(job.spec_json);
  if (!spec.ok() || !spec->notebook()) return std::nullopt;
  return fmt::format("/jobs/{}/lab/", job.id);
}

void AddLabRoutes(Api& api) {
  // Submit scope (running code is a change); no X-CSRF-Token: Jupyter checks its own _xsrf.
  http::RouteOptions lab{0, http::Pool::kApi, true, access::kProxy};
  lab.takeover = true;
  auto proxy = [&api](http::Request& req, http::Responder respond) {
    const Caller& c = CallerOf(req);
    auto nb = OpenableNotebook(api, PathId(req), c);
    if (!nb.ok()) return respond(ErrorFor(req, nb.status()));
    const int64_t port = api.lab->Port(nb->node.id);
    if (port == 0 || nb->node.address.empty()) {
      return respond(ErrorFor(req, Unavailable(fmt::format("node {} has not said where it takes notebook connections "
                                                           "(its agent registers again shortly)",
                                                           nb->node.name))));
    }
    const protocol::TunnelTicket ticket{nb->task.id, nb->task.attempt,
                                        api.clock->NowMs() + protocol::kTunnelTicketTtlMs};
    http::Connection::Upstream up;
    up.host = nb->node.address;
    up.port = static_cast<int>(port);
    up.preface = std::string(protocol::kTunnelGreeting) +
                 protocol::SignTunnelTicket(ticket, api.lab->NodeKey(nb->node.name)) + "\n" +
                 ForwardedHead(req, api.http->tls());
    up.rewrite_head = [job_id = nb->job_id](http::UpstreamHead& head) {
      std::erase_if(head.headers, [job_id](const auto& h) { return !MayPassHeader(h.first, h.second, job_id); });
    };
    req.connection->Splice(std::move(up));
  };
  for (const char* method : {"GET", "POST", "PUT", "PATCH", "DELETE"}) {
    api.http->Route(method, "/jobs/{id}/lab/{path...}", lab, proxy);
  }
  // The notebook's pages are relative to /jobs/<id>/lab/: the bare path redirects.
  http::RouteOptions bare{0, http::Pool::kApi, true, access::kProxy};
  api.http->Route("GET", "/jobs/{id}/lab", bare, [&api](http::Request& req, http::Responder respond) {
    auto nb = OpenableNotebook(api, PathId(req), CallerOf(req));
    if (!nb.ok()) return respond(ErrorFor(req, nb.status()));
    http::Response r;
    r.status = 301;
    r.headers.emplace_back("Location", fmt::format("/jobs/{}/lab/", nb->job_id));
    r.body = "{}";
    respond(std::move(r));
  });
}

}  // namespace ringmaster::server
