#include "server/registries.h"

#include <algorithm>
#include <cctype>

#include <fmt/format.h>

#include "common/log.h"
#include "server/user_images.h"

namespace ringmaster::server {

StatusOr<std::string> NormalizeRegistry(std::string_view host) {
  std::string h(host);
  std::transform(h.begin(), h.end(), h.begin(), [](unsigned char c) { return std::tolower(c); });
  if (h.empty() || h == "index.docker.io" || h == "registry-1.docker.io" || h == "docker.io") return std::string("docker.io");
  if (h.size() > 253) return InvalidArgument("registry: longer than 253 bytes");
  // host[:port]: a name's letters, digits, '.', '-', or an IPv4 address, and a port of digits.
  const size_t colon = h.rfind(':');
  const std::string name = h.substr(0, colon), port = colon == std::string::npos ? "" : h.substr(colon + 1);
  if (name.empty() || name.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789.-") != std::string::npos ||
      name.front() == '.' || name.front() == '-' || name.back() == '.' || name.back() == '-') {
    return InvalidArgument(fmt::format("registry: \"{}\" is not a host name or address (host[:port])", h));
  }
  if (colon != std::string::npos &&
      (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos ||
       std::stoi(port) == 0 || std::stoi(port) > 65535)) {
    return InvalidArgument(fmt::format("registry: \"{}\" has no valid port after ':'", h));
  }
  return h;
}

RegistryImage RegistryImageOf(const protocol::ImageRef& ref) {
  RegistryImage out;
  auto host = NormalizeRegistry(ref.registry);
  out.registry = host.ok() ? *host : ref.registry;
  out.repository = ref.repository;
  if (out.registry == "docker.io" && out.repository.find('/') == std::string::npos) {
    out.repository = "library/" + out.repository;
  }
  return out;
}

Registries::Registries(store::MetaStore* store, SecretBox box, RegistryOptions options, Clock* clock)
    : store_(store), box_(std::move(box)), options_(std::move(options)), clock_(clock) {}

std::string Registries::Associated(int64_t user_id, const std::string& registry) {
  return fmt::format("registry-login|{}|{}", user_id, registry);
}

Status Registries::Login(int64_t user_id, const std::string& registry, const std::string& username,
                         const std::string& password) {
  RM_ASSIGN_OR_RETURN(std::string host, NormalizeRegistry(registry));
  if (username.empty() || username.size() > 256) return InvalidArgument("username: 1 to 256 bytes");
  if (password.empty() || password.size() > 8192) return InvalidArgument("password: 1 to 8192 bytes");
  RM_ASSIGN_OR_RETURN(std::string sealed, box_.Seal(password, Associated(user_id, host)));
  return store_->PutRegistryCredential({user_id, host, username, sealed, clock_->NowMs()});
}

Status Registries::Logout(int64_t user_id, const std::string& registry) {
  RM_ASSIGN_OR_RETURN(std::string host, NormalizeRegistry(registry));
  Status st = store_->DeleteRegistryCredential(user_id, host);
  if (st.code() == StatusCode::kNotFound) return NotFound(fmt::format("registry: no login to {}", host));
  return st;
}

StatusOr<std::vector<store::RegistryCredential>> Registries::List(int64_t user_id) {
  RM_ASSIGN_OR_RETURN(auto list, store_->ListRegistryCredentials(user_id));
  for (auto& c : list) c.sealed.clear();
  return list;
}

StatusOr<registry::Credentials> Registries::CredentialsFor(int64_t user_id, const std::string& registry,
                                                           std::string* whose) {
  for (const int64_t owner : {user_id, int64_t{0}}) {
    if (owner == 0 && user_id == 0) continue;
    auto c = store_->GetRegistryCredential(owner, registry);
    if (!c.ok()) {
      if (c.status().code() == StatusCode::kNotFound) continue;
      return c.status();
    }
    auto password = box_.Unseal(c->sealed, Associated(owner, registry));
    if (!password.ok()) {
      // The key changed or the row was tampered with: the login is unusable, and says so.
      spdlog::warn("registries: the login of user {} to {} does not open with this server's key", owner, registry);
      return FailedPrecondition(fmt::format("the saved login to {} cannot be read with this server's secrets key; "
                                            "log in again (ringmaster registry login {})", registry, registry));
    }
    if (whose) *whose = owner == 0 ? "site" : c->username;
    return registry::Credentials{c->username, *password};
  }
  if (whose) whose->clear();
  return registry::Credentials{};
}

registry::Endpoint Registries::EndpointFor(const std::string& registry) const {
  registry::Endpoint e;
  e.host = registry;
  e.plain_http = std::find(options_.insecure.begin(), options_.insecure.end(), registry) != options_.insecure.end();
  e.ca_file = options_.ca_file;
  return e;
}

StatusOr<std::pair<std::string, std::string>> SplitOwnRepository(const std::string& repository) {
  const size_t slash = repository.find('/');
  if (slash == std::string::npos || slash == 0 || repository.find('/', slash + 1) != std::string::npos) {
    return InvalidArgument(fmt::format("\"{}\": users' images are USER/NAME", repository));
  }
  std::pair<std::string, std::string> out{repository.substr(0, slash), repository.substr(slash + 1)};
  RM_RETURN_IF_ERROR(user_images::ValidateName(out.second));
  return out;
}

void Registries::ServeOwn(std::string name, files::BlobStore* files) {
  std::lock_guard<std::mutex> l(own_mu_);
  auto host = NormalizeRegistry(name);
  own_name_ = host.ok() ? *host : name;
  own_files_ = files;
}

std::string Registries::own_name() const {
  std::lock_guard<std::mutex> l(own_mu_);
  return own_name_;
}

StatusOr<std::string> Registries::PinOwn(int64_t user_id, const protocol::ImageRef& ref, const RegistryImage& at) {
  files::BlobStore* files = nullptr;
  {
    std::lock_guard<std::mutex> l(own_mu_);
    files = own_files_;
  }
  const std::string missing = fmt::format("image: {}: not found on this server's registry", ref.ToString());
  auto parts = SplitOwnRepository(at.repository);
  if (!parts.ok()) return InvalidArgument(fmt::format("image: {}: {}", ref.ToString(), parts.status().message()));
  RM_ASSIGN_OR_RETURN(store::User user, store_->GetUser(user_id));
  // Another user's images are not even confirmed to exist.
  if (parts->first != user.name && user.role != store::Role::kAdmin) return InvalidArgument(missing);
  const std::string reference = ref.digest.empty() ? ref.Tag() : "sha256:" + ref.digest;
  auto digest = user_images::Resolve(*files, parts->first, parts->second, reference);
  if (!digest.ok()) {
    if (digest.status().code() == StatusCode::kNotFound) return InvalidArgument(missing);
    if (digest.status().code() == StatusCode::kInvalidArgument) {
      return InvalidArgument(fmt::format("image: {}: {}", ref.ToString(), digest.status().message()));
    }
    return digest.status().Annotate("image");
  }
  if (Status whole = user_images::CheckWhole(*files, parts->first, *digest); !whole.ok()) {
    return InvalidArgument(fmt::format("image: {}: {}", ref.ToString(), whole.message()));
  }
  std::string pinned = at.registry + "/" + at.repository;
  if (!ref.tag.empty()) pinned += ":" + ref.tag;
  return pinned + "@" + *digest;
}

StatusOr<std::string> Registries::Pin(int64_t user_id, const protocol::ImageRef& ref) {
  const RegistryImage at = RegistryImageOf(ref);
  if (!at.registry.empty() && at.registry == own_name()) return PinOwn(user_id, ref, at);
  if (!registry::RegistryAllowed(options_.allowed, at.registry)) {
    return InvalidArgument(fmt::format("image: registry {} is not one this site's jobs may use (the server's "
                                       "--allowed-registries)", at.registry));
  }
  {
    std::lock_guard<std::mutex> l(pins_mu_);
    if (pins_ >= options_.max_pins || pins_by_user_[user_id] >= options_.max_pins_per_user) {
      return Unavailable(fmt::format("image: {} registry lookups are in progress (at most {} per user); submit again "
                                     "in a moment", pins_, options_.max_pins_per_user));
    }
    ++pins_;
    ++pins_by_user_[user_id];
  }
  struct Release {
    Registries* r;
    int64_t user;
    ~Release() {
      std::lock_guard<std::mutex> l(r->pins_mu_);
      --r->pins_;
      if (--r->pins_by_user_[user] == 0) r->pins_by_user_.erase(user);
    }
  } release{this, user_id};
  std::string whose;
  RM_ASSIGN_OR_RETURN(registry::Credentials creds, CredentialsFor(user_id, at.registry, &whose));
  registry::Options o;
  o.connect_timeout = options_.timeout;
  o.io_timeout = options_.timeout;
  o.deadline = std::chrono::steady_clock::now() + options_.deadline;
  registry::Client client(EndpointFor(at.registry), creds, o);
  const std::string reference = ref.digest.empty() ? ref.Tag() : "sha256:" + ref.digest;
  auto manifest = client.Resolve(at.repository, reference, options_.platform);
  if (!manifest.ok()) {
    const Status& st = manifest.status();
    const std::string what = fmt::format("image: {}: {}", ref.ToString(), st.message());
    if (st.code() == StatusCode::kUnavailable || st.code() == StatusCode::kDeadlineExceeded) return Unavailable(what);
    return InvalidArgument(what);
  }
  std::string pinned = at.registry + "/" + at.repository;
  if (!ref.tag.empty()) pinned += ":" + ref.tag;
  return pinned + "@" + manifest->digest;
}

}  // namespace ringmaster::server
