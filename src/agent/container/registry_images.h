// RegistryImages: a registry's image made ready on this node for one task
// (docs/containers.md, "Images from registries"). The job is pinned to a
// manifest digest at submit; this fetches that manifest by digest (verified),
// its config (the image's environment), and then for runc every layer through
// the LayerStore (each verified, unpacked once, shared by images and users)
// or, for Docker, pulls the same digest through dockerd. The registry login
// is the job owner's, asked for only when the registry must be contacted and
// kept nowhere: not on disk, not in a log line, not in the task's environment
// or container. A manifest fetched by digest (and its config) is kept on the
// node: a warm start contacts neither the registry nor the server. The server
// checked the owner's access at submit. Thread-safe.
#pragma once

#include <functional>
#include <map>
#include <mutex>
#include <memory>
#include <string>
#include <vector>

#include "agent/container/layer_store.h"
#include "agent/executor/executor.h"
#include "common/status.h"
#include "protocol/image_ref.h"
#include "registry/client.h"

namespace ringmaster::agent {

struct RegistryImageOptions {
  std::string ca_file;                // PEM CAs for https registries, besides the system's
  std::vector<std::string> insecure;  // registries reached over plain http
  std::vector<std::string> allowed;   // host[:port] or *.domain; empty = any (the server checks too)
  registry::Platform platform;        // this node's
  std::string docker_socket;          // for Docker's pulls
  std::string manifest_dir;           // manifests and configs kept by digest ("" = none)
  std::chrono::milliseconds timeout{60'000};  // each wait on a registry or dockerd's pull progress
  // The agent's own server, which serves users' images as a registry: its
  // host:port, reached over plain http or trusting its CA file.
  std::string server_registry;
  bool server_plain_http = false;
  std::string server_ca_file;
};

// `options` with the server_* fields set for the server at `server_url`.
RegistryImageOptions WithServerRegistry(RegistryImageOptions options, const std::string& server_url,
                                        const std::string& server_ca_file);

// The registry and repository of a pinned reference ("host/repo:tag@sha256:..").
struct PinnedImage {
  std::string registry, repository, digest;  // digest: "sha256:<hex>"
};
StatusOr<PinnedImage> ParsePinnedImage(const std::string& reference);

class RegistryImages {
 public:
  // Layers go under <layers_dir>/<registry>/ (LayerStore), each registry's
  // kept to `max_bytes`.
  RegistryImages(std::string layers_dir, uint64_t max_bytes, UnpackLimits limits, RegistryImageOptions options)
      : layers_dir_(std::move(layers_dir)), max_bytes_(max_bytes), limits_(limits), options_(std::move(options)) {}

  struct Ready {
    TaskLaunch::Image image;
    std::shared_ptr<LayerLease> lease;  // runc: holds the layers while the task runs
  };
  // The job owner's login to the image's registry: asked for only when the
  // registry must be (a warm start needs none).
  using LoginSource = std::function<StatusOr<registry::Credentials>()>;
  // `reference` is the job's pinned image. runtime "runc" or "docker".
  // Errors say what failed and name the registry (its 401, a digest that
  // does not match, a layer with a path outside it, ...).
  StatusOr<Ready> Ensure(const std::string& reference, const LoginSource& login, const std::string& runtime,
                         const std::function<bool()>& cancelled);
  const RegistryImageOptions& options() const { return options_; }

 private:
  struct CachedManifest {
    std::string raw, config, config_digest;
    std::vector<LayerDescriptor> layers;
  };
  registry::Endpoint EndpointFor(const std::string& host) const;
  StatusOr<CachedManifest> ReadCachedManifest(const std::string& digest) const;
  void WriteCachedManifest(const std::string& digest, const CachedManifest& m) const;

  // The layer store of one registry. Layers are shared by images and users
  // of one registry only: a manifest on another registry (which its owner
  // controls) cannot name a layer it does not serve and get it from the cache.
  LayerStore* LayersOf(const std::string& registry);

  const std::string layers_dir_;
  const uint64_t max_bytes_;
  const UnpackLimits limits_;
  const RegistryImageOptions options_;
  std::mutex mu_;
  std::map<std::string, std::unique_ptr<LayerStore>> layers_;  // GUARDED_BY(mu_), by registry
};

}  // namespace ringmaster::agent
