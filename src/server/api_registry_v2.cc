// This server as a read-only OCI registry (Registry HTTP API V2) of users'
// own images (server/user_images.h), so runc's layer store and dockerd pull
// them as from any registry: GET /v2/, GET|HEAD of /v2/<user>/<name>/
// manifests/<tag or digest> and /v2/<user>/<name>/blobs/sha256:<hex>.
// Tokens come as a bearer or as HTTP Basic's password (any user name). A user
// reads their own namespace (admins any); an agent reads only the manifests
// that jobs of <user> with a task on its node are pinned to, and the blobs
// those manifests list.
// Another's namespace answers 404 NAME_UNKNOWN, as one that does not exist.
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "server/api.h"
#include "server/files_access.h"
#include "server/user_images.h"

namespace ringmaster::server {
namespace {

using nlohmann::json;

http::Response V2Error(int status, const std::string& code, const std::string& message) {
  http::Response r;
  r.status = status;
  r.body = json{{"errors", json::array({{{"code", code}, {"message", message}}})}}.dump(
      -1, ' ', false, json::error_handler_t::replace);
  r.headers.emplace_back("Docker-Distribution-API-Version", "registry/2.0");
  if (status == 401) r.headers.emplace_back("WWW-Authenticate", "Basic realm=\"ringmaster\"");
  return r;
}

http::Response V2ErrorFor(const http::Request& req, const Status& st, const std::string& not_found_code) {
  switch (st.code()) {
    case StatusCode::kUnauthenticated: return V2Error(401, "UNAUTHORIZED", st.message());
    case StatusCode::kPermissionDenied: return V2Error(403, "DENIED", st.message());
    case StatusCode::kNotFound: return V2Error(404, not_found_code, st.message());
    case StatusCode::kInvalidArgument: return V2Error(400, "NAME_INVALID", st.message());
    default: {
      http::Response r = ErrorFor(req, st);  // logs an Internal one
      return V2Error(r.status, "UNKNOWN", r.status == 500 ? "internal error; the server log has the cause" : st.message());
    }
  }
}

StatusOr<Caller> Authenticate(Api& api, const http::Request& req) {
  http::RouteOptions route;
  route.access = access::kRegistry;
  RM_ASSIGN_OR_RETURN(http::Principal p, api.auth->Authenticate(req, route));
  return std::any_cast<Caller>(p.data);
}

// The manifests of `own`/<owner>/<name> that jobs of `owner` with a task
// placed on the agent's node are pinned to: all that agent has to pull.
StatusOr<std::set<std::string>> AgentPins(Api& api, const Caller& c, const store::User& owner,
                                          const std::string& repository, const std::string& own) {
  std::set<std::string> pins;
  int64_t node_id = -1;
  RM_ASSIGN_OR_RETURN(std::vector<store::Node> nodes, api.store->ListNodes());
  for (const store::Node& n : nodes) {
    if (n.name == c.token.node) node_id = n.id;
  }
  if (node_id < 0) return pins;
  RM_ASSIGN_OR_RETURN(std::vector<store::Task> tasks, api.store->ListPlacedTasks());
  const std::string prefix = own + "/" + repository;
  std::set<int64_t> seen;
  for (const store::Task& t : tasks) {
    if (t.node_id != node_id || !seen.insert(t.job_id).second) continue;
    auto job = api.store->GetJob(t.job_id);
    if (!job.ok() || job->user_id != owner.id) continue;
    const json spec = json::parse(job->spec_json, nullptr, false);
    const std::string image = spec.is_object() ? spec.value("image", "") : "";
    const size_t at = image.find('@');
    if (image.size() > prefix.size() && image.rfind(prefix, 0) == 0 &&
        (image[prefix.size()] == ':' || image[prefix.size()] == '@') && at != std::string::npos) {
      pins.insert(image.substr(at + 1));
    }
  }
  return pins;
}

// The blobs (config and layers) the manifests `pins` of `user` list.
std::set<std::string> BlobsOf(Api& api, const std::string& user, const std::set<std::string>& pins) {
  std::set<std::string> blobs;
  for (const std::string& pin : pins) {
    auto body = user_images::ReadSmall(*api.files, user_images::BlobKey(user, pin.substr(7)), user_images::kMaxManifestBytes);
    if (!body.ok()) continue;
    const json m = json::parse(*body, nullptr, false);
    if (!m.is_object()) continue;
    if (m.contains("config") && m["config"].is_object()) blobs.insert(m["config"].value("digest", ""));
    if (m.contains("layers") && m["layers"].is_array()) {
      for (const auto& l : m["layers"]) {
        if (l.is_object()) blobs.insert(l.value("digest", ""));
      }
    }
  }
  return blobs;
}

// The caller, reading as the namespace's owner; or the answer to send.
struct Access {
  Caller reader;
  std::optional<http::Response> refused;
  // An agent reads only the manifests its node's tasks are pinned to (and their blobs).
  std::optional<std::set<std::string>> agent_pins;
};
Access Authorize(Api& api, const http::Request& req, const std::string& user, const std::string& name) {
  Access a;
  auto c = Authenticate(api, req);
  if (!c.ok()) {
    a.refused = V2ErrorFor(req, c.status(), "UNKNOWN");
    return a;
  }
  const std::string repository = user + "/" + name;
  const Status unknown = NotFound(fmt::format("repository {} not known to this registry", repository));
  if (Status st = user_images::ValidateName(name); !st.ok()) {
    a.refused = V2ErrorFor(req, st, "NAME_INVALID");
    return a;
  }
  auto owner = api.store->GetUserByName(user);
  if (!owner.ok()) {
    a.refused = V2ErrorFor(req, owner.status().code() == StatusCode::kNotFound ? unknown : owner.status(), "NAME_UNKNOWN");
    return a;
  }
  bool may = c->user.name == user || c->admin();
  if (c->scope == Scope::kAgent) {
    auto pins = AgentPins(api, *c, *owner, repository, api.registries ? api.registries->own_name() : "");
    if (!pins.ok()) {
      a.refused = V2ErrorFor(req, pins.status(), "UNKNOWN");
      return a;
    }
    may = !pins->empty();
    a.agent_pins = std::move(*pins);
  }
  if (!may) {
    a.refused = V2ErrorFor(req, unknown, "NAME_UNKNOWN");
    return a;
  }
  a.reader = Caller{std::move(*owner), store::Token{}, Scope::kRead};
  return a;
}

void Manifest(Api& api, http::Request& req, const http::Responder& respond, bool head_only) {
  const std::string user = req.matches.at(0), name = req.matches.at(1), reference = req.matches.at(2);
  Access a = Authorize(api, req, user, name);
  if (a.refused) return respond(std::move(*a.refused));
  if (Status st = user_images::ValidateReference(reference); !st.ok()) {
    return respond(V2Error(400, "MANIFEST_INVALID", st.message()));
  }
  auto digest = user_images::Resolve(*api.files, user, name, reference);
  if (!digest.ok()) return respond(V2ErrorFor(req, digest.status(), "MANIFEST_UNKNOWN"));
  if (a.agent_pins && !a.agent_pins->count(*digest)) {
    return respond(V2Error(404, "MANIFEST_UNKNOWN", "manifest unknown to this registry"));
  }
  auto body = user_images::ReadSmall(*api.files, user_images::BlobKey(user, digest->substr(7)), user_images::kMaxManifestBytes);
  if (!body.ok()) return respond(V2ErrorFor(req, body.status(), "MANIFEST_UNKNOWN"));
  const json m = json::parse(*body, nullptr, false);
  http::Response r;
  // The manifest's own type, when it is one a registry serves: never bytes of
  // the user's straight into a header.
  r.content_type = "application/vnd.oci.image.manifest.v1+json";
  if (m.is_object() && m.contains("mediaType") && m["mediaType"].is_string()) {
    const std::string type = m["mediaType"].get<std::string>();
    for (const char* known : {"application/vnd.oci.image.manifest.v1+json",
                              "application/vnd.docker.distribution.manifest.v2+json"}) {
      if (type == known) r.content_type = type;
    }
  }
  r.headers.emplace_back("Docker-Content-Digest", *digest);
  r.headers.emplace_back("Docker-Distribution-API-Version", "registry/2.0");
  if (!head_only) r.body = std::move(*body);
  respond(std::move(r));
}

void Blob(Api& api, http::Request& req, const http::Responder& respond, bool head_only) {
  const std::string user = req.matches.at(0), name = req.matches.at(1), digest = req.matches.at(2);
  Access a = Authorize(api, req, user, name);
  if (a.refused) return respond(std::move(*a.refused));
  if (digest.rfind("sha256:", 0) != 0 || !user_images::ValidateReference(digest).ok()) {
    return respond(V2Error(400, "DIGEST_INVALID", "digest: expected sha256:<64 lowercase hex digits>"));
  }
  if (a.agent_pins && !BlobsOf(api, user, *a.agent_pins).count(digest)) {
    return respond(V2Error(404, "BLOB_UNKNOWN", "blob unknown to this registry"));
  }
  const std::string key = user_images::BlobKey(user, digest.substr(7));
  if (auto head = api.files->Head(key); !head.ok()) return respond(V2ErrorFor(req, head.status(), "BLOB_UNKNOWN"));
  files_api::Get(api, req, [respond, digest](http::Response r) {
    if (r.status < 300) r.headers.emplace_back("Docker-Content-Digest", digest);
    respond(std::move(r));
  }, head_only, a.reader, key);
}

}  // namespace

void AddRegistryV2Routes(Api& api) {
  http::RouteOptions open;
  open.authenticate = false;  // the handlers do, to answer as a registry (401 with a Basic challenge)
  open.max_body = 0;
  auto base = [&api](http::Request& req, http::Responder respond) {
    auto c = Authenticate(api, req);
    if (!c.ok()) return respond(V2ErrorFor(req, c.status(), "UNKNOWN"));
    http::Response r;
    r.body = json{{"registry", api.registries ? api.registries->own_name() : ""}}.dump();
    r.headers.emplace_back("Docker-Distribution-API-Version", "registry/2.0");
    respond(std::move(r));
  };
  api.http->Route("GET", "/v2/", open, base);
  api.http->Route("GET", "/v2", open, base);
  for (const bool head : {false, true}) {
    const char* method = head ? "HEAD" : "GET";
    api.http->Route(method, "/v2/{name}/{name}/manifests/{name}", open,
                    [&api, head](http::Request& req, http::Responder respond) { Manifest(api, req, respond, head); });
    api.http->Route(method, "/v2/{name}/{name}/blobs/{name}", open,
                    [&api, head](http::Request& req, http::Responder respond) { Blob(api, req, respond, head); });
  }
}

}  // namespace ringmaster::server
