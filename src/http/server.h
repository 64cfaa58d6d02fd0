// http: Ringmaster's HTTP/1.1 server, on Boost.Beast and Asio.
//
// Event-driven: a connection holds no thread while it waits for a request, a
// long-poll's answer or a streamed body's next piece. Handlers run on bounded
// worker pools, one of them reserved for agents, so user traffic can never
// starve heartbeats. Before a handler sees a request the server has enforced:
// deadlines on every read and write; a header size limit; strict framing (one
// Content-Length, never with Transfer-Encoding, no transfer coding but
// chunked); authentication before any body byte is read; the route's body
// limit, counted while the body streams in (chunked bodies included); JSON
// error bodies for every failure (404, 405, 413, 431, ...). It speaks TLS when
// given a certificate, and answers plain HTTP sent to a TLS port with a clear
// 400. Sockets use TCP_NODELAY. Every request ends in one access record.
//
// Thread-safety: SetAuthenticator/Route before Start; everything else from any
// thread. A Responder may be called from any thread, exactly once.
#pragma once

#include <any>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/status.h"

namespace ringmaster::http {

// Who made a request, as the authenticator established it.
struct Principal {
  std::string name;  // for the access log ("" = anonymous)
  std::any data;     // the application's own record (e.g. user and token)
};

class BodyReader;
class Connection;

struct Request {
  std::string method;  // "GET"
  std::string target;  // as sent: "/api/v1/jobs?limit=5"
  std::string path;    // percent-decoded, without the query
  std::vector<std::pair<std::string, std::string>> query;    // decoded, in order
  std::vector<std::pair<std::string, std::string>> headers;  // names lower-case, in order
  std::string body;                  // empty on RouteOptions::stream_body routes
  std::shared_ptr<BodyReader> body_reader;  // set on stream_body routes: read the body through it
  std::shared_ptr<Connection> connection;   // set on takeover routes: splice the connection through it
  std::string remote;                // the peer's IP address
  std::vector<std::string> matches;  // the route pattern's capture groups
  Principal principal;
  uint64_t id = 0;  // this server's request number, for logs

  // The first value of header `name` (lower-case), "" if absent.
  std::string Header(std::string_view name) const;
  // Whether it asks to switch protocols: an Upgrade header and "upgrade" in Connection.
  bool AsksUpgrade() const;
  // Query parameter `name`: nullopt if absent; InvalidArgument if given twice.
  StatusOr<std::optional<std::string>> Param(std::string_view name) const;
};

// A response body produced piece by piece (chunked transfer coding), e.g. a
// log stream. The server pulls the next piece only once the previous one is
// written, so a slow reader never makes the server buffer more.
class BodySource {
 public:
  virtual ~BodySource() = default;
  // Produces the next piece by calling `next(data, last)` exactly once, now or
  // later, from any thread. No thread needs to wait: a source with nothing to
  // send yet arranges to call `next` later (Server::After). `data` may be
  // empty only when `last` is true.
  virtual void Pull(std::function<void(std::string data, bool last)> next) = 0;
  // The client went away or the server stops: Pull is not called again.
  virtual void Cancel() {}
};

// A request body read piece by piece (routes with RouteOptions::stream_body),
// so an upload of any size holds one piece of memory and no thread while it
// waits for the client. The handler calls Read, handles the piece it gets,
// then calls Read again, until `last`; it may answer at any point (an answer
// before the whole body was read closes the connection afterwards).
class BodyReader {
 public:
  virtual ~BodyReader() = default;
  // Calls `next` once, on the route's pool: Ok with the next piece (`data` is
  // valid until `next` returns; empty only when `last`), or an error:
  // DeadlineExceeded (the body stopped arriving), ResourceExhausted (more than
  // the route's max_body), InvalidArgument (malformed chunking) or Aborted
  // (the client went away). Call Read again only after `next` has returned.
  using Next = std::function<void(Status status, std::string_view data, bool last)>;
  virtual void Read(Next next) = 0;
};

// An upstream's response head, as Connection::Splice read it, for the
// route to rewrite before the client sees it.
struct UpstreamHead {
  int status = 0;
  std::string reason;
  std::vector<std::pair<std::string, std::string>> headers;  // names as the upstream sent them, in order
};

// The client connection of a takeover route (RouteOptions::takeover), which
// the handler may splice with an upstream TCP connection instead of
// answering: the server connects (RouteOptions' connect deadline), writes
// `preface` (e.g. a tunnel ticket and the rewritten request head), then every
// byte the client sends after its request head (those already buffered
// first), reads the upstream's response head, lets `rewrite_head` edit it,
// sends it on, and from then copies bytes both ways, holding no thread, until
// either side closes or neither sends a byte for the idle timeout; then both
// close. A response other than 101 Switching Protocols gets
// `Connection: close` (the connection ends with it). Of a request that asks
// to upgrade, only its own body goes before the answer; what follows goes
// after a 101, and after any other answer is never read (the connection
// closes once that answer is sent). An upstream that cannot
// be reached or answers no valid head: 502 (504 past the connect deadline).
// The handler calls Splice or the Responder, once, from any thread.
class Connection {
 public:
  struct Upstream {
    std::string host;
    int port = 0;
    std::string preface;
    std::function<void(UpstreamHead& head)> rewrite_head;  // may be empty
  };
  virtual ~Connection() = default;
  virtual void Splice(Upstream upstream) = 0;
};

struct Response {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
  std::shared_ptr<BodySource> stream;  // set: the body comes from here, chunked; `body` is ignored
};

using Responder = std::function<void(Response)>;

// {"error": {"code": code, "message": message}} with an HTTP status.
Response ErrorResponse(int status, std::string_view code, std::string_view message);
// The HTTP status of a Status code (docs/api.md's table): 400, 401, 403, ...
int HttpStatusFor(StatusCode code);

enum class Pool { kApi, kAgent };

struct RouteOptions {
  size_t max_body = 64 << 10;  // larger bodies get 413 before they are read
  Pool pool = Pool::kApi;
  bool authenticate = true;
  std::string access;  // opaque to the server: what the authenticator checks (e.g. a scope)
  // The handler reads the body itself, in pieces (Request::body_reader);
  // max_body then bounds the whole stream, and memory is one piece.
  bool stream_body = false;
  // With authenticate = false and no body: the handler runs on the I/O thread
  // that read the request. Only for handlers that never block (no database,
  // no files), e.g. a health check.
  bool inline_handler = false;
  // The handler may take the connection over (Request::connection): the body
  // is not read (it is the upstream's to read) and the connection ends with
  // the request. Taken-over connections are bounded in total and per
  // principal (ServerOptions; beyond them 429).
  bool takeover = false;
};

// `request` lives until the handler returns; a handler that answers later
// (from a timer, a watch) copies what it needs.
using Handler = std::function<void(Request& request, Responder respond)>;
// Runs on the route's pool with the request's head (no body yet read).
// Returns the principal, or an error: Unauthenticated -> 401, PermissionDenied -> 403, ...
using Authenticator = std::function<StatusOr<Principal>(const Request& head, const RouteOptions& route)>;

struct AccessRecord {
  uint64_t id = 0;
  std::string remote, user, method, path;
  // The matched route's pattern ("/api/v1/jobs/{id}"); nullptr when none
  // matched. Lives as long as the server (routes are fixed once it starts).
  const std::string* route = nullptr;
  int status = 0;
  double ms = 0;
  uint64_t bytes = 0;  // body bytes sent
};

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 0;  // 0 = any free port
  std::string tls_cert, tls_key;  // PEM files; both set = HTTPS only
  int io_threads = 2;
  int api_threads = 16;
  int agent_threads = 4;
  size_t max_header_bytes = 60 << 10;  // below Beast's 64 KiB per field value
  size_t max_connections = 4096;  // beyond this a new connection gets 503 and is closed
  // Request bodies being received or handled (a chunked body counts as its
  // route's limit): all API connections together (beyond it: 503), one
  // principal's (beyond it: 429), and the agent pool's own budget, which user
  // traffic never touches.
  size_t max_body_bytes_in_flight = 256 << 20;
  size_t max_body_bytes_per_principal = 16 << 20;
  size_t max_agent_body_bytes_in_flight = 128 << 20;
  std::chrono::seconds header_timeout{30};  // from the first byte of a request to its end of header
  std::chrono::seconds idle_timeout{60};    // a keep-alive connection between requests
  std::chrono::seconds body_timeout{60};
  std::chrono::seconds write_timeout{60};
  // Taken-over connections (RouteOptions::takeover).
  size_t max_takeovers = 1024;
  size_t max_takeovers_per_principal = 64;
  std::chrono::milliseconds takeover_connect_timeout{5000};
  std::chrono::milliseconds takeover_idle_timeout{10 * 60 * 1000};  // no byte either way (Jupyter's websockets ping)
  std::function<void(const AccessRecord&)> access_log;
  // The application's durability barrier (a write is acknowledged only once
  // on disk): called as a handler starts; what it returns is called on the
  // thread that answers, before the answer is sent. A failure replaces the
  // answer with a 503 naming it (507 when the disk is full).
  std::function<std::function<Status()>()> before_respond;
  // Runs on the I/O thread before routing, with the request's head: an answer
  // here is the request's answer (no route, no authentication). Never blocks.
  // E.g. a standby server sending everything but its health check to the leader.
  std::function<std::optional<Response>(const Request& head)> gate;
};

// The route table: pure, no sockets. A pattern is a path whose segments are
// literals or placeholders: `{id}` matches one segment of 1 to 18 digits,
// `{name}` any one non-empty segment, and a last `{path...}` one or more
// segments, captured '/'-joined (empty ones kept, for the handler to refuse);
// each placeholder is a capture group.
// Matching is linear in the path (no regular expressions: they recurse).
class Router {
 public:
  struct Route {
    std::string method;
    std::string pattern;
    std::vector<std::string> segments;
    RouteOptions options;
    Handler handler;
  };
  void Add(std::string method, const std::string& pattern, RouteOptions options, Handler handler);
  // The route for (method, path) with its capture groups; otherwise a
  // NotFound (no such path) or FailedPrecondition (the path exists; `allow`
  // lists its methods) status.
  StatusOr<const Route*> Find(const std::string& method, const std::string& path, std::vector<std::string>* groups,
                              std::string* allow) const;
  // Every (method, pattern) added, in the order added: what the API's
  // description is checked against.
  std::vector<std::pair<std::string, std::string>> Routes() const;

 private:
  std::vector<Route> routes_;
};

class Timer {
 public:
  virtual ~Timer() = default;
  virtual void Cancel() = 0;
};

class Server {
 public:
  explicit Server(ServerOptions options);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  void SetAuthenticator(Authenticator auth);
  // See Router for `pattern`.
  void Route(std::string method, const std::string& pattern, RouteOptions options, Handler handler);
  // Router::Routes of the routes added so far.
  std::vector<std::pair<std::string, std::string>> Routes() const;

  // Binds and starts serving in the background.
  Status Start();
  // Stops accepting, closes every connection, cancels streams and joins threads.
  void Stop();

  int port() const { return port_; }
  bool tls() const;

  // Runs `fn` after `delay` on an I/O thread unless cancelled first. Keep `fn`
  // short: post real work to a pool.
  std::shared_ptr<Timer> After(std::chrono::milliseconds delay, std::function<void()> fn);
  void Post(Pool pool, std::function<void()> fn);

  // One whole request through routing, authentication, limits and its
  // handler, without a socket: for tests and fuzzing. Everything runs on the
  // calling thread until the handler returns; `respond` is called once.
  // Before Start(), work handed to Post() runs here too, after the handler.
  void Dispatch(Request request, Responder respond);
  // Before Start(): runs what Post() queued (Dispatch does this itself).
  void RunQueued();

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
  int port_ = 0;
};

// "/a%20b" -> "/a b"; nullopt for a malformed escape or a decoded NUL.
std::optional<std::string> PercentDecode(std::string_view in, bool plus_is_space);
// Splits a request target into its decoded path and query; InvalidArgument if malformed.
Status ParseTarget(std::string_view target, std::string* path,
                   std::vector<std::pair<std::string, std::string>>* query);

}  // namespace ringmaster::http
