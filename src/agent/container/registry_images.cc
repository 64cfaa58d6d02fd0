#include "agent/container/registry_images.h"

#include <algorithm>
#include <cctype>
#include <optional>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "agent/container/docker/docker_api.h"
#include "common/crypto.h"
#include "common/files.h"
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

RegistryImageOptions WithServerRegistry(RegistryImageOptions options, const std::string& server_urls,
                                        const std::string& server_ca_file) {
  // Of a leader and its standbys, the first names the registry.
  const std::string server_url = server_urls.substr(0, server_urls.find(','));
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

StatusOr<RegistryImages::Ready> RegistryImages::Ensure(const std::string& reference, const LoginSource& login_source,
                                                       const std::string& runtime,
                                                       const std::function<bool()>& cancelled) {
  RM_ASSIGN_OR_RETURN(PinnedImage at, ParsePinnedImage(reference));
  // The agent's own server (users' images) is always allowed.
  if (at.registry != options_.server_registry && !registry::RegistryAllowed(options_.allowed, at.registry)) {
    return PermissionDenied(fmt::format("registry {} is not one this node pulls from (its --allowed-registries)",
                                        at.registry));
  }
  Ready ready;
  ready.image.name = reference.substr(0, reference.find('@'));
  ready.image.digest = at.digest.substr(7);
  const std::string pinned = at.registry + "/" + at.repository + "@" + at.digest;
  // The login is asked of the server only when the registry is: a warm start
  // (manifest, config and layers on this node) touches neither.
  std::optional<registry::Credentials> login;
  const auto get_login = [&]() -> StatusOr<registry::Credentials> {
    if (!login) {
      RM_ASSIGN_OR_RETURN(registry::Credentials c, login_source());
      login = std::move(c);
    }
    return *login;
  };
  if (runtime == "docker") {
    // dockerd pulls (and verifies) by digest itself, with the login in the
    // request's header only. Its image config gives the environment.
    DockerApi docker(options_.docker_socket, options_.timeout);
    if (auto have = docker.InspectImage(pinned); !have.ok()) {
      RM_ASSIGN_OR_RETURN(registry::Credentials creds, get_login());
      std::string auth;
      if (!creds.empty()) {
        auth = nlohmann::json{{"username", creds.username}, {"password", creds.password}, {"serveraddress", at.registry}}
                   .dump();
      }
      spdlog::info("agent: pulling image {} through docker{}", pinned, creds.empty() ? "" : " with its owner's login");
      if (Status st = docker.PullImage(pinned, auth, std::chrono::minutes(30), cancelled); !st.ok()) {
        return DockerPullError(at.registry, creds, st);
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
  std::unique_ptr<registry::Client> client;
  int64_t image_bytes = 0;  // known once the manifest is: it bounds the pull's time
  const auto get_client = [&]() -> StatusOr<registry::Client*> {
    if (!client) {
      RM_ASSIGN_OR_RETURN(registry::Credentials creds, get_login());
      // A pull slower than 1 MiB/s on average (after 2 minutes of grace) ends:
      // a registry that trickles cannot hold a layer's lock, and the tasks
      // of other users waiting on it, for ever.
      o.deadline = std::chrono::steady_clock::now() + std::chrono::minutes(2) +
                   std::chrono::seconds(std::max<int64_t>(image_bytes, 0) >> 20);
      client = std::make_unique<registry::Client>(EndpointFor(at.registry), creds, o);
    }
    return client.get();
  };
  // A manifest named by its digest never changes: kept on the node with its
  // config, both checked against their digests when read back.
  auto cached = ReadCachedManifest(at.digest);
  CachedManifest m;
  if (cached.ok()) {
    m = std::move(*cached);
  } else {
    registry::Options mo = o;
    mo.deadline = std::chrono::steady_clock::now() + std::chrono::minutes(2);
    RM_ASSIGN_OR_RETURN(registry::Credentials creds, get_login());
    registry::Client c0(EndpointFor(at.registry), creds, mo);
    registry::Client* c = &c0;
    RM_ASSIGN_OR_RETURN(registry::Manifest manifest, c->Resolve(at.repository, at.digest, options_.platform));
    if (manifest.digest != at.digest) {
      return DataLoss(fmt::format("registry {}: {} resolved to manifest {}, not the pinned one", at.registry, pinned,
                                  manifest.digest));
    }
    RM_ASSIGN_OR_RETURN(m.config, c->FetchBlob(at.repository, manifest.config.digest));
    for (const auto& d : manifest.layers) m.layers.push_back({d.digest, d.media_type, d.size});
    m.raw = manifest.raw;
    m.config_digest = manifest.config.digest;
    WriteCachedManifest(at.digest, m);
  }
  for (const auto& l : m.layers) image_bytes += l.size;
  RM_ASSIGN_OR_RETURN(registry::ImageConfig config, registry::ParseImageConfig(m.config));
  for (const std::string& kv : config.env) {
    const size_t eq = kv.find('=');
    if (eq != std::string::npos && eq > 0) ready.image.env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  const auto fetch = [&](const LayerDescriptor& layer, const std::function<Status(const char*, size_t)>& sink) -> Status {
    RM_ASSIGN_OR_RETURN(registry::Client * c, get_client());
    spdlog::info("agent: fetching layer {} ({} bytes) of {}", layer.digest.substr(0, 19), layer.size, pinned);
    return c->StreamBlob(at.repository, layer.digest, sink, cancelled);
  };
  RM_ASSIGN_OR_RETURN(LayerLease lease, LayersOf(at.registry)->Acquire(m.layers, fetch, cancelled));
  ready.image.layers = lease.dirs();
  ready.image.reference = pinned;
  ready.lease = std::make_shared<LayerLease>(std::move(lease));
  return ready;
}

LayerStore* RegistryImages::LayersOf(const std::string& registry) {
  std::lock_guard<std::mutex> l(mu_);
  auto& store = layers_[registry];
  if (!store) {
    std::string dir = registry;  // host[:port]: a name, never a path
    for (char& c : dir) {
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-') c = '_';
    }
    store = std::make_unique<LayerStore>(layers_dir_ + "/" + dir, max_bytes_, limits_);
  }
  return store.get();
}

StatusOr<RegistryImages::CachedManifest> RegistryImages::ReadCachedManifest(const std::string& digest) const {
  if (options_.manifest_dir.empty()) return NotFound("no manifest cache");
  const std::string hex = digest.substr(7);
  RM_ASSIGN_OR_RETURN(std::string raw, ReadFile(options_.manifest_dir + "/" + hex + ".manifest"));
  RM_ASSIGN_OR_RETURN(std::string config, ReadFile(options_.manifest_dir + "/" + hex + ".config"));
  if (Sha256Hex(raw) != hex) return DataLoss("cached manifest " + digest + " is damaged");
  CachedManifest m;
  try {
    const auto j = nlohmann::json::parse(raw);
    m.config_digest = j.at("config").at("digest").get<std::string>();
    for (const auto& l : j.at("layers")) {
      m.layers.push_back({l.at("digest").get<std::string>(), l.value("mediaType", ""), l.value("size", int64_t{0})});
    }
  } catch (const std::exception& e) {
    return DataLoss("cached manifest " + digest + ": " + e.what());
  }
  if (m.config_digest != "sha256:" + Sha256Hex(config)) return DataLoss("cached config of " + digest + " is damaged");
  m.raw = std::move(raw);
  m.config = std::move(config);
  return m;
}

void RegistryImages::WriteCachedManifest(const std::string& digest, const CachedManifest& m) const {
  if (options_.manifest_dir.empty()) return;
  const std::string hex = digest.substr(7);
  Status st = MakeDirs(options_.manifest_dir, 0700);
  if (st.ok()) st = WriteFileAtomic(options_.manifest_dir + "/" + hex + ".config", m.config, 0600);
  if (st.ok()) st = WriteFileAtomic(options_.manifest_dir + "/" + hex + ".manifest", m.raw, 0600);
  if (!st.ok()) spdlog::warn("agent: keeping manifest {}: {}", digest, st.ToString());
}

}  // namespace ringmaster::agent
