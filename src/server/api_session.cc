// Browser sessions (docs/api.md, "Browser sessions"): POST /api/v1/session
// logs in with a password or a token and sets the rm_session cookie; GET
// says who the cookie is and its CSRF token; DELETE ends it. The session
// itself is a token row (server/auth.h), so revoking tokens ends it too.
#include <fmt/format.h>

#include "server/api.h"

namespace ringmaster::server {
namespace {

using nlohmann::json;

json SessionJson(const Caller& c) {
  return {{"user", {{"id", c.user.id}, {"name", c.user.name}, {"role", store::RoleName(c.user.role)}}},
          {"csrf", c.csrf},
          {"expires_at", FormatTimeUtc(c.token.expires_ms)}};
}

// Secure only under TLS: a plain-HTTP server (loopback) could never get it back.
std::string Cookie(const Api& api, const std::string& value, int64_t max_age_s) {
  return fmt::format("{}={}; Path=/; HttpOnly; SameSite=Strict; Max-Age={}{}", kSessionCookie, value, max_age_s,
                     api.http->tls() ? "; Secure" : "");
}

Status NeedSession(const Caller& c) {
  if (!c.token.session) return Unauthenticated("no session: log in with POST /api/v1/session");
  return Status::Ok();
}

}  // namespace

void AddSessionRoutes(Api& api) {
  // No token: this is where a browser gets its credentials.
  http::RouteOptions open{4 << 10, http::Pool::kApi, false, ""};
  api.http->Route("POST", "/api/v1/session", open, Json([&api](const http::Request& req, const Caller&) -> StatusOr<Reply> {
    RM_ASSIGN_OR_RETURN(json body, BodyObject(req));
    StatusOr<Caller> who = Unauthenticated("wrong user name or password");
    if (body.contains("token")) {
      RM_ASSIGN_OR_RETURN(std::string secret, StringField(body, "token", ""));
      who = api.auth->LoginWithToken(req, secret);
    } else {
      RM_ASSIGN_OR_RETURN(std::string name, StringField(body, "user", ""));
      RM_ASSIGN_OR_RETURN(std::string password, StringField(body, "password", ""));
      who = api.auth->Login(req, name, body.contains("password") ? std::optional(password) : std::nullopt, "session.login");
    }
    RM_RETURN_IF_ERROR(who.status());
    RM_ASSIGN_OR_RETURN(Auth::NewSession s, api.auth->StartSession(*who));
    Reply r{201, SessionJson(s.caller)};
    r.headers.emplace_back("Set-Cookie", Cookie(api, s.secret, api.auth->session_ttl_ms() / 1000));
    r.headers.emplace_back("Cache-Control", "no-store");
    return r;
  }));
  http::RouteOptions read{0, http::Pool::kApi, true, access::kRead};
  api.http->Route("GET", "/api/v1/session", read, Json([](const http::Request&, const Caller& c) -> StatusOr<Reply> {
    RM_RETURN_IF_ERROR(NeedSession(c));
    Reply r{200, SessionJson(c)};
    r.headers.emplace_back("Cache-Control", "no-store");
    return r;
  }));
  // A read session may end itself too; the CSRF header is checked before this runs.
  api.http->Route("DELETE", "/api/v1/session", read, Json([&api](const http::Request& req, const Caller& c) -> StatusOr<Reply> {
    RM_RETURN_IF_ERROR(NeedSession(c));
    RM_RETURN_IF_ERROR(api.store->DeleteToken(c.token.id));
    api.auth->Audit(req, c.user.name, "session.logout", fmt::format("token {}", c.token.id), "ok");
    Reply r{200, {{"ended", true}}};
    r.headers.emplace_back("Set-Cookie", Cookie(api, "", 0));
    return r;
  }));
}

}  // namespace ringmaster::server
