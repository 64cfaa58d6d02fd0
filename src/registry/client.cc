// The registry client: requests, redirects, manifests and verified blobs.
#include "registry/client.h"

#include <limits>
#include <optional>

#include <fmt/format.h>

#include "common/crypto.h"
#include "common/json_limits.h"
#include "http/client.h"
#include "registry/auth.h"
#include "registry/manifest.h"

namespace ringmaster::registry {
namespace {

constexpr int kMaxRedirects = 5;
constexpr uint64_t kMaxErrorBody = 64 << 10;
constexpr size_t kChunk = 64 << 10;

bool IsRedirect(int status) { return status == 301 || status == 302 || status == 303 || status == 307 || status == 308; }

bool ValidRepository(std::string_view r) {
  if (r.empty() || r.size() > 255 || r.front() == '/' || r.back() == '/') return false;
  for (char c : r) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-' || c == '/')) return false;
  }
  return r.find("//") == std::string_view::npos && r.find("..") == std::string_view::npos;
}

bool ValidTag(std::string_view t) {
  if (t.empty() || t.size() > 128 || t.front() == '.' || t.front() == '-') return false;
  for (char c : t) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-')) return false;
  }
  return true;
}

std::string Named(const std::string& repository, const std::string& reference) {
  return repository + (IsSha256Digest(reference) ? "@" : ":") + reference;
}

// The API's host: Docker Hub's names mean registry-1.docker.io.
std::string ApiHost(const std::string& host) {
  if (host.empty() || host == "docker.io" || host == "index.docker.io") return "registry-1.docker.io";
  return host;
}

// An answer that is not what we asked for, as a Status of the right code.
Status AnswerError(const std::string& registry, int status, std::string_view body, const std::string& what) {
  std::string m = DescribeRegistryError(registry, status, body) + " (" + what + ")";
  switch (status) {
    case 401: return Unauthenticated(std::move(m));
    case 403: return PermissionDenied(std::move(m));
    case 404: return NotFound(std::move(m));
    case 400: return InvalidArgument(std::move(m));
    default: break;
  }
  if (status == 429 || status >= 500) return Unavailable(std::move(m));
  return Internal(std::move(m));
}

}  // namespace

struct Client::Impl {
  // An answer being read; `owner` is the client of a redirect's host, which
  // must outlive its stream (members are destroyed bottom up).
  struct Opened {
    std::unique_ptr<http::Client> owner;
    std::unique_ptr<http::ResponseStream> stream;
    const http::ClientResponse& head() const { return stream->head(); }
  };

  Impl(const Endpoint& endpoint, Credentials credentials, const Options& opts)
      : registry(endpoint.host.empty() ? "docker.io" : endpoint.host),
        options(opts),
        auth(registry, std::move(credentials), endpoint.ca_file, HttpOptions(0), endpoint.plain_http, opts.deadline),
        plain_http(endpoint.plain_http) {
    const std::string api_host = ApiHost(endpoint.host);
    auto target = http::ParseClientUrl((endpoint.plain_http ? "http://" : "https://") + api_host);
    if (!target.ok()) {
      bad_endpoint = InvalidArgument(fmt::format("registry '{}': not a host[:port]", Printable(registry, 200)));
      return;
    }
    target->ca_file = endpoint.ca_file;
    target->host_header = api_host;
    api_origin = target->Describe();
    api = std::make_unique<http::Client>(*target, HttpOptions(4));
  }

  http::ClientOptions HttpOptions(size_t max_idle) const {
    http::ClientOptions o;
    o.connect_timeout = options.connect_timeout;
    o.io_timeout = options.io_timeout;
    o.max_idle = max_idle;
    o.prefix = fmt::format("registry {}: ", registry);
    o.untrusted_hint = "; give the registry's CA to the node, or name the registry insecure if it speaks plain HTTP";
    return o;
  }

  http::CallOptions Call(const std::string& what, const std::function<bool()>& cancelled) const {
    http::CallOptions c;
    c.what = what;
    c.io_timeout = options.io_timeout;
    c.deadline = options.deadline;
    if (cancelled) {
      c.poll = std::chrono::milliseconds(200);
      c.stop = cancelled;
    }
    return c;
  }

  // GET `path` of the registry for `repository`, authenticated as it asks
  // and following redirects; the answer's head read, whatever its status.
  StatusOr<Opened> Get(const std::string& repository, const std::string& path, const std::string& accept,
                       const std::string& what, const std::function<bool()>& cancelled) {
    RM_RETURN_IF_ERROR(bad_endpoint);
    for (int attempt = 0;; ++attempt) {
      RM_ASSIGN_OR_RETURN(Authenticator::Header authorization, auth.For(repository));
      http::ClientRequest req;
      req.target = path;
      if (!accept.empty()) req.headers.emplace_back("Accept", accept);
      if (!authorization.value.empty()) req.headers.emplace_back("Authorization", authorization.value);
      RM_ASSIGN_OR_RETURN(auto stream, api->Open(req, Call("GET " + path, cancelled)));
      Opened opened{nullptr, std::move(stream)};
      if (IsRedirect(opened.head().status)) return Follow(std::move(opened), req, cancelled, what);
      if (opened.head().status != 401) return opened;
      const std::string body = ReadErrorBody(opened);
      if (attempt >= 2) return auth.Refused(body);
      RM_RETURN_IF_ERROR(auth.OnUnauthorized(repository, authorization, opened.head().Header("WWW-Authenticate"), body));
    }
  }

  // Follows up to kMaxRedirects redirects; the registry's Authorization goes
  // only to the registry itself.
  StatusOr<Opened> Follow(Opened opened, const http::ClientRequest& first, const std::function<bool()>& cancelled,
                          const std::string& what) {
    for (int hops = 0; IsRedirect(opened.head().status); ++hops) {
      if (hops >= kMaxRedirects) {
        return Unavailable(fmt::format("registry {}: more than {} redirects ({})", registry, kMaxRedirects, what));
      }
      const std::string location = opened.head().Header("Location");
      http::ClientRequest req;
      std::unique_ptr<http::Client> owner;
      if (!location.empty() && location.front() == '/') {
        req = first;  // the same host: its Authorization too
        req.target = location;
      } else {
        const size_t scheme_end = location.find("://");
        const size_t path_start = scheme_end == std::string::npos ? std::string::npos : location.find('/', scheme_end + 3);
        auto target = http::ParseClientUrl(location.substr(0, path_start));
        // Only to https (http when the registry itself is plain), never to a
        // unix socket: a registry must not point the node at its local services.
        if (target.ok() && !(target->transport == http::ClientTarget::Transport::kTls ||
                             (plain_http && target->transport == http::ClientTarget::Transport::kTcp))) {
          return Unavailable(fmt::format("registry {}: a redirect to '{}', which is not https ({})", registry,
                                         Printable(location, 200), what));
        }
        if (!target.ok()) {
          return Unavailable(fmt::format("registry {}: a redirect to '{}', not a URL ({})", registry,
                                         Printable(location, 200), what));
        }
        target->ca_file = api->target().ca_file;
        req.target = path_start == std::string::npos ? "/" : location.substr(path_start);
        if (target->Describe() == api_origin) {
          req.headers = first.headers;
        } else {
          owner = std::make_unique<http::Client>(*target, HttpOptions(0));
        }
      }
      opened.stream.reset();  // before its client, which `opened.owner` may be
      http::Client* client = owner ? owner.get() : api.get();
      RM_ASSIGN_OR_RETURN(auto stream, client->Open(req, Call("GET " + what + " (redirected)", cancelled)));
      opened.owner = std::move(owner);
      opened.stream = std::move(stream);
    }
    return opened;
  }

  // A failed answer's body, capped: only its message is wanted.
  static std::string ReadErrorBody(Opened& opened) {
    std::string body;
    char buf[4096];
    while (body.size() < kMaxErrorBody) {
      auto n = opened.stream->ReadSome(buf, sizeof(buf));
      if (!n.ok() || *n == 0) break;
      body.append(buf, *n);
    }
    return body;
  }

  // The manifest `reference` names, as served: its bytes verified against the
  // digest asked for, or the registry's.
  struct Fetched {
    std::string raw, content_type, digest;
  };
  StatusOr<Fetched> FetchManifest(const std::string& repository, const std::string& reference) {
    const std::string what = "manifest " + Named(repository, reference);
    const std::string accept = fmt::format("{}, {}, {}, {}", kOciIndex, kOciManifest, kDockerList, kDockerManifest);
    RM_ASSIGN_OR_RETURN(Opened opened, Get(repository, fmt::format("/v2/{}/manifests/{}", repository, reference),
                                           accept, what, {}));
    const int status = opened.head().status;
    if (status != 200) return AnswerError(registry, status, ReadErrorBody(opened), what);
    if (opened.head().content_length && *opened.head().content_length > options.max_manifest_bytes) {
      return FailedPrecondition(fmt::format("registry {}: {} is {} bytes, more than the limit of {}", registry, what,
                                            *opened.head().content_length, options.max_manifest_bytes));
    }
    Fetched f;
    auto raw = opened.stream->ReadAll(options.max_manifest_bytes);
    if (!raw.ok()) {
      if (raw.status().code() != StatusCode::kInternal) return raw.status();
      return FailedPrecondition(
          fmt::format("registry {}: {} is more than the limit of {} bytes", registry, what, options.max_manifest_bytes));
    }
    f.raw = std::move(*raw);
    f.content_type = opened.head().Header("Content-Type");
    const std::string computed = "sha256:" + Sha256Hex(f.raw);
    std::string expected;
    if (IsSha256Digest(reference)) {
      expected = reference;
    } else if (const std::string header = opened.head().Header("Docker-Content-Digest"); IsSha256Digest(header)) {
      expected = header;
    }
    if (!expected.empty() && expected != computed) {
      return DataLoss(fmt::format("registry {}: {} arrived with {}, not {}", registry, what, computed, expected));
    }
    f.digest = computed;
    return f;
  }

  // Streams a blob to `sink`, verified; `limit` bounds its size.
  Status Stream(const std::string& repository, const std::string& digest,
                const std::function<Status(const char*, size_t)>& sink, const std::function<bool()>& cancelled,
                uint64_t limit) {
    if (!ValidRepository(repository)) {
      return InvalidArgument(fmt::format("'{}' is not a repository name", Printable(repository, 200)));
    }
    if (!IsSha256Digest(digest)) return InvalidArgument(fmt::format("'{}' is not a sha256 digest", Printable(digest, 100)));
    const std::string what = fmt::format("blob {} of {}", digest, repository);
    RM_ASSIGN_OR_RETURN(Opened opened, Get(repository, fmt::format("/v2/{}/blobs/{}", repository, digest), "", what,
                                           cancelled));
    const int status = opened.head().status;
    if (status != 200) return AnswerError(registry, status, ReadErrorBody(opened), what);
    const std::optional<uint64_t> announced = opened.head().content_length;
    if (announced && *announced > limit) {
      return FailedPrecondition(fmt::format("registry {}: {} is {} bytes, more than the limit of {}", registry, what,
                                            *announced, limit));
    }
    Sha256 hash;
    uint64_t total = 0;
    std::vector<char> buf(kChunk);
    while (true) {
      if (cancelled && cancelled()) return Aborted(fmt::format("registry {}: {}: cancelled", registry, what));
      RM_ASSIGN_OR_RETURN(size_t n, opened.stream->ReadSome(buf.data(), buf.size()));
      if (n == 0) break;
      total += n;
      if (total > limit) {
        return FailedPrecondition(fmt::format("registry {}: {} is more than the limit of {} bytes", registry, what, limit));
      }
      hash.Update(std::string_view(buf.data(), n));
      RM_RETURN_IF_ERROR(sink(buf.data(), n));
    }
    if (announced && total != *announced) {
      return DataLoss(fmt::format("registry {}: {} arrived with {} bytes, not the {} announced", registry, what, total,
                                  *announced));
    }
    const std::string got = "sha256:" + hash.FinishHex();
    if (got != digest) return DataLoss(fmt::format("registry {}: {} arrived with {}", registry, what, got));
    return Status::Ok();
  }

  const std::string registry;  // as the user named it, for messages
  const Options options;
  Authenticator auth;
  Status bad_endpoint;
  std::string api_origin;            // "https://host:port"
  bool plain_http = false;           // the registry speaks http: so may its redirects and realm
  std::unique_ptr<http::Client> api;  // null when bad_endpoint
};

Client::Client(Endpoint endpoint, Credentials credentials, Options options)
    : endpoint_(std::move(endpoint)), impl_(std::make_unique<Impl>(endpoint_, std::move(credentials), options)) {}

Client::~Client() = default;

StatusOr<Manifest> Client::Resolve(const std::string& repository, const std::string& reference,
                                   const Platform& platform) {
  if (!ValidRepository(repository)) {
    return InvalidArgument(fmt::format("'{}' is not a repository name", Printable(repository, 200)));
  }
  if (!ValidTag(reference) && !IsSha256Digest(reference)) {
    return InvalidArgument(fmt::format("'{}' is neither a tag nor a sha256 digest", Printable(reference, 200)));
  }
  const std::string& registry = impl_->registry;
  RM_ASSIGN_OR_RETURN(Impl::Fetched top, impl_->FetchManifest(repository, reference));
  auto doc = ParseManifestDocument(top.raw, top.content_type);
  const std::string what = fmt::format("registry {}: manifest {}", registry, Named(repository, reference));
  if (!doc.ok()) return doc.status().Annotate(what);
  Manifest m;
  if (doc->is_index) {
    auto chosen = ChoosePlatform(doc->entries, platform);
    if (!chosen.ok()) return chosen.status().Annotate(what);
    RM_ASSIGN_OR_RETURN(Impl::Fetched one, impl_->FetchManifest(repository, chosen->digest));
    auto inner = ParseManifestDocument(one.raw, one.content_type);
    const std::string inner_what = fmt::format("registry {}: manifest {}@{}", registry, repository, one.digest);
    if (!inner.ok()) return inner.status().Annotate(inner_what);
    if (inner->is_index) return InvalidArgument(inner_what + ": an index inside an index");
    m = std::move(inner->manifest);
    m.digest = one.digest;
    m.raw = std::move(one.raw);
    m.index_digest = top.digest;
    return m;
  }
  m = std::move(doc->manifest);
  m.digest = top.digest;
  m.raw = std::move(top.raw);
  // A single manifest says its platform only in its config.
  RM_ASSIGN_OR_RETURN(std::string config_json, FetchBlob(repository, m.config.digest));
  auto config = ParseImageConfig(config_json);
  if (!config.ok()) return config.status().Annotate(what);
  if (config->os != platform.os || config->architecture != platform.architecture) {
    Platform has{.os = config->os, .architecture = config->architecture, .variant = config->variant};
    return FailedPrecondition(fmt::format("{}: the image is for {}, not {}", what, has.ToString(), platform.ToString()));
  }
  return m;
}

StatusOr<std::string> Client::FetchBlob(const std::string& repository, const std::string& digest) {
  std::string out;
  RM_RETURN_IF_ERROR(impl_->Stream(
      repository, digest,
      [&](const char* data, size_t n) {
        out.append(data, n);
        return Status::Ok();
      },
      {}, impl_->options.max_manifest_bytes));
  return out;
}

Status Client::StreamBlob(const std::string& repository, const std::string& digest,
                          const std::function<Status(const char* data, size_t n)>& sink,
                          const std::function<bool()>& cancelled) {
  return impl_->Stream(repository, digest, sink, cancelled, std::numeric_limits<uint64_t>::max());
}

}  // namespace ringmaster::registry
