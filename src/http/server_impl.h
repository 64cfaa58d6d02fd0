// The HTTP server's insides, shared by server.cc (the Server, its pools,
// timers and in-process dispatch) and session.cc (connections: plain, TLS,
// the TLS sniffer, refusals). Not part of the http component's interface.
#pragma once

#include "http/server.h"

#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>

#include <fcntl.h>

#include <algorithm>
#include <array>
#include <deque>
#include <limits>
#include <map>
#include <mutex>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "common/json_limits.h"
#include "common/units.h"

namespace ringmaster::http {

namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
namespace net = boost::asio;
namespace ssl = boost::asio::ssl;
using tcp = boost::asio::ip::tcp;
using SteadyClock = std::chrono::steady_clock;

inline constexpr size_t kMaxTarget = 8 << 10;
// A streamed request body (RouteOptions::stream_body) is read this much at a time.
inline constexpr size_t kBodyPiece = 256 << 10;

inline Response FromStatus(const Status& st) {
  return ErrorResponse(HttpStatusFor(st.code()), StatusCodeName(st.code()), st.message());
}

inline bool IEquals(std::string_view a, std::string_view b) {
  return a.size() == b.size() &&
         std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) { return std::tolower(x) == std::tolower(y); });
}

inline std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

class SessionBase {
 public:
  virtual ~SessionBase() = default;
  // Closes the connection at once (any thread).
  virtual void Close() = 0;
  // Since when (steady clock, ns) the connection has been waiting for a
  // request's head (a handshake, an idle keep-alive, a slow head); 0 while a
  // request is being handled or answered. At the connection limit, the one
  // waiting longest makes room for a new connection: a flood of silent
  // connections can then never keep an agent (or anyone) out.
  std::atomic<int64_t> waiting_since_ns{0};
  static int64_t Now() { return SteadyClock::now().time_since_epoch().count(); }
};

struct Server::Impl {
  explicit Impl(ServerOptions o) : opt(std::move(o)), ioc(std::max(1, opt.io_threads)) {}

  ServerOptions opt;
  Router router;
  Authenticator auth;
  std::atomic<uint64_t> next_id{1};
  std::atomic<size_t> connections{0};
  // Bytes reserved by requests whose bodies are (or will be) in memory.
  std::mutex budget_mu;
  size_t api_body_bytes = 0;                // GUARDED_BY(budget_mu)
  size_t agent_body_bytes = 0;              // GUARDED_BY(budget_mu)
  std::map<std::string, size_t> body_bytes_by;  // GUARDED_BY(budget_mu): per principal (API pool)

  Status Reserve(Pool pool, const std::string& who, size_t n) {
    std::lock_guard<std::mutex> l(budget_mu);
    if (pool == Pool::kAgent) {
      if (agent_body_bytes + n > opt.max_agent_body_bytes_in_flight) {
        return Unavailable("too many agent uploads in progress: try again shortly");
      }
      agent_body_bytes += n;
      return Status::Ok();
    }
    size_t& mine = body_bytes_by[who];
    if (mine + n > opt.max_body_bytes_per_principal) {
      if (mine == 0) body_bytes_by.erase(who);
      return ResourceExhausted(fmt::format("{} uploads of yours in progress already: let them finish first",
                                           FormatBytes(static_cast<int64_t>(mine))));
    }
    if (api_body_bytes + n > opt.max_body_bytes_in_flight) {
      if (mine == 0) body_bytes_by.erase(who);
      return Unavailable("too many request bodies in progress: try again shortly");
    }
    mine += n;
    api_body_bytes += n;
    return Status::Ok();
  }
  void Unreserve(Pool pool, const std::string& who, size_t n) {
    std::lock_guard<std::mutex> l(budget_mu);
    if (pool == Pool::kAgent) {
      agent_body_bytes -= n;
      return;
    }
    api_body_bytes -= n;
    auto it = body_bytes_by.find(who);
    if (it != body_bytes_by.end() && (it->second -= n) == 0) body_bytes_by.erase(it);
  }
  size_t takeovers = 0;                          // GUARDED_BY(budget_mu)
  std::map<std::string, size_t> takeovers_by;    // GUARDED_BY(budget_mu): per principal

  Status AcquireTakeover(const std::string& who) {
    std::lock_guard<std::mutex> l(budget_mu);
    size_t& mine = takeovers_by[who];
    if (mine >= opt.max_takeovers_per_principal || takeovers >= opt.max_takeovers) {
      if (mine == 0) takeovers_by.erase(who);
      return ResourceExhausted(fmt::format("too many open proxied connections ({} of yours): close some first", mine));
    }
    ++mine;
    ++takeovers;
    return Status::Ok();
  }
  void ReleaseTakeover(const std::string& who) {
    std::lock_guard<std::mutex> l(budget_mu);
    --takeovers;
    auto it = takeovers_by.find(who);
    if (it != takeovers_by.end() && --it->second == 0) takeovers_by.erase(it);
  }
  std::atomic<bool> stopping{false};
  std::mutex sessions_mu;
  std::map<uint64_t, std::weak_ptr<SessionBase>> sessions;  // GUARDED_BY(sessions_mu)
  std::mutex inline_mu;
  std::deque<std::function<void()>> inline_queue;  // GUARDED_BY(inline_mu): Post() before Start()

  // Declared after the bookkeeping above, so that handlers the io_context
  // destroys at shutdown may still touch it; the pools before the io_context
  // is destroyed (they hold sessions whose sockets belong to it).
  net::io_context ioc;
  std::optional<ssl::context> tls;
  tcp::acceptor acceptor{ioc};
  std::vector<std::thread> io_threads;
  std::unique_ptr<net::thread_pool> api_pool, agent_pool;

  net::thread_pool& PoolFor(Pool p) { return p == Pool::kAgent ? *agent_pool : *api_pool; }

  void Accept();

  // At the connection limit: closes the connection that has waited longest
  // for a request's head. False if every connection is busy with a request.
  bool EvictLongestWaiting() {
    std::shared_ptr<SessionBase> victim;
    {
      std::lock_guard<std::mutex> l(sessions_mu);
      int64_t oldest = 0;
      for (auto& [id, weak] : sessions) {
        auto s = weak.lock();
        if (!s) continue;
        const int64_t since = s->waiting_since_ns;
        if (since != 0 && (oldest == 0 || since < oldest)) {
          oldest = since;
          victim = std::move(s);
        }
      }
    }
    if (!victim) return false;
    victim->Close();
    return true;
  }

  void Log(const AccessRecord& r) {
    if (opt.access_log) opt.access_log(r);
  }

  // Routing for a request whose head is complete: the route, or the error response.
  std::optional<Response> Route(Request& req, const Router::Route** route) {
    if (opt.gate) {
      if (auto answer = opt.gate(req)) return answer;
    }
    std::string allow;
    auto found = router.Find(req.method, req.path, &req.matches, &allow);
    if (found.ok()) {
      *route = *found;
      return std::nullopt;
    }
    if (found.status().code() == StatusCode::kFailedPrecondition) {
      Response r = ErrorResponse(405, "InvalidArgument",
                                 fmt::format("{} is not allowed on {} (allowed: {})", req.method, req.path, allow));
      r.headers.emplace_back("Allow", allow);
      return r;
    }
    return ErrorResponse(404, "NotFound", fmt::format("no such path: {} {}", req.method, req.path));
  }

  // Authentication. REQUIRES: on a pool thread (the authenticator may block on the database).
  std::optional<Response> Authenticate(Request& req, const Router::Route& route) {
    if (!route.options.authenticate) return std::nullopt;
    if (!auth) return ErrorResponse(500, "Internal", "no authenticator configured");
    StatusOr<Principal> p = [&]() -> StatusOr<Principal> {
      try {
        return auth(req, route.options);
      } catch (const std::exception& e) {
        spdlog::error("request {}: authenticator threw: {}", req.id, e.what());
        return Internal("internal error while authenticating");
      }
    }();
    if (!p.ok()) return FromStatus(p.status());
    req.principal = std::move(*p);
    return std::nullopt;
  }

  // Runs the handler; a throw becomes a 500 whose cause goes to the log only.
  // The answer passes ServerOptions::before_respond first (a failure there:
  // 503, or 507 when the disk is full).
  static void RunHandler(const Router::Route& route, Request& req, const Responder& respond_now,
                         const std::function<std::function<Status()>()>& before_respond) {
    Responder respond = respond_now;
    if (before_respond) {
      respond = [respond_now, barrier = before_respond()](Response r) {
        if (Status st = barrier(); !st.ok()) {
          r = ErrorResponse(st.code() == StatusCode::kInsufficientStorage ? 507 : 503, StatusCodeName(st.code()),
                            st.message());
        }
        respond_now(std::move(r));
      };
    }
    try {
      route.handler(req, respond);
    } catch (const std::exception& e) {
      spdlog::error("request {} ({} {}): handler threw: {}", req.id, req.method, req.path, e.what());
      respond(ErrorResponse(500, "Internal",
                            fmt::format("internal error (request {}); the server log has the cause", req.id)));
    }
  }
};

// A body already in memory, served as pieces (Server::Dispatch, empty bodies).
class WholeBodyReader : public BodyReader {
 public:
  explicit WholeBodyReader(std::string body) : body_(std::move(body)) {}
  void Read(Next next) override {
    size_t n = std::min(kBodyPiece, body_.size() - pos_);
    std::string_view piece(body_.data() + pos_, n);
    pos_ += n;
    next(Status::Ok(), piece, pos_ == body_.size());
  }

 private:
  std::string body_;
  size_t pos_ = 0;
};

// Dispatch() has no socket: a takeover route's Splice there answers 502.
class NoConnection : public Connection {
 public:
  explicit NoConnection(Responder respond) : respond_(std::move(respond)) {}
  void Splice(Upstream) override { respond_(ErrorResponse(502, "Unavailable", "no connection to take over")); }

 private:
  Responder respond_;
};

// Writes one canned error response on `stream` and closes it (reject.cc).
void Reject(beast::tcp_stream stream, int status, std::string reason, std::string code, std::string message);

}  // namespace ringmaster::http
