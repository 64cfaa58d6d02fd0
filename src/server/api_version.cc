// GET /api/v1/version: the server's build (common/build_info.h), for any
// valid token: a CLI, an agent or a Prometheus server may each ask which
// server it talks to.
#include "common/build_info.h"
#include "server/api.h"

namespace ringmaster::server {

void AddVersionRoutes(Api& api) {
  http::RouteOptions any{0, http::Pool::kApi, true, access::kAnyToken};
  api.http->Route("GET", "/api/v1/version", any, Json([](const http::Request&, const Caller&) -> StatusOr<Reply> {
    return Reply{200, BuildInfoJson(ThisBuild())};
  }));
}

}  // namespace ringmaster::server
