// Registry logins (docs/api.md, "Registry logins"): a user's credentials for
// an OCI registry, used only for their own jobs' images; an admin's `site`
// logins for every user's. Passwords go in and never come out: not in a
// listing, a log line, the audit log, a task's environment or a container.
// The agent of a task's node reads the one login its image needs
// (api_agent_files.cc).
#include <fmt/format.h>

#include "server/api.h"

namespace ringmaster::server {
namespace {

using nlohmann::json;

json LoginJson(const store::RegistryCredential& c) {
  return {{"registry", c.registry},
          {"username", c.username},
          {"site", c.user_id == 0},
          {"updated_at", FormatTimeUtc(c.updated_ms)}};
}

// user 0 (the site's) with ?site=1, which only admins may touch.
StatusOr<int64_t> LoginOwner(const http::Request& req, const Caller& c, bool site) {
  if (!site) return c.user.id;
  if (!c.admin()) return PermissionDenied("site: only admin tokens set the site's registry logins");
  (void)req;
  return int64_t{0};
}

}  // namespace

void AddRegistryRoutes(Api& api) {
  http::RouteOptions read{api.limits.max_body_bytes, http::Pool::kApi, true, access::kRead};
  http::RouteOptions change{api.limits.max_body_bytes, http::Pool::kApi, true, access::kSubmit};

  api.http->Route("GET", "/api/v1/registry-logins", read, Json([&api](const http::Request&, const Caller& c) -> StatusOr<Reply> {
    if (!api.registries) return FailedPrecondition("this server runs no images from registries");
    json out = json::array();
    RM_ASSIGN_OR_RETURN(auto mine, api.registries->List(c.user.id));
    for (const auto& l : mine) out.push_back(LoginJson(l));
    // Everyone may see which registries the site logs in to (and as whom), never with what.
    RM_ASSIGN_OR_RETURN(auto site, api.registries->List(0));
    for (const auto& l : site) out.push_back(LoginJson(l));
    return Reply{200, {{"logins", out}}};
  }));

  api.http->Route("POST", "/api/v1/registry-logins", change, Json([&api](const http::Request& req, const Caller& c) -> StatusOr<Reply> {
    if (!api.registries) return FailedPrecondition("this server runs no images from registries");
    RM_ASSIGN_OR_RETURN(json body, BodyObject(req));
    RM_ASSIGN_OR_RETURN(std::string registry, StringField(body, "registry", ""));
    RM_ASSIGN_OR_RETURN(std::string username, StringField(body, "username", ""));
    RM_ASSIGN_OR_RETURN(std::string password, StringField(body, "password", ""));
    bool site = false;
    if (body.contains("site")) {
      if (!body["site"].is_boolean()) return InvalidArgument("site: must be true or false");
      site = body["site"].get<bool>();
    }
    if (registry.empty()) return InvalidArgument("registry: required (host[:port], e.g. registry.example:5000)");
    RM_ASSIGN_OR_RETURN(int64_t owner, LoginOwner(req, c, site));
    RM_ASSIGN_OR_RETURN(std::string host, NormalizeRegistry(registry));
    RM_RETURN_IF_ERROR(api.registries->Login(owner, host, username, password));
    api.auth->Audit(req, c.user.name, "registry.login", (site ? "site login to " : "login to ") + host, "ok");
    return Reply{200, {{"registry", host}, {"username", username}, {"site", site}}};
  }));

  api.http->Route("DELETE", "/api/v1/registry-logins/{registry}", change,
                  Json([&api](const http::Request& req, const Caller& c) -> StatusOr<Reply> {
                    if (!api.registries) return FailedPrecondition("this server runs no images from registries");
                    RM_ASSIGN_OR_RETURN(bool site, BoolParam(req, "site"));
                    RM_ASSIGN_OR_RETURN(int64_t owner, LoginOwner(req, c, site));
                    RM_ASSIGN_OR_RETURN(std::string host, NormalizeRegistry(req.matches.at(0)));
                    RM_RETURN_IF_ERROR(api.registries->Logout(owner, host));
                    api.auth->Audit(req, c.user.name, "registry.logout", (site ? "site login to " : "login to ") + host, "ok");
                    return Reply{200, {{"registry", host}, {"site", site}}};
                  }));
}

}  // namespace ringmaster::server
