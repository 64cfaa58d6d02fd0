// Auth: who is calling the API and what they may do.
//
// Bearer tokens carry a scope. `read` reaches only GET routes of the user's
// own jobs, logs, nodes and tokens; `submit` adds submitting, cancelling and
// deleting jobs and managing the user's own tokens; `admin` (admin users
// only) adds users, every user's jobs and tokens, and the audit log;
// `agent` reaches only the agent protocol, and only for the one node named
// in the token. Scopes do not nest across that line: an admin token cannot
// act as an agent, and an agent token can do nothing else (but ask the
// server's version, which every valid token may). A disabled user's
// tokens stop working at the next request: known tokens are cached in memory
// (no database read per request) only while the store's AuthVersion, which
// moves with every write to users or tokens, stays the same.
//
// Password login (HTTP Basic on POST /api/v1/tokens, or a browser session)
// is rate-limited per user name and per client address (an address's limit
// spares the names that logged in from it before), and costs the same
// for unknown users and wrong passwords, so it tells an attacker neither.
// A browser session is a token row (revoked with the user's tokens) with an
// expiry, carried by the rm_session cookie on user routes only; a cookie
// request that changes something also carries the session's CSRF token.
//
// Thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "common/clock.h"
#include "common/status.h"
#include "http/server.h"
#include "store/meta_store.h"

namespace ringmaster::server {

// kMetrics: a token for a Prometheus server, which reaches /metrics only
// (made by an admin, for an admin user: it counts every user's jobs).
enum class Scope { kRead, kSubmit, kAdmin, kAgent, kMetrics };
const char* ScopeName(Scope s);
std::optional<Scope> ParseScope(const std::string& s);

// What a route needs, as RouteOptions::access names it.
namespace access {
inline constexpr const char* kRead = "read";      // any user token
inline constexpr const char* kSubmit = "submit";  // submit or admin
inline constexpr const char* kAdmin = "admin";
inline constexpr const char* kAgent = "agent";
inline constexpr const char* kMetrics = "metrics";  // admin or metrics tokens
inline constexpr const char* kLogin = "login";  // a submit token, or HTTP Basic user:password
inline constexpr const char* kAnyToken = "any";  // any valid token, agent and metrics ones included
// The read-only OCI registry (/v2/): a user or agent token, as a bearer or as
// the password of HTTP Basic (any user name), which is what docker login and
// registry clients send.
inline constexpr const char* kRegistry = "registry";
// A reverse proxy to a user's own web application (a notebook): a submit
// token, or a session cookie without X-CSRF-Token, since the application's
// own pages cannot send it (they do their own CSRF checks; the cookie is
// SameSite=Strict).
inline constexpr const char* kProxy = "proxy";
}  // namespace access

// The authenticated caller of one request (http::Principal::data).
struct Caller {
  store::User user;
  store::Token token;  // id 0 for a password login
  Scope scope = Scope::kRead;
  std::string csrf = {};  // sessions (token.session): what X-CSRF-Token must say
  bool admin() const { return scope == Scope::kAdmin; }
};

struct LoginLimits {
  int user_failures = 5;            // consecutive failures before a user name is locked
  int64_t lock_ms = 30'000;         // the first lock; each further failure doubles it
  int64_t max_lock_ms = 15 * 60'000;
  int address_failures = 100;       // failures from one address within the window (any names)
  int64_t address_window_ms = 10 * 60'000;
  int64_t known_ms = 30LL * 24 * 3'600'000;  // how long a name's login from an address is remembered
};

// Counts failed logins; Check refuses while a user name is locked out, or an
// address is, for names that have not logged in from it before: failures
// against one name (or a spray from a shared address such as loopback) never
// lock out the names already known there.
class LoginLimiter {
 public:
  LoginLimiter(Clock* clock, LoginLimits limits);
  // OK, or ResourceExhausted saying how long to wait.
  Status Check(const std::string& user, const std::string& address);
  // Counts a failure; true if it locked the user name or the address just now.
  bool Failed(const std::string& user, const std::string& address);
  void Succeeded(const std::string& user, const std::string& address);

 private:
  struct UserState {
    int failures = 0;
    int64_t locked_until_ms = 0;
    int64_t last_ms = 0;
  };
  void PruneLocked(int64_t now);
  static std::string AddressKey(const std::string& address);
  std::string NameKeyLocked(const std::string& user, const std::string& address) const;  // REQUIRES(mu_)

  Clock* const clock_;
  const LoginLimits limits_;
  std::mutex mu_;
  std::map<std::string, UserState> users_;                // GUARDED_BY(mu_): name (or name at a known address)
  std::map<std::string, std::deque<int64_t>> addresses_;  // GUARDED_BY(mu_): failure times
  std::map<std::pair<std::string, std::string>, int64_t> known_;  // GUARDED_BY(mu_): (address, name) -> last login
};

struct AuthOptions {
  LoginLimits login;
  int64_t audit_keep = 100'000;  // audit entries kept (older ones are pruned)
  int64_t session_ttl_ms = 12 * 3'600'000;
  // The HMAC key of sessions' CSRF tokens; "" = a random one (they then do
  // not survive a restart).
  std::string csrf_key;
};

// The session cookie's name, and its value in the request's Cookie headers:
// nullopt when absent; InvalidArgument when it is sent twice with different
// values (e.g. one set for a narrower path), which is refused, not guessed at.
inline constexpr const char* kSessionCookie = "rm_session";
StatusOr<std::optional<std::string>> CookieValue(const http::Request& req, std::string_view name);

class Auth {
 public:
  Auth(store::MetaStore* store, Clock* clock, AuthOptions options = {});

  // The http::Authenticator: checks the request's credentials against the
  // route's access (RouteOptions::access) before its body is read.
  StatusOr<http::Principal> Authenticate(const http::Request& head, const http::RouteOptions& route);

  // Records an audit entry (who, what, outcome) with the request's address.
  void Audit(const http::Request& req, const std::string& who, const std::string& action, const std::string& target,
             const std::string& outcome, const std::string& detail = "");

  // Whether `caller` (authenticated earlier) still is: Unauthenticated when
  // its token was revoked or its user disabled since. Read from the store,
  // not the cache: for the end of long requests (an upload's commit, a wait).
  Status Recheck(const Caller& caller);

  // Agent tokens act only for their node: PermissionDenied otherwise.
  static Status CheckNode(const Caller& caller, const std::string& node_name);

  // A password login (`password` nullopt: none was given), audited as
  // `action`: the caller with the scope of their role; Unauthenticated
  // ("wrong user name or password", the same for unknown users),
  // ResourceExhausted while locked out.
  StatusOr<Caller> Login(const http::Request& req, const std::string& name, const std::optional<std::string>& password,
                         const std::string& action);
  // A login with a user's token (not an agent, metrics or session one),
  // rate-limited like passwords.
  StatusOr<Caller> LoginWithToken(const http::Request& req, const std::string& secret);
  // A new session for `who`, with who's scope; ends their expired sessions
  // and, past kMaxSessionsPerUser, their oldest.
  struct NewSession {
    std::string secret;
    Caller caller;  // its token is the session's row
  };
  StatusOr<NewSession> StartSession(const Caller& who);
  int64_t session_ttl_ms() const { return options_.session_ttl_ms; }
  static constexpr size_t kMaxSessionsPerUser = 20;

 private:
  StatusOr<Caller> FromBearer(const std::string& secret);
  StatusOr<Caller> FromCookie(const http::Request& head, const http::RouteOptions& route, const std::string& secret);
  std::string Csrf(const std::string& secret) const;
  StatusOr<Caller> LookUpBearer(const std::string& hash);  // the store's reads behind FromBearer
  StatusOr<Caller> FromPassword(const http::Request& req, const std::string& basic);

  store::MetaStore* const store_;
  Clock* const clock_;
  const AuthOptions options_;
  const std::string csrf_key_;
  LoginLimiter limiter_;
  const std::string dummy_hash_;  // verified against for unknown users: equal cost
  std::atomic<int> verifying_{0};  // password verifications in progress
  std::mutex audit_mu_;
  int64_t audits_since_prune_ = 0;  // GUARDED_BY(audit_mu_)
  // Bearer tokens already looked up: sha256 of the secret -> the caller, as
  // of the store's AuthVersion `version` (unknown tokens are never cached).
  struct Known {
    uint64_t version;
    Caller caller;
  };
  static constexpr size_t kMaxKnown = 10'000;
  std::mutex known_mu_;
  std::unordered_map<std::string, Known> known_;  // GUARDED_BY(known_mu_)
};

const Caller& CallerOf(const http::Request& req);

}  // namespace ringmaster::server
