#include "agent/container/registry_images.h"

#include <algorithm>
#include <cctype>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "agent/container/docker/docker_api.h"
#include "common/log.h"

namespace ringmaster::agent {

StatusOr<PinnedImage> ParsePinnedImage(const std::string& reference) {
  RM_ASSIGN_OR_RETURN(protocol::ImageRef ref, protocol::ParseImageRef(reference));
  if (ref.registry.empty() || ref.digest.empty()) {
    return InvalidArgument(fmt::format("image {} is not a registry's image pinned to a digest", reference));
  }
  return PinnedImage{ref.registry, ref.repository, "sha256:" + ref.digest};
}

namespace {

// dockerd words a registry's refusal as its own 500 ("unauthorized:
// authentication required"): said the way our own pulls say it, naming the
// registry, what it answered and whose login it refused.
Status DockerPullError(const std::string& registry, const registry::Credentials& login, const Status& st) {
  const std::string& m = st.message();
  const std::string whose = login.empty() ? "no credentials" : "credentials of " + login.username;
  if (m.find("unauthorized") != std::string::npos || m.find("authentication required") != std::string::npos) {
    return Unauthenticated(fmt::format("registry {}: 401 Unauthorized ({}): {}", registry, whose, m));
  }
  if (m.find("denied") != std::string::npos) {
    return PermissionDenied(fmt::format("registry {}: 403 Forbidden ({}): {}", registry, whose, m));
  }
  if (st.code() == StatusCode::kNotFound || m.find("manifest unknown") != std::string::npos) {
    return NotFound(fmt::format("registry {}: 404 Not Found: {}", registry, m));
  }
  return st;
}

}  // namespace

RegistryImageOptions WithServerRegistry(RegistryImageOptions options, const std::string& server_url,
                                        const std::string& server_ca_file) {
  const size_t scheme = server_url.find("://");
  if (scheme == std::string::npos) return options;
  std::string authority = server_url.substr(scheme + 3);
  authority = authority.substr(0, authority.find('/'));
  std::transform(authority.begin(), authority.end(), authority.begin(), [](unsigned char c) { return std::tolower(c); });
  options.server_registry = authority;
  options.server_plain_http = server_url.rfind("http://", 0) == 0;
  options.server_ca_file = server_ca_file;
  return options;
}

registry::Endpoint RegistryImages::EndpointFor(const std::string& host) const {
  registry::Endpoint e;
  e.host = host;
  if (!options_.server_registry.empty() && host == options_.server_registry) {
    e.plain_http = options_.server_plain_http;
    e.ca_file = options_.server_ca_file;
    return e;
  }
  e.plain_http = std::find(options_.insecure.begin(), options_.insecure.end(), host) != options_.insecure.end();
  e.ca_file = options_.ca_file;
  return e;
}

StatusOr<RegistryImages::Ready> RegistryImages::Ensure(const std::string& reference, const registry::Credentials& login,
                                                       const std::string& runtime,
                                                       const std::function<bool()>& cancelled) {
  RM_ASSIGN_OR_RETURN(PinnedImage at, ParsePinnedImage(reference));
  Ready ready;
  ready.image.name = reference.substr(0, reference.find('@'));
  ready.image.digest = at.digest.substr(7);
  const std::string pinned = at.registry + "/" + at.repository + "@" + at.digest;
  if (runtime == "docker") {
    // dockerd pulls (and verifies) by digest itself, with the login in the
    // request's header only. Its image config gives the environment.
    DockerApi docker(options_.docker_socket, options_.timeout);
    if (auto have = docker.InspectImage(pinned); !have.ok()) {
      std::string auth;
      if (!login.empty()) {
        auth = nlohmann::json{{"username", login.username}, {"password", login.password}, {"serveraddress", at.registry}}
                   .dump();
      }
      spdlog::info("agent: pulling image {} through docker{}", pinned, login.empty() ? "" : " with its owner's login");
      if (Status st = docker.PullImage(pinned, auth, std::chrono::minutes(30)); !st.ok()) {
        return DockerPullError(at.registry, login, st);
      }
    }
    RM_ASSIGN_OR_RETURN(nlohmann::json inspect, docker.InspectImage(pinned));
    for (const auto& kv : inspect.value("/Config/Env"_json_pointer, nlohmann::json::array())) {
      if (!kv.is_string()) continue;
      const std::string s = kv.get<std::string>();
      const size_t eq = s.find('=');
      if (eq != std::string::npos && eq > 0) ready.image.env[s.substr(0, eq)] = s.substr(eq + 1);
    }
    ready.image.reference = pinned;
    return ready;
  }
  registry::Options o;
  o.connect_timeout = std::min(options_.timeout, std::chrono::milliseconds(10'000));
  o.io_timeout = options_.timeout;
  registry::Client client(EndpointFor(at.registry), login, o);
  RM_ASSIGN_OR_RETURN(registry::Manifest manifest, client.Resolve(at.repository, at.digest, options_.platform));
  if (manifest.digest != at.digest) {
    return DataLoss(fmt::format("registry {}: {} resolved to manifest {}, not the pinned one", at.registry, pinned,
                                manifest.digest));
  }
  RM_ASSIGN_OR_RETURN(std::string config_json, client.FetchBlob(at.repository, manifest.config.digest));
  RM_ASSIGN_OR_RETURN(registry::ImageConfig config, registry::ParseImageConfig(config_json));
  for (const std::string& kv : config.env) {
    const size_t eq = kv.find('=');
    if (eq != std::string::npos && eq > 0) ready.image.env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  std::vector<LayerDescriptor> layers;
  for (const auto& d : manifest.layers) layers.push_back({d.digest, d.media_type, d.size});
  const auto fetch = [&](const LayerDescriptor& layer, const std::function<Status(const char*, size_t)>& sink) {
    spdlog::info("agent: fetching layer {} ({} bytes) of {}", layer.digest.substr(0, 19), layer.size, pinned);
    return client.StreamBlob(at.repository, layer.digest, sink, cancelled);
  };
  RM_ASSIGN_OR_RETURN(LayerLease lease, layers_->Acquire(layers, fetch, cancelled));
  ready.image.layers = lease.dirs();
  ready.image.reference = pinned;
  ready.lease = std::make_shared<LayerLease>(std::move(lease));
  return ready;
}

}  // namespace ringmaster::agent
