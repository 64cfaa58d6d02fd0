// Every route the server serves, registered in one place: the server and
// the test that holds the OpenAPI document to them (openapi_test.cc) build
// the same table.
#include <nlohmann/json.hpp>

#include "server/api.h"
#include "server/dashboard.h"
#include "server/openapi.h"

namespace ringmaster::server {
namespace {

void AddHealthRoute(Api& api) {
  http::RouteOptions health;
  health.authenticate = false;
  health.max_body = 0;  // nobody may send a body without a token
  health.inline_handler = true;
  // Damage found in the database (at open, or since) makes the server
  // unhealthy: it keeps serving what is sound. The count only: what is
  // damaged may quote another user's stored data, so its list is for admins
  // (GET /api/v1/damage) and the server's log.
  api.http->Route("GET", "/healthz", health, [&api](http::Request&, http::Responder respond) {
    http::Response r;
    std::vector<std::string> damage = api.store->Damage();
    nlohmann::json body;
    if (damage.empty()) {
      body = {{"status", "ok"}, {"ok", true}};
    } else {
      r.status = 503;
      body = {{"status", "damaged"},
              {"ok", false},
              {"damaged", damage.size()},
              {"details", "GET /api/v1/damage (admins) and the server's log"}};
    }
    // A standby is healthy: it is ready to take over.
    if (api.role) body.update(api.role());
    r.body = body.dump();
    respond(std::move(r));
  });
}

// GET /api/v1/openapi.json: the API's description, for any valid token
// (it holds no data; clients and the dashboard's tooling read it).
void AddOpenApiRoute(Api& api) {
  http::RouteOptions any{0, http::Pool::kApi, true, access::kAnyToken};
  any.inline_handler = true;
  api.http->Route("GET", "/api/v1/openapi.json", any, [](http::Request&, http::Responder respond) {
    http::Response r;
    r.body = std::string(OpenApiDocument());
    respond(std::move(r));
  });
}

}  // namespace

void AddAllRoutes(Api& api) {
  AddHealthRoute(api);
  AddJobRoutes(api);
  AddLogRoutes(api);
  AddNodeRoutes(api);
  AddUserRoutes(api);
  AddRegistryRoutes(api);
  AddRegistryV2Routes(api);
  AddAgentRoutes(api);
  AddFileRoutes(api);
  AddAgentFileRoutes(api);
  AddMonitorRoutes(api);
  AddVersionRoutes(api);
  AddSessionRoutes(api);
  AddOpenApiRoute(api);
  AddDashboardRoutes(*api.http);
  AddLabRoutes(api);
}

}  // namespace ringmaster::server
