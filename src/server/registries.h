// Registries: where jobs' images come from when they are not the site's own
// (docs/containers.md, "Images from registries"). It keeps users' registry
// logins, and the site's (user 0, for every user's jobs), with the password
// sealed (SecretBox) and never logged or shown; and at submit it pins a job's
// image reference to one manifest digest (an index resolved for the nodes'
// platform) with the submitter's login, so every task and restart of the job
// runs the same bytes and a registry that refuses the user is a 4xx then.
// Thread-safe.
#pragma once

#include <chrono>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/status.h"
#include "files/blob_store.h"
#include "protocol/image_ref.h"
#include "registry/client.h"
#include "server/secret_box.h"
#include "store/meta_store.h"

namespace ringmaster::server {

struct RegistryOptions {
  std::string ca_file;                // PEM CAs for https registries, besides the system's (--registry-ca)
  std::vector<std::string> insecure;  // registries reached over plain http (--insecure-registry)
  registry::Platform platform;        // the nodes' platform: an index is resolved for it
  std::chrono::milliseconds timeout{15'000};  // each wait on a registry at submit
  std::chrono::milliseconds deadline{30'000};  // a whole pin, however the registry trickles
  // Registries jobs may name (--allowed-registries): "host[:port]" or
  // "*.domain" (any host under it); empty = any. Sites list theirs so that a
  // job cannot make the server or an agent reach hosts it should not.
  std::vector<std::string> allowed;
  // Pins in flight at once, in all and per user: each holds an API thread
  // while its registry answers, so a user cannot tie the API up with slow ones.
  int max_pins = 8;
  int max_pins_per_user = 2;
};


// A registry's name as logins and references use it: host[:port], lower-case;
// Docker Hub's aliases (index.docker.io, registry-1.docker.io, "") are "docker.io".
StatusOr<std::string> NormalizeRegistry(std::string_view host);

// The registry and the repository on it a reference names: Docker Hub's
// one-component names are under library/ ("ubuntu" -> docker.io, library/ubuntu).
struct RegistryImage {
  std::string registry;
  std::string repository;
};
RegistryImage RegistryImageOf(const protocol::ImageRef& ref);

class Registries {
 public:
  Registries(store::MetaStore* store, SecretBox box, RegistryOptions options, Clock* clock);

  // user_id 0: the site's login. The password is kept sealed.
  Status Login(int64_t user_id, const std::string& registry, const std::string& username,
               const std::string& password);
  Status Logout(int64_t user_id, const std::string& registry);
  // The logins of user_id (0: the site's), passwords left out.
  StatusOr<std::vector<store::RegistryCredential>> List(int64_t user_id);

  // What a job of user_id presents to `registry`: the user's own login, else
  // the site's, else none (anonymous). `whose` says which ("alice", "site", "").
  StatusOr<registry::Credentials> CredentialsFor(int64_t user_id, const std::string& registry, std::string* whose);

  registry::Endpoint EndpointFor(const std::string& registry) const;
  const RegistryOptions& options() const { return options_; }

  // This server's own read-only registry (api_registry_v2.cc), which serves
  // users' images from `files`: references to `name` are pinned from there.
  void ServeOwn(std::string name, files::BlobStore* files);
  std::string own_name() const;

  // `ref` (not the site's) resolved as user_id would pull it:
  // "host/repo[:tag]@sha256:<platform manifest>". InvalidArgument naming
  // `image` and the registry's answer (401, 404, another platform, ...);
  // Unavailable when the registry cannot be reached in time.
  StatusOr<std::string> Pin(int64_t user_id, const protocol::ImageRef& ref);

 private:
  static std::string Associated(int64_t user_id, const std::string& registry);
  StatusOr<std::string> PinOwn(int64_t user_id, const protocol::ImageRef& ref, const RegistryImage& at);

  store::MetaStore* const store_;
  const SecretBox box_;
  std::mutex pins_mu_;
  int pins_ = 0;                          // GUARDED_BY(pins_mu_)
  std::map<int64_t, int> pins_by_user_;  // GUARDED_BY(pins_mu_)
  const RegistryOptions options_;
  Clock* const clock_;
  mutable std::mutex own_mu_;
  std::string own_name_;                // GUARDED_BY(own_mu_)
  files::BlobStore* own_files_ = nullptr;  // GUARDED_BY(own_mu_)
};

// Users' images on this server's registry are "<user>/<name>": the two parts,
// or InvalidArgument.
StatusOr<std::pair<std::string, std::string>> SplitOwnRepository(const std::string& repository);

}  // namespace ringmaster::server
