// Users, tokens (and password login), the audit log.
#include <regex>

#include <fmt/format.h>

#include "common/crypto.h"
#include "common/json_limits.h"
#include <algorithm>

#include "server/api.h"
#include "server/file_quota.h"
#include "server/privileges.h"
#include "server/slurm_backend.h"

namespace ringmaster::server {
namespace {

using nlohmann::json;
using store::Role;

constexpr size_t kMaxTokenName = 64;

// quota_bytes: the quota that applies (the site's default unless an admin set one); 0 = none.
json UserJson(const store::User& u, int64_t default_quota) {
  return {{"id", u.id},
          {"name", u.name},
          {"role", store::RoleName(u.role)},
          {"disabled", u.disabled},
          {"created_at", FormatTimeUtc(u.created_ms)},
          {"files", {{"bytes", u.file_bytes}, {"quota_bytes", EffectiveFileQuota(u, default_quota)}}},
          {"max_priority", MaxPriority(u)},
          {"host_network", MayUseHostNetwork(u)}};
}

// The privileges a PATCH body sets, each optional; InvalidArgument naming the field.
Status ParsePrivileges(const json& b, store::User& u) {
  for (const auto& [key, value] : b.items()) {
    if (key != "max_priority" && key != "host_network") {
      return InvalidArgument(fmt::format("{}: not a field of a user's privileges (max_priority, host_network)",
                                         Printable(key, 40)));
    }
  }
  if (b.contains("max_priority")) {
    const json& v = b["max_priority"];
    const int64_t max = protocol::kMaxPriority;
    const bool in_range = v.is_number_unsigned()  ? v.get<uint64_t>() <= static_cast<uint64_t>(max)
                          : v.is_number_integer() ? v.get<int64_t>() >= -max && v.get<int64_t>() <= max
                                                  : false;
    if (!in_range) {
      return InvalidArgument(fmt::format("max_priority: must be an integer from {} to {}", -protocol::kMaxPriority,
                                         protocol::kMaxPriority));
    }
    u.max_priority = v.get<int>();
  }
  if (b.contains("host_network")) {
    if (!b["host_network"].is_boolean()) return InvalidArgument("host_network: must be true or false");
    u.host_network = b["host_network"].get<bool>();
  }
  if (b.empty()) return InvalidArgument("body: set max_priority, host_network or both");
  return Status::Ok();
}

json TokenJson(const store::Token& t, const std::string& user) {
  json out = {{"id", t.id}, {"name", t.name}, {"user", user}, {"scope", t.scope}, {"created_at", FormatTimeUtc(t.created_ms)}};
  if (!t.node.empty()) out["node"] = t.node;
  if (t.expires_ms != 0) out["expires_at"] = FormatTimeUtc(t.expires_ms);
  if (t.session) out["session"] = true;
  return out;
}

Status CheckTokenName(const std::string& name) {
  if (!IsValidUtf8(name)) return InvalidArgument("name: must be valid UTF-8");
  // Code points: no control character (C0, C1), and none of the invisible
  // ones that could make a name look like another in a listing (zero-width
  // and direction marks, separators, the byte-order mark).
  size_t chars = 0;
  for (size_t i = 0; i < name.size(); ++chars) {
    const unsigned char c = static_cast<unsigned char>(name[i]);
    const size_t len = c < 0x80 ? 1 : c < 0xe0 ? 2 : c < 0xf0 ? 3 : 4;
    uint32_t cp = len == 1 ? c : c & (0xffu >> (len + 1));
    for (size_t k = 1; k < len; ++k) cp = (cp << 6) | (static_cast<unsigned char>(name[i + k]) & 0x3fu);
    const bool control = cp < 0x20 || (cp >= 0x7f && cp <= 0x9f);
    const bool invisible = cp == 0x061c || cp == 0x180e || (cp >= 0x200b && cp <= 0x200f) ||
                           (cp >= 0x2028 && cp <= 0x202e) || (cp >= 0x2060 && cp <= 0x206f) || cp == 0xfeff;
    if (control || invisible) {
      return InvalidArgument(fmt::format("name: must not contain control or invisible characters (U+{:04X})", cp));
    }
    i += len;
  }
  if (chars == 0 || chars > kMaxTokenName) {
    return InvalidArgument(fmt::format("name: must be 1 to {} characters", kMaxTokenName));
  }
  return Status::Ok();
}

Status CheckNodeName(const std::string& name) {
  static const std::regex kNode(R"(^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$)");
  if (name.size() > 63 || !std::regex_match(name, kNode)) {
    return InvalidArgument(fmt::format("node: \"{}\" is not a node name (letters, digits, '.', '_', '-')", name.substr(0, 64)));
  }
  return Status::Ok();
}

}  // namespace

void AddUserRoutes(Api& api) {
  const size_t body = api.limits.max_body_bytes;
  http::RouteOptions read{body, http::Pool::kApi, true, access::kRead};
  http::RouteOptions admin{body, http::Pool::kApi, true, access::kAdmin};
  http::RouteOptions submit{body, http::Pool::kApi, true, access::kSubmit};
  http::RouteOptions login{body, http::Pool::kApi, true, access::kLogin};

  api.http->Route("GET", "/api/v1/whoami", read, Json([&api](const http::Request&, const Caller& c) -> StatusOr<Reply> {
    json out = UserJson(c.user, api.limits.default_file_quota);
    out["scope"] = ScopeName(c.scope);
    return Reply{200, out};
  }));

  // ---- users (admins)
  api.http->Route("POST", "/api/v1/users", admin, Json([&api](const http::Request& req, const Caller& c) -> StatusOr<Reply> {
    RM_ASSIGN_OR_RETURN(json b, BodyObject(req));
    if (!b.contains("name") || !b["name"].is_string()) return InvalidArgument("name: required, a string");
    store::User u;
    u.name = b["name"];
    static const std::regex kName(R"(^[a-z_][a-z0-9_.-]{0,31}$)");
    if (u.name.size() > 32 || !std::regex_match(u.name, kName)) {
      return InvalidArgument("name: \"" + u.name.substr(0, 40) +
                             "\" is not a valid user name (lowercase letters, digits, _ . -; at most 32)");
    }
    RM_ASSIGN_OR_RETURN(std::string role, StringField(b, "role", "user"));
    auto r = store::ParseRole(role);
    if (!r) return InvalidArgument("role: \"" + role.substr(0, 40) + "\" is not a role (expected admin or user)");
    u.role = *r;
    if (b.contains("password")) {
      if (!b["password"].is_string() || b["password"].get<std::string>().size() < 8 ||
          b["password"].get<std::string>().size() > 1024) {
        return InvalidArgument("password: must be a string of 8 to 1024 characters");
      }
      RM_ASSIGN_OR_RETURN(u.password_hash, HashPassword(b["password"]));
    }
    u.created_ms = api.clock->NowMs();
    RM_ASSIGN_OR_RETURN(u.id, api.store->CreateUser(u));
    api.auth->Audit(req, c.user.name, "user.create", "user " + u.name, "ok", "role " + role);
    return Reply{201, UserJson(u, api.limits.default_file_quota)};
  }));

  api.http->Route("GET", "/api/v1/users", admin, Json([&api](const http::Request&, const Caller&) -> StatusOr<Reply> {
    RM_ASSIGN_OR_RETURN(auto users, api.store->ListUsers());
    json out = json::array();
    for (const auto& u : users) out.push_back(UserJson(u, api.limits.default_file_quota));
    return Reply{200, {{"users", out}}};
  }));

  api.http->Route("PATCH", "/api/v1/users/{name}", admin,
                  Json([&api](const http::Request& req, const Caller& c) -> StatusOr<Reply> {
                    RM_ASSIGN_OR_RETURN(json b, BodyObject(req));
                    auto user = api.store->GetUserByName(req.matches[0]);
                    if (!user.ok()) {
                      return NotFound(fmt::format("user \"{}\" does not exist", Printable(req.matches[0], 40)));
                    }
                    RM_RETURN_IF_ERROR(ParsePrivileges(b, *user));
                    RM_RETURN_IF_ERROR(api.store->SetUserPrivileges(user->id, user->max_priority, user->host_network));
                    api.auth->Audit(req, c.user.name, "user.privileges", "user " + user->name, "ok",
                                    fmt::format("max_priority {}, host_network {}", user->max_priority,
                                                user->host_network ? "yes" : "no"));
                    return Reply{200, UserJson(*user, api.limits.default_file_quota)};
                  }));

  for (const bool disable : {true, false}) {
    api.http->Route(
        "POST", disable ? "/api/v1/users/{name}/disable" : "/api/v1/users/{name}/enable", admin,
        Json([&api, disable](const http::Request& req, const Caller& c) -> StatusOr<Reply> {
          auto user = api.store->GetUserByName(req.matches[0]);
          if (!user.ok()) return NotFound(fmt::format("user \"{}\" does not exist", req.matches[0].substr(0, 40)));
          if (disable && user->id == c.user.id) {
            return FailedPrecondition("you cannot disable yourself: ask another admin");
          }
          RM_RETURN_IF_ERROR(api.store->SetUserDisabled(user->id, disable));
          api.auth->Audit(req, c.user.name, disable ? "user.disable" : "user.enable", "user " + user->name, "ok");
          user->disabled = disable;
          return Reply{200, UserJson(*user, api.limits.default_file_quota)};
        }));
  }

  // ---- tokens
  // With a bearer token: a new token for yourself (admins: for anyone, and
  // agent tokens). With HTTP Basic user:password: log in.
  api.http->Route("POST", "/api/v1/tokens", login, Json([&api](const http::Request& req, const Caller& c) -> StatusOr<Reply> {
    RM_ASSIGN_OR_RETURN(json b, BodyObject(req));
    RM_ASSIGN_OR_RETURN(std::string name, StringField(b, "name", "cli"));
    RM_RETURN_IF_ERROR(CheckTokenName(name));
    RM_ASSIGN_OR_RETURN(std::string for_user, StringField(b, "user", ""));
    RM_ASSIGN_OR_RETURN(std::string scope_name, StringField(b, "scope", ""));
    RM_ASSIGN_OR_RETURN(std::string node, StringField(b, "node", ""));
    const bool login = c.token.id == 0;
    store::User owner = c.user;
    if (!for_user.empty() && for_user != c.user.name) {
      if (login || !c.admin()) return PermissionDenied("user: only admin tokens may create tokens for other users");
      auto target = api.store->GetUserByName(for_user);
      if (!target.ok()) return NotFound("user: \"" + for_user.substr(0, 40) + "\" does not exist");
      if (target->disabled) return FailedPrecondition("user: " + target->name + " is disabled");
      owner = *target;
    }
    // The default scope: everything the owner's role allows and the caller holds.
    Scope scope = owner.role == Role::kAdmin && c.admin() ? Scope::kAdmin : Scope::kSubmit;
    if (!scope_name.empty()) {
      auto s = ParseScope(scope_name);
      if (!s) {
        return InvalidArgument("scope: \"" + scope_name.substr(0, 20) + "\" is not read, submit, admin, agent or metrics");
      }
      scope = *s;
    }
    if ((scope == Scope::kAdmin || scope == Scope::kMetrics) && (owner.role != Role::kAdmin || !c.admin())) {
      return PermissionDenied(fmt::format("scope: {} tokens are only for admin users, made with an admin token", ScopeName(scope)));
    }
    if (scope == Scope::kAgent) {
      if (!c.admin()) return PermissionDenied("scope: agent tokens are made with an admin token");
      if (node.empty()) return InvalidArgument("node: an agent token needs the node it acts for");
      RM_RETURN_IF_ERROR(CheckNodeName(node));
    } else if (!node.empty()) {
      return InvalidArgument("node: only agent tokens are bound to a node");
    }
    RM_ASSIGN_OR_RETURN(int64_t have, api.store->CountTokens(owner.id));
    if (api.slurm && have >= api.limits.max_tokens_per_user) {
      // The Slurm steps' tokens (the admin's, one per rank while its gang
      // runs) are the server's, not the user's to count.
      RM_ASSIGN_OR_RETURN(auto tokens, api.store->ListTokens(owner.id));
      have -= std::count_if(tokens.begin(), tokens.end(), [](const store::Token& t) {
        return t.scope == "agent" && t.name.rfind(kSlurmStepTokenPrefix, 0) == 0;
      });
    }
    if (have >= api.limits.max_tokens_per_user) {
      return ResourceExhausted(fmt::format("user {} has {} tokens, the limit: revoke some (ringmaster tokens revoke ID)",
                                           owner.name, have));
    }
    const std::string secret = NewApiToken();
    store::Token t{0, owner.id, name, Sha256Hex(secret), api.clock->NowMs(), ScopeName(scope), node};
    RM_ASSIGN_OR_RETURN(t.id, api.store->CreateToken(t));
    api.auth->Audit(req, c.user.name, "token.create", fmt::format("token {} of {}", t.id, owner.name), "ok",
                    fmt::format("scope {}{}{}", t.scope, node.empty() ? "" : " node " + node, login ? " (login)" : ""));
    json out = TokenJson(t, owner.name);
    out["token"] = secret;
    Reply r{201, out};
    r.headers.emplace_back("Cache-Control", "no-store");  // the secret must not sit in a cache
    return r;
  }));

  api.http->Route("GET", "/api/v1/tokens", read, Json([&api](const http::Request& req, const Caller& c) -> StatusOr<Reply> {
    RM_ASSIGN_OR_RETURN(auto user, req.Param("user"));
    RM_ASSIGN_OR_RETURN(bool all, BoolParam(req, "all"));
    int64_t owner = c.user.id;
    if (all || (user && *user != c.user.name)) {
      if (!c.admin()) return PermissionDenied("user, all: only admin tokens may list other users' tokens");
      if (all) {
        owner = 0;
      } else {
        auto u = api.store->GetUserByName(*user);
        if (!u.ok()) return NotFound("user: \"" + user->substr(0, 40) + "\" does not exist");
        owner = u->id;
      }
    }
    RM_ASSIGN_OR_RETURN(auto tokens, api.store->ListTokens(owner));
    RM_ASSIGN_OR_RETURN(auto users, api.store->ListUsers());
    std::map<int64_t, std::string> names;
    for (const auto& u : users) names[u.id] = u.name;
    json out = json::array();
    for (const auto& t : tokens) out.push_back(TokenJson(t, names[t.user_id]));
    return Reply{200, {{"tokens", out}}};
  }));

  // Revokes at once: the next request with it gets 401. Owners revoke their
  // own; admins anyone's. Others' token ids are not confirmed to exist.
  api.http->Route("DELETE", "/api/v1/tokens/{id}", submit, Json([&api](const http::Request& req, const Caller& c) -> StatusOr<Reply> {
    const int64_t id = PathId(req);
    auto t = api.store->GetToken(id);
    if (!t.ok() || (t->user_id != c.user.id && !c.admin())) return NotFound(fmt::format("token {} not found", id));
    RM_RETURN_IF_ERROR(api.store->DeleteToken(id));
    auto owner = api.store->GetUser(t->user_id);
    api.auth->Audit(req, c.user.name, "token.revoke", fmt::format("token {} of {}", id, owner.ok() ? owner->name : "?"),
                    "ok", "scope " + t->scope);
    return Reply{200, {{"id", id}, {"deleted", true}}};
  }));

  // ---- damage found in the database (admins: it may quote stored data; /healthz gives the count)
  api.http->Route("GET", "/api/v1/damage", admin, Json([&api](const http::Request&, const Caller&) -> StatusOr<Reply> {
    return Reply{200, {{"damage", api.store->Damage()}}};
  }));

  // ---- audit log (admins)
  api.http->Route("GET", "/api/v1/audit", admin, Json([&api](const http::Request& req, const Caller&) -> StatusOr<Reply> {
    RM_ASSIGN_OR_RETURN(int64_t limit, IntParam(req, "limit", 100, 1, 10000));
    RM_ASSIGN_OR_RETURN(auto user, req.Param("user"));
    RM_ASSIGN_OR_RETURN(auto action, req.Param("action"));
    RM_ASSIGN_OR_RETURN(auto entries, api.store->ListAudit(static_cast<int>(limit), user.value_or(""), action.value_or("")));
    json out = json::array();
    for (const auto& e : entries) {
      out.push_back({{"id", e.id},
                     {"time", FormatTimeUtc(e.ts_ms)},
                     {"user", e.user},
                     {"address", e.address},
                     {"action", e.action},
                     {"target", e.target},
                     {"outcome", e.outcome},
                     {"detail", e.detail}});
    }
    return Reply{200, {{"entries", out}}};
  }));
}

}  // namespace ringmaster::server
