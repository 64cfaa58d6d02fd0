// Basic and bearer-token authentication against a registry.
#include "registry/auth.h"

#include <fmt/format.h>

#include "common/crypto.h"
#include "common/json_limits.h"
#include "common/strings.h"

namespace ringmaster::registry {
namespace {

constexpr uint64_t kMaxTokenAnswer = 1 << 20;
constexpr std::chrono::seconds kDefaultTokenLife{60};
// A token is not sent in its last seconds, so it cannot expire in flight.
constexpr std::chrono::seconds kTokenMargin{5};

bool IEquals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i]))) return false;
  }
  return true;
}

std::string Scope(const std::string& repository) { return "repository:" + repository + ":pull"; }

// ": <the server's own words>", or "" when it said nothing useful.
std::string Words(int status, std::string_view body) {
  const size_t bare = DescribeRegistryError("", status, "").size();
  return DescribeRegistryError("", status, body).substr(bare);
}

}  // namespace

Authenticator::Authenticator(std::string registry, Credentials credentials, std::string ca_file,
                             http::ClientOptions realm_options, bool plain_http,
                             std::optional<std::chrono::steady_clock::time_point> deadline)
    : registry_(std::move(registry)),
      credentials_(std::move(credentials)),
      ca_file_(std::move(ca_file)),
      realm_options_(std::move(realm_options)),
      plain_http_(plain_http),
      deadline_(deadline) {}

Status Authenticator::Refused(std::string_view body) const {
  const std::string who = credentials_.empty()
                              ? std::string("no credentials")
                              : fmt::format("credentials of {}", Printable(credentials_.username, 100));
  return Unauthenticated(fmt::format("{} ({}){}", DescribeRegistryError(registry_, 401, ""), who, Words(401, body)));
}

StatusOr<Authenticator::Header> Authenticator::For(const std::string& repository) {
  const std::string scope = Scope(repository);
  std::optional<Challenge> challenge;
  {
    std::lock_guard l(mu_);
    auto it = tokens_.find(scope);
    if (it != tokens_.end()) {
      if (std::chrono::steady_clock::now() + kTokenMargin < it->second.expires) {
        return Header{.value = "Bearer " + it->second.value, .cached_token = true};
      }
      tokens_.erase(it);
    }
    challenge = challenge_;
  }
  if (!challenge) return Header{};
  if (IEquals(challenge->scheme, "Basic")) {
    if (credentials_.empty()) return Header{};
    return Header{.value = "Basic " + Base64Encode(credentials_.username + ":" + credentials_.password)};
  }
  RM_ASSIGN_OR_RETURN(Token token, FetchToken(*challenge, scope));
  Header h{.value = "Bearer " + token.value};
  std::lock_guard l(mu_);
  tokens_[scope] = std::move(token);
  return h;
}

Status Authenticator::OnUnauthorized(const std::string& repository, const Header& sent,
                                     std::string_view www_authenticate, std::string_view body) {
  if (sent.cached_token) {
    // Expired or revoked at the registry before our clock said so: fetch anew.
    std::lock_guard l(mu_);
    tokens_.erase(Scope(repository));
    return Status::Ok();
  }
  if (!sent.value.empty()) return Refused(body);
  auto challenge = ParseChallenge(www_authenticate);
  if (!challenge.ok()) {
    return Status(StatusCode::kUnauthenticated,
                  Refused(body).message() + " (its WWW-Authenticate is unreadable: " + challenge.status().message() + ")");
  }
  if (IEquals(challenge->scheme, "Basic")) {
    if (credentials_.empty()) return Refused(body);
  } else if (IEquals(challenge->scheme, "Bearer")) {
    if (challenge->Param("realm").empty()) {
      return Status(StatusCode::kUnauthenticated, Refused(body).message() + " (its Bearer challenge has no realm)");
    }
  } else {
    return Status(StatusCode::kUnauthenticated,
                  fmt::format("{} (it asks for {} authentication, which this client does not speak)",
                              Refused(body).message(), Printable(challenge->scheme, 40)));
  }
  std::lock_guard l(mu_);
  challenge_ = std::move(*challenge);
  return Status::Ok();
}

StatusOr<Authenticator::Token> Authenticator::FetchToken(const Challenge& challenge, const std::string& scope) {
  const std::string realm = challenge.Param("realm");
  const size_t scheme_end = realm.find("://");
  const size_t path_start = scheme_end == std::string::npos ? std::string::npos : realm.find('/', scheme_end + 3);
  const std::string origin = realm.substr(0, path_start);
  auto target = http::ParseClientUrl(origin);
  if (!target.ok()) {
    return Unauthenticated(fmt::format("registry {}: its token realm '{}' is not a URL", registry_, Printable(realm, 200)));
  }
  // The login goes only over https (http when the registry itself is plain,
  // or to a token service on this machine's loopback), never to a unix socket.
  const bool loopback = target->host == "localhost" || target->host == "::1" || target->host.rfind("127.", 0) == 0;
  if (!(target->transport == http::ClientTarget::Transport::kTls ||
        ((plain_http_ || loopback) && target->transport == http::ClientTarget::Transport::kTcp))) {
    return Unauthenticated(fmt::format("registry {}: its token realm '{}' is not https; no login is sent there",
                                       registry_, Printable(realm, 200)));
  }
  target->ca_file = ca_file_;
  http::ClientRequest req;
  req.target = path_start == std::string::npos ? "/" : realm.substr(path_start);
  req.target += req.target.find('?') == std::string::npos ? '?' : '&';
  if (const std::string service = challenge.Param("service"); !service.empty()) {
    req.target += "service=" + PercentEncode(service) + "&";
  }
  req.target += "scope=" + PercentEncode(scope);
  if (!credentials_.empty()) {
    req.headers.emplace_back("Authorization",
                             "Basic " + Base64Encode(credentials_.username + ":" + credentials_.password));
  }
  http::ClientOptions options = realm_options_;
  options.prefix = fmt::format("registry {}: token realm: ", registry_);
  http::Client client(*target, options);
  http::CallOptions call;
  call.what = "GET " + origin + " (token)";
  call.io_timeout = realm_options_.io_timeout;
  call.deadline = deadline_;
  call.max_body = kMaxTokenAnswer;
  RM_ASSIGN_OR_RETURN(http::ClientResponse resp, client.Do(req, call));
  if (resp.status == 401 || resp.status == 403) {
    return Status(StatusCode::kUnauthenticated, fmt::format("{}: the token server {} refused them ({}){}",
                                                            Refused("").message(), origin, resp.status,
                                                            Words(resp.status, resp.body)));
  }
  if (resp.status != 200) {
    return Unavailable(DescribeRegistryError(registry_, resp.status, resp.body) + " (from its token server " + origin + ")");
  }
  auto json = ParseJson(resp.body, {.max_bytes = kMaxTokenAnswer, .max_depth = 16}, "token answer");
  if (!json.ok() || !json->is_object()) {
    return Unavailable(fmt::format("registry {}: the token server {} answered something that is not a JSON object",
                                   registry_, origin));
  }
  Token t;
  for (const char* key : {"token", "access_token"}) {
    auto it = json->find(key);
    if (it != json->end() && it->is_string() && !it->get<std::string>().empty()) {
      t.value = it->get<std::string>();
      break;
    }
  }
  if (t.value.empty() || !IsDisplayText(t.value) || t.value.find(' ') != std::string::npos) {
    return Unavailable(fmt::format("registry {}: the token server {} answered no usable token", registry_, origin));
  }
  std::chrono::seconds life = kDefaultTokenLife;
  auto exp = json->find("expires_in");
  if (exp != json->end() && exp->is_number_integer() && exp->get<int64_t>() > 0) {
    life = std::chrono::seconds(std::min<int64_t>(exp->get<int64_t>(), 24 * 3600));
  }
  t.expires = std::chrono::steady_clock::now() + life;
  return t;
}

}  // namespace ringmaster::registry
