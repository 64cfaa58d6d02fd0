// RegistryImages: a registry's image made ready on this node for one task
// (docs/containers.md, "Images from registries"). The job is pinned to a
// manifest digest at submit; this fetches that manifest by digest (verified),
// its config (the image's environment), and then for runc every layer through
// the LayerStore (each verified, unpacked once, shared by images and users)
// or, for Docker, pulls the same digest through dockerd. The registry login
// is the job owner's, handed in for this pull and kept nowhere: not on disk,
// not in a log line, not in the task's environment or container. Thread-safe.
#pragma once

#include <functional>
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
  registry::Platform platform;        // this node's
  std::string docker_socket;          // for Docker's pulls
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
  RegistryImages(LayerStore* layers, RegistryImageOptions options)
      : layers_(layers), options_(std::move(options)) {}

  struct Ready {
    TaskLaunch::Image image;
    std::shared_ptr<LayerLease> lease;  // runc: holds the layers while the task runs
  };
  // `reference` is the job's pinned image. runtime "runc" or "docker".
  // Errors say what failed and name the registry (its 401, a digest that
  // does not match, a layer with a path outside it, ...).
  StatusOr<Ready> Ensure(const std::string& reference, const registry::Credentials& login, const std::string& runtime,
                         const std::function<bool()>& cancelled);
  const RegistryImageOptions& options() const { return options_; }

 private:
  registry::Endpoint EndpointFor(const std::string& host) const;

  LayerStore* const layers_;
  const RegistryImageOptions options_;
};

}  // namespace ringmaster::agent
