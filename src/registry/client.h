// A client of the OCI Distribution API (Registry HTTP API V2): what a node
// needs to run an image from any registry. It resolves a tag to its manifest
// digest (an index to one platform's manifest), and streams blobs verified
// against their digests. Authentication is the registries' own: anonymous,
// Basic, and the bearer-token flow (a 401 with `WWW-Authenticate: Bearer
// realm=...,service=...,scope=...`, a token fetched from the realm with the
// credentials, then `Authorization: Bearer`), as Docker Hub, NGC, Harbor and
// GitLab use. Every wait has a deadline. Errors name the registry and what it
// answered. A Client is thread-safe (tokens are cached per scope).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace ringmaster::registry {

struct Credentials {
  std::string username;
  std::string password;  // or an access token, as `docker login` takes
  bool empty() const { return username.empty() && password.empty(); }
};

struct Platform {
  std::string os = "linux";
  std::string architecture = "amd64";
  std::string variant;           // "" = any
  std::string ToString() const;  // "linux/amd64", "linux/arm64/v8"
};

// A content descriptor of a manifest.
struct Descriptor {
  std::string media_type;
  std::string digest;  // "sha256:<64 hex>"
  int64_t size = 0;
};

// One platform's image manifest (OCI or Docker schema 2), as the registry
// served it: `raw` hashes to `digest`.
struct Manifest {
  std::string digest;      // "sha256:<hex>" of raw
  std::string media_type;  // application/vnd.oci.image.manifest.v1+json or Docker's
  std::string raw;
  Descriptor config;
  std::vector<Descriptor> layers;  // bottom first
  // When the reference named an index (a manifest list): the index's own
  // digest, "" otherwise.
  std::string index_digest;
};

// The parts of an image config a runtime needs.
struct ImageConfig {
  std::string os, architecture, variant;
  std::vector<std::string> env;  // "KEY=value"
  std::vector<std::string> entrypoint, cmd;
  std::string working_dir, user;
  std::vector<std::string> diff_ids;  // "sha256:<hex>" of each uncompressed layer, bottom first
};

// Parses an image config (application/vnd.oci.image.config.v1+json or
// Docker's container image JSON). InvalidArgument naming what is wrong.
StatusOr<ImageConfig> ParseImageConfig(std::string_view json);

// Where a registry is and how to reach it. `host` is the registry of an image
// reference ("registry.example:5000", "nvcr.io"); "docker.io" and "" mean
// Docker Hub, whose API is at registry-1.docker.io.
struct Endpoint {
  std::string host;
  bool plain_http = false;  // an insecure registry: http://, not https://
  std::string ca_file;      // PEM CAs to trust besides the system's ("" = the system's)
};

struct Options {
  std::chrono::milliseconds connect_timeout{10'000};
  std::chrono::milliseconds io_timeout{60'000};  // each read or write wait
  uint64_t max_manifest_bytes = 4 << 20;         // a longer manifest or config is refused
  // When set, every call of the Client (token fetches and redirects
  // included) ends by then: a registry that trickles bytes cannot hold a
  // caller longer than this however long each wait is.
  std::optional<std::chrono::steady_clock::time_point> deadline;
};

class Client {
 public:
  Client(Endpoint endpoint, Credentials credentials, Options options = {});
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // The manifest `reference` (a tag or "sha256:<hex>") of `repository`
  // ("library/ubuntu", "lab/torch") names, resolved for `platform` when it is
  // an index. Errors: NotFound (no such repository, tag or manifest),
  // Unauthenticated ("registry H: 401 Unauthorized ..." with the credentials
  // given, or none), PermissionDenied (403), FailedPrecondition (no manifest
  // for the platform: the message lists those the index has; a single
  // manifest whose config names another platform), DataLoss (the bytes do not
  // hash to the digest asked for), Unavailable/DeadlineExceeded (down, slow).
  StatusOr<Manifest> Resolve(const std::string& repository, const std::string& reference, const Platform& platform);

  // A blob read whole (an image config): at most Options::max_manifest_bytes,
  // verified against `digest`.
  StatusOr<std::string> FetchBlob(const std::string& repository, const std::string& digest);

  // Streams the blob `digest` to `sink` as it arrives (following redirects to
  // another host without the registry's Authorization), then checks its size
  // and SHA-256: DataLoss when they differ from the digest's (the sink has
  // seen the bytes by then: it must keep them provisional until this returns
  // Ok). A sink error or `cancelled()` ends the stream with that error.
  Status StreamBlob(const std::string& repository, const std::string& digest,
                    const std::function<Status(const char* data, size_t n)>& sink,
                    const std::function<bool()>& cancelled = {});

  const Endpoint& endpoint() const { return endpoint_; }

 private:
  struct Impl;
  Endpoint endpoint_;
  std::unique_ptr<Impl> impl_;
};

// Whether `registry` ("host[:port]", lower-case) matches one of `allowed`:
// "host[:port]" exactly, or "*.domain" (any host under it, any port). An
// empty list allows every registry.
bool RegistryAllowed(const std::vector<std::string>& allowed, const std::string& registry);

// The registry's error, worded for a user: "registry H: 401 Unauthorized:
// <the registry's own errors[].message>". Exposed for tests.
std::string DescribeRegistryError(std::string_view host, int status, std::string_view body);

// A `WWW-Authenticate` challenge: the scheme ("Bearer", "Basic") and its
// parameters (realm, service, scope, error), quoted strings unescaped.
struct Challenge {
  std::string scheme;
  std::vector<std::pair<std::string, std::string>> params;
  std::string Param(std::string_view name) const;  // "" when absent
};
StatusOr<Challenge> ParseChallenge(std::string_view header);

}  // namespace ringmaster::registry
