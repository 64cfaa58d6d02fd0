#include "server/auth.h"

#include <arpa/inet.h>
#include <openssl/crypto.h>

#include <algorithm>
#include <cstring>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "common/crypto.h"
#include "common/json_limits.h"
#include "common/units.h"

namespace ringmaster::server {
namespace {

constexpr size_t kMaxTrackedNames = 10'000;
constexpr int kMaxConcurrentLogins = 4;

bool UserRoute(const std::string& access) {
  return access == access::kRead || access == access::kSubmit || access == access::kAdmin || access == access::kLogin ||
         access == access::kProxy;
}

}  // namespace

const char* ScopeName(Scope s) {
  switch (s) {
    case Scope::kRead: return "read";
    case Scope::kSubmit: return "submit";
    case Scope::kAdmin: return "admin";
    case Scope::kAgent: return "agent";
    case Scope::kMetrics: return "metrics";
  }
  return "?";
}

std::optional<Scope> ParseScope(const std::string& s) {
  for (Scope x : {Scope::kRead, Scope::kSubmit, Scope::kAdmin, Scope::kAgent, Scope::kMetrics}) {
    if (s == ScopeName(x)) return x;
  }
  return std::nullopt;
}

StatusOr<std::optional<std::string>> CookieValue(const http::Request& req, std::string_view name) {
  // RFC 6265 section 5.4's "name=value; name2=value2", as browsers send it,
  // read leniently: any Cookie header, stray spaces, empty pairs, quoted values.
  std::optional<std::string> found;
  for (const auto& [key, header] : req.headers) {
    if (key != "cookie") continue;
    std::string_view rest = header;
    while (!rest.empty()) {
      const size_t semi = rest.find(';');
      std::string_view pair = rest.substr(0, semi);
      rest = semi == std::string_view::npos ? std::string_view() : rest.substr(semi + 1);
      const size_t eq = pair.find('=');
      if (eq == std::string_view::npos) continue;
      auto trim = [](std::string_view v) {
        while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
        while (!v.empty() && (v.back() == ' ' || v.back() == '\t')) v.remove_suffix(1);
        return v;
      };
      if (trim(pair.substr(0, eq)) != name) continue;
      std::string_view value = trim(pair.substr(eq + 1));
      if (value.size() >= 2 && value.front() == '"' && value.back() == '"') value = value.substr(1, value.size() - 2);
      if (found && *found != value) return InvalidArgument(fmt::format("Cookie: {} given twice, with different values", name));
      found = std::string(value);
    }
  }
  return found;
}

const Caller& CallerOf(const http::Request& req) {
  static const Caller kNobody;
  const Caller* c = std::any_cast<Caller>(&req.principal.data);
  return c ? *c : kNobody;
}

// ---------------------------------------------------------------------------

LoginLimiter::LoginLimiter(Clock* clock, LoginLimits limits) : clock_(clock), limits_(limits) {}

void LoginLimiter::PruneLocked(int64_t now) {
  // Bounded memory whatever names or addresses a client sprays.
  for (auto it = addresses_.begin(); it != addresses_.end();) {
    auto& q = it->second;
    while (!q.empty() && now - q.front() > limits_.address_window_ms) q.pop_front();
    it = q.empty() ? addresses_.erase(it) : std::next(it);
  }
  for (auto it = users_.begin(); it != users_.end();) {
    const bool stale = it->second.locked_until_ms <= now && now - it->second.last_ms > limits_.max_lock_ms;
    it = stale ? users_.erase(it) : std::next(it);
  }
  // Bounded whatever is sprayed: forget the least recently failed names that
  // are not locked (a lock is never forgotten early), then addresses.
  while (users_.size() > kMaxTrackedNames) {
    auto oldest = users_.end();
    for (auto it = users_.begin(); it != users_.end(); ++it) {
      if (it->second.locked_until_ms > now) continue;
      if (oldest == users_.end() || it->second.last_ms < oldest->second.last_ms) oldest = it;
    }
    if (oldest == users_.end()) break;
    users_.erase(oldest);
  }
  for (auto it = known_.begin(); it != known_.end();) {
    it = now - it->second > limits_.known_ms ? known_.erase(it) : std::next(it);
  }
  while (known_.size() > kMaxTrackedNames) {
    auto oldest = known_.begin();
    for (auto it = known_.begin(); it != known_.end(); ++it) {
      if (it->second < oldest->second) oldest = it;
    }
    known_.erase(oldest);
  }
  while (addresses_.size() > kMaxTrackedNames) {
    auto oldest = addresses_.begin();
    for (auto it = addresses_.begin(); it != addresses_.end(); ++it) {
      if (it->second.back() < oldest->second.back()) oldest = it;
    }
    addresses_.erase(oldest);
  }
}

std::string LoginLimiter::AddressKey(const std::string& address) {
  // One host can use many addresses: every loopback address is one key, and an
  // IPv6 address counts as its /64.
  in_addr a4{};
  if (inet_pton(AF_INET, address.c_str(), &a4) == 1) {
    return (ntohl(a4.s_addr) >> 24) == 127 ? "127.0.0.0/8" : address;
  }
  in6_addr a6{};
  if (inet_pton(AF_INET6, address.c_str(), &a6) == 1) {
    if (IN6_IS_ADDR_LOOPBACK(&a6)) return "127.0.0.0/8";
    char buf[INET6_ADDRSTRLEN] = {0};
    std::memset(a6.s6_addr + 8, 0, 8);
    inet_ntop(AF_INET6, &a6, buf, sizeof buf);
    return std::string(buf) + "/64";
  }
  return address;
}

Status LoginLimiter::Check(const std::string& user, const std::string& address_in) {
  std::lock_guard<std::mutex> l(mu_);
  const int64_t now = clock_->NowMs();
  PruneLocked(now);
  const std::string address = AddressKey(address_in);
  auto a = addresses_.find(address);
  if (a != addresses_.end() && static_cast<int>(a->second.size()) >= limits_.address_failures &&
      !known_.contains({address, user})) {
    const int64_t wait = a->second.front() + limits_.address_window_ms - now;
    return ResourceExhausted(fmt::format("too many failed logins from {}: try again in {}", address,
                                         FormatDuration(std::max<int64_t>(wait, 1000))));
  }
  auto u = users_.find(NameKeyLocked(user, address));
  if (u != users_.end() && u->second.locked_until_ms > now) {
    return ResourceExhausted(fmt::format("too many failed logins for user \"{}\": try again in {}", user,
                                         FormatDuration(std::max<int64_t>(u->second.locked_until_ms - now, 1000))));
  }
  return Status::Ok();
}

// A name's failures count apart at each address it has logged in from, so a
// stranger guessing it elsewhere locks the name there, not at its owner's own
// address (where the owner's own failures still lock it).
std::string LoginLimiter::NameKeyLocked(const std::string& user, const std::string& address) const {
  return known_.contains({address, user}) ? user + '\n' + address : user;
}

bool LoginLimiter::Failed(const std::string& user, const std::string& address) {
  std::lock_guard<std::mutex> l(mu_);
  const int64_t now = clock_->NowMs();
  auto& failures = addresses_[AddressKey(address)];
  failures.push_back(now);
  bool locked = static_cast<int>(failures.size()) == limits_.address_failures;
  UserState& u = users_[NameKeyLocked(user, AddressKey(address))];
  u.last_ms = now;
  if (++u.failures >= limits_.user_failures) {
    const int extra = std::min(u.failures - limits_.user_failures, 20);
    u.locked_until_ms = now + std::min(limits_.max_lock_ms, limits_.lock_ms << extra);
    locked = true;
  }
  return locked;
}

void LoginLimiter::Succeeded(const std::string& user, const std::string& address) {
  std::lock_guard<std::mutex> l(mu_);
  users_.erase(NameKeyLocked(user, AddressKey(address)));
  users_.erase(user);
  known_[{AddressKey(address), user}] = clock_->NowMs();
}

// ---------------------------------------------------------------------------

Auth::Auth(store::MetaStore* store, Clock* clock, AuthOptions options)
    : store_(store),
      clock_(clock),
      options_(options),
      csrf_key_(options.csrf_key.empty() ? RandomHex(32) : options.csrf_key),
      limiter_(clock, options.login),
      dummy_hash_([] {
        auto h = HashPassword(RandomHex(16));
        return h.ok() ? *h : std::string();
      }()) {}

Status Auth::CheckNode(const Caller& caller, const std::string& node_name) {
  if (caller.scope != Scope::kAgent) return PermissionDenied("this call needs an agent token");
  if (caller.token.node != node_name) {
    return PermissionDenied(fmt::format("this agent token acts for node \"{}\", not \"{}\"", caller.token.node, node_name));
  }
  return Status::Ok();
}

StatusOr<Caller> Auth::FromBearer(const std::string& secret) {
  const std::string hash = Sha256Hex(secret);
  const uint64_t version = store_->AuthVersion();  // before the reads: see MetaStore::AuthVersion
  std::optional<Caller> caller;
  {
    std::lock_guard<std::mutex> l(known_mu_);
    auto it = known_.find(hash);
    if (it != known_.end() && it->second.version == version) caller = it->second.caller;
  }
  if (!caller) {
    RM_ASSIGN_OR_RETURN(caller, LookUpBearer(hash));
    if (caller->token.session) caller->csrf = Csrf(secret);
    std::lock_guard<std::mutex> l(known_mu_);
    if (known_.size() >= kMaxKnown) known_.clear();
    known_[hash] = Known{version, *caller};
  }
  // Expired rows go when next presented (and with their user's next login).
  if (caller->token.expires_ms != 0 && clock_->NowMs() >= caller->token.expires_ms) {
    (void)store_->DeleteToken(caller->token.id);
    return Unauthenticated(caller->token.session ? "session expired: log in again" : "token expired");
  }
  return std::move(*caller);
}

Status Auth::Recheck(const Caller& caller) {
  RM_ASSIGN_OR_RETURN(store::User user, store_->GetUser(caller.user.id));
  if (user.disabled) return Unauthenticated(fmt::format("user {} is disabled", user.name));
  if (caller.token.hash.empty()) return Status::Ok();  // a password login: the user is the credential
  auto token = store_->GetTokenByHash(caller.token.hash);
  if (token.ok() && token->id == caller.token.id) return Status::Ok();
  if (token.ok() || token.status().code() == StatusCode::kNotFound) return Unauthenticated("invalid or revoked token");
  return token.status();
}

StatusOr<Caller> Auth::LookUpBearer(const std::string& hash) {
  auto token = store_->GetTokenByHash(hash);
  if (!token.ok()) {
    if (token.status().code() == StatusCode::kNotFound) return Unauthenticated("invalid or revoked token");
    return token.status();
  }
  RM_ASSIGN_OR_RETURN(store::User user, store_->GetUser(token->user_id));
  if (user.disabled) return Unauthenticated(fmt::format("user {} is disabled", user.name));
  auto scope = ParseScope(token->scope);
  if (!scope) return Unauthenticated("token has an unknown scope");
  // A scope is never more than the user's role allows (should the role change).
  if (*scope == Scope::kAdmin && user.role != store::Role::kAdmin) scope = Scope::kSubmit;
  if (*scope == Scope::kMetrics && user.role != store::Role::kAdmin) return PermissionDenied("this metrics token's user is no longer an admin");
  return Caller{std::move(user), std::move(*token), *scope};
}

StatusOr<Caller> Auth::FromPassword(const http::Request& req, const std::string& basic) {
  const std::string decoded = Base64Decode(basic);
  const size_t colon = decoded.find(':');
  return Login(req, decoded.substr(0, colon),
               colon == std::string::npos ? std::nullopt : std::optional<std::string>(decoded.substr(colon + 1)), "login");
}

StatusOr<Caller> Auth::Login(const http::Request& req, const std::string& name,
                             const std::optional<std::string>& password, const std::string& action) {
  const std::string shown = name.substr(0, 64);
  // Locked out: refused without a verification or an audit entry (the lock
  // itself was audited), so a flood costs neither CPU nor database writes.
  if (Status st = limiter_.Check(shown, req.remote); !st.ok()) return st;
  // Each verification costs ~30 ms of CPU on an API thread: a few at a time,
  // so a flood of logins cannot take the pool from everyone else.
  struct Slot {
    std::atomic<int>& n;
    explicit Slot(std::atomic<int>& c) : n(c) { ++n; }
    ~Slot() { --n; }
  } slot(verifying_);
  if (verifying_ > kMaxConcurrentLogins) return Unavailable("too many logins in progress: try again shortly");
  auto user = store_->GetUserByName(name);
  const bool has_password = user.ok() && !user->password_hash.empty();
  // Unknown users and token-only users cost one argon2 verification too.
  const bool good =
      VerifyPassword(has_password ? user->password_hash : dummy_hash_, password.value_or("")) && has_password && password;
  if (!good) {
    const bool locked = limiter_.Failed(shown, req.remote);
    Audit(req, "", action, "user " + shown, "failed",
          locked ? "wrong user name or password; further logins locked for a while" : "wrong user name or password");
    return Unauthenticated("wrong user name or password");
  }
  if (user->disabled) {
    Audit(req, user->name, action, "user " + user->name, "denied", "user disabled");
    return Unauthenticated(fmt::format("user {} is disabled", user->name));
  }
  limiter_.Succeeded(shown, req.remote);
  Audit(req, user->name, action, "user " + user->name, "ok");
  const Scope scope = user->role == store::Role::kAdmin ? Scope::kAdmin : Scope::kSubmit;
  return Caller{std::move(*user), store::Token{}, scope};
}

StatusOr<Caller> Auth::LoginWithToken(const http::Request& req, const std::string& secret) {
  // Guesses are counted per address; the per-name lock is per secret, which
  // never locks anyone else out.
  const std::string key = "token " + Sha256Hex(secret).substr(0, 12);
  if (Status st = limiter_.Check(key, req.remote); !st.ok()) return st;
  StatusOr<Caller> caller = FromBearer(secret);
  if (caller.ok() && (caller->scope == Scope::kAgent || caller->scope == Scope::kMetrics || caller->token.session)) {
    caller = PermissionDenied(fmt::format("a {} token cannot start a session", caller->token.session ? "session" : ScopeName(caller->scope)));
  }
  if (!caller.ok()) {
    if (caller.status().code() == StatusCode::kUnauthenticated) limiter_.Failed(key, req.remote);
    Audit(req, "", "session.login", "token", "failed", caller.status().message());
    return caller.status();
  }
  Audit(req, caller->user.name, "session.login", fmt::format("token {}", caller->token.id), "ok");
  return caller;
}

StatusOr<Auth::NewSession> Auth::StartSession(const Caller& who) {
  const int64_t now = clock_->NowMs();
  RM_ASSIGN_OR_RETURN(std::vector<store::Token> tokens, store_->ListTokens(who.user.id));
  std::vector<int64_t> live;  // oldest first
  for (const store::Token& t : tokens) {
    if (!t.session) continue;
    if (t.expires_ms != 0 && t.expires_ms <= now) {
      (void)store_->DeleteToken(t.id);
    } else {
      live.push_back(t.id);
    }
  }
  for (size_t i = 0; i + kMaxSessionsPerUser <= live.size(); ++i) (void)store_->DeleteToken(live[i]);
  NewSession s{NewApiToken(), who};
  s.caller.token = store::Token{0, who.user.id, "session", Sha256Hex(s.secret), now, ScopeName(who.scope), ""};
  s.caller.token.expires_ms = now + options_.session_ttl_ms;
  s.caller.token.session = true;
  RM_ASSIGN_OR_RETURN(s.caller.token.id, store_->CreateToken(s.caller.token));
  s.caller.csrf = Csrf(s.secret);
  return s;
}

std::string Auth::Csrf(const std::string& secret) const { return HexEncode(HmacSha256(csrf_key_, "csrf|" + secret)); }

StatusOr<Caller> Auth::FromCookie(const http::Request& head, const http::RouteOptions& route, const std::string& secret) {
  if (!UserRoute(route.access) && route.access != access::kAnyToken) {
    return PermissionDenied("a session cookie reaches only user routes: this call needs a token");
  }
  RM_ASSIGN_OR_RETURN(Caller caller, FromBearer(secret));
  if (!caller.token.session) return Unauthenticated("rm_session: not a session; log in again");
  // SameSite=Strict keeps other sites' requests from carrying the cookie in
  // today's browsers; the CSRF header is what older ones, and same-site
  // pages of another origin, cannot forge.
  if (head.method != "GET" && head.method != "HEAD" && route.access != access::kProxy) {
    const std::string sent = head.Header("x-csrf-token");
    if (sent.size() != caller.csrf.size() || CRYPTO_memcmp(sent.data(), caller.csrf.data(), sent.size()) != 0) {
      return PermissionDenied("csrf: missing or wrong X-CSRF-Token header");
    }
  }
  return caller;
}

StatusOr<http::Principal> Auth::Authenticate(const http::Request& head, const http::RouteOptions& route) {
  if (std::count_if(head.headers.begin(), head.headers.end(), [](const auto& h) { return h.first == "authorization"; }) > 1) {
    return InvalidArgument("Authorization: given more than once");
  }
  const std::string auth = head.Header("authorization");
  StatusOr<Caller> caller = Unauthenticated("missing credentials: send the header \"Authorization: Bearer <token>\"");
  if (auth.empty()) {
    // A browser's session; a bearer token, when sent too, wins.
    RM_ASSIGN_OR_RETURN(std::optional<std::string> session, CookieValue(head, kSessionCookie));
    if (session) caller = FromCookie(head, route, *session);
  } else if (auth.rfind("Bearer ", 0) == 0) {
    caller = FromBearer(auth.substr(7));
  } else if (auth.rfind("Basic ", 0) == 0 && route.access == access::kLogin) {
    caller = FromPassword(head, auth.substr(6));
  } else if (auth.rfind("Basic ", 0) == 0 && route.access == access::kRegistry) {
    // The token is the password; the user name is whatever the client had to fill in.
    const std::string decoded = Base64Decode(auth.substr(6));
    const size_t colon = decoded.find(':');
    caller = colon == std::string::npos ? StatusOr<Caller>(Unauthenticated("Basic: expected NAME:TOKEN"))
                                        : FromBearer(decoded.substr(colon + 1));
  }
  RM_RETURN_IF_ERROR(caller.status());
  const Scope s = caller->scope;
  const std::string& need = route.access;
  if (need == access::kAnyToken) {
    // Valid is enough (GET /api/v1/version: what any client may need to know to talk to us).
  } else if (need == access::kAgent) {
    if (s != Scope::kAgent) return PermissionDenied("this call is for agents: it needs an agent token");
  } else if (need == access::kRegistry) {
    if (s == Scope::kMetrics) return PermissionDenied("a metrics token reaches only /metrics");
  } else if (need == access::kMetrics) {
    if (s != Scope::kMetrics && s != Scope::kAdmin) return PermissionDenied("this call needs a metrics or admin token");
  } else if (UserRoute(need)) {
    if (s == Scope::kAgent) return PermissionDenied("an agent token reaches only the agent protocol");
    if (s == Scope::kMetrics) return PermissionDenied("a metrics token reaches only /metrics");
    if (need == access::kAdmin && s != Scope::kAdmin) return PermissionDenied("this call needs an admin token");
    if ((need == access::kSubmit || need == access::kLogin || need == access::kProxy) && s == Scope::kRead) {
      return PermissionDenied("this token's scope is read: this call needs a submit token");
    }
  } else {
    return Internal("route with unknown access \"" + need + "\"");
  }
  http::Principal p;
  p.name = caller->user.name;
  p.data = std::move(*caller);
  return p;
}

void Auth::Audit(const http::Request& req, const std::string& who, const std::string& action,
                 const std::string& target, const std::string& outcome, const std::string& detail) {
  // Names come from the client (a failed login's, say): stored as printable
  // UTF-8, so no bytes a store cannot hold keep the entry out of the log.
  store::AuditEntry e{0,      clock_->NowMs(), Printable(who, 256), req.remote, action, Printable(target, 256),
                      outcome, Printable(detail, 512)};
  if (Status st = store_->AddAudit(e); !st.ok()) spdlog::error("audit: {}", st.ToString());
  spdlog::info("audit: {} {} {} {} from {}{}", e.user.empty() ? "-" : e.user, action, e.target, outcome, req.remote,
               e.detail.empty() ? "" : ": " + e.detail);
  std::lock_guard<std::mutex> l(audit_mu_);
  if (++audits_since_prune_ >= 1000) {
    audits_since_prune_ = 0;
    (void)store_->PruneAudit(options_.audit_keep);
  }
}

}  // namespace ringmaster::server
