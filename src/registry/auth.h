// Internal to the registry client: the authentication a registry asks for
// (anonymous, Basic, or bearer tokens from its realm), learnt from its 401
// answers, with tokens cached per scope until they expire. Credentials and
// tokens never go into a message. Thread-safe.
#pragma once

#include <chrono>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "http/client.h"
#include "registry/client.h"

namespace ringmaster::registry {

class Authenticator {
 public:
  // `registry` names the registry in messages; `realm_options` (timeouts,
  // CA file) serve the calls to a token realm.
  // The realm must be https unless `plain_http` (the registry's own scheme);
  // a token fetch ends by `deadline` when set.
  Authenticator(std::string registry, Credentials credentials, std::string ca_file, http::ClientOptions realm_options,
                bool plain_http = false, std::optional<std::chrono::steady_clock::time_point> deadline = {});

  struct Header {
    std::string value;          // "" = anonymous
    bool cached_token = false;  // a token from the cache, which may have expired at the registry
  };
  // The Authorization to send with a request to `repository`: a cached or
  // freshly fetched bearer token, Basic credentials, or none.
  StatusOr<Header> For(const std::string& repository);

  // The registry answered 401 (with `www_authenticate` and `body`) to a
  // request that carried `sent`. Ok when a retry may pass (a challenge learnt,
  // a stale token dropped); Unauthenticated otherwise.
  Status OnUnauthorized(const std::string& repository, const Header& sent, std::string_view www_authenticate,
                        std::string_view body);

  // "registry H: 401 Unauthorized (credentials of U): <registry's message>".
  Status Refused(std::string_view body) const;

 private:
  struct Token {
    std::string value;
    std::chrono::steady_clock::time_point expires;
  };
  StatusOr<Token> FetchToken(const Challenge& challenge, const std::string& scope);

  const std::string registry_;
  const Credentials credentials_;
  const std::string ca_file_;
  const http::ClientOptions realm_options_;
  const bool plain_http_;
  const std::optional<std::chrono::steady_clock::time_point> deadline_;
  std::mutex mu_;
  std::optional<Challenge> challenge_;   // GUARDED_BY(mu_): the registry's, once it asked
  std::map<std::string, Token> tokens_;  // GUARDED_BY(mu_), by scope
};

}  // namespace ringmaster::registry
