#include "http/client.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <limits>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <fmt/format.h>
#include <openssl/x509.h>

#include "common/json_limits.h"

namespace ringmaster::http {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = beast::http;
using tcp = asio::ip::tcp;
using unix_socket = asio::local::stream_protocol;
using SteadyClock = std::chrono::steady_clock;
using Ms = std::chrono::milliseconds;

namespace {

// How often a wait looks at Cancel() even when shutdown() did not wake it.
constexpr Ms kCancelSlice{250};
// Longer timeouts are treated as this, so that now + timeout cannot overflow.
constexpr Ms kForever = std::chrono::hours(24 * 365);

bool IEquals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

}  // namespace

std::string ClientTarget::Describe() const {
  if (transport == Transport::kUnix) return socket_path;
  std::string h = host.find(':') != std::string::npos ? "[" + host + "]" : host;
  return fmt::format("{}://{}:{}", transport == Transport::kTls ? "https" : "http", h, port);
}

StatusOr<ClientTarget> ParseClientUrl(std::string_view url) {
  ClientTarget t;
  if (url.rfind("unix:", 0) == 0) {
    t.transport = ClientTarget::Transport::kUnix;
    t.socket_path = std::string(url.substr(5));
    if (t.socket_path.empty()) return InvalidArgument("unix: URL without a socket path");
    return t;
  }
  std::string_view rest;
  if (url.rfind("https://", 0) == 0) {
    t.transport = ClientTarget::Transport::kTls;
    rest = url.substr(8);
  } else if (url.rfind("http://", 0) == 0) {
    rest = url.substr(7);
  } else {
    return InvalidArgument(fmt::format("'{}': not an http:// or https:// URL", Printable(url, 200)));
  }
  while (!rest.empty() && rest.back() == '/') rest.remove_suffix(1);
  if (rest.empty() || rest.find('/') != std::string_view::npos) {
    return InvalidArgument(fmt::format("'{}': want scheme://host[:port]", Printable(url, 200)));
  }
  const size_t close = rest.rfind(']');
  const size_t colon = rest.rfind(':');
  if (colon != std::string_view::npos && (close == std::string_view::npos || colon > close)) {
    t.host = std::string(rest.substr(0, colon));
    t.port = std::string(rest.substr(colon + 1));
  } else {
    t.host = std::string(rest);
    t.port = t.transport == ClientTarget::Transport::kTls ? "443" : "80";
  }
  if (t.host.size() > 2 && t.host.front() == '[') t.host = t.host.substr(1, t.host.size() - 2);
  if (t.host.empty() || t.port.empty()) return InvalidArgument(fmt::format("'{}': no host or port", Printable(url, 200)));
  return t;
}

std::string ClientResponse::Header(std::string_view name) const {
  for (const auto& [k, v] : headers) {
    if (IEquals(k, name)) return v;
  }
  return "";
}

// ---- one connection; every wait on a private io_context, bounded

struct Client::Tls {
  asio::ssl::context context{asio::ssl::context::tls_client};
  Status loaded;
};

class Connection {
 public:
  Connection(const ClientTarget& target, const ClientOptions& options, asio::ssl::context* tls)
      : target_(target), options_(options) {
    if (target.transport == ClientTarget::Transport::kUnix) unix_.emplace(ioc_);
    else if (tls) tls_.emplace(ioc_, *tls);
    else tcp_.emplace(ioc_);
  }

  // Why a Run ended early, if it did.
  enum class End { kNone, kTimedOut, kStopped, kCancelled };

  // Runs the operation `start` begins until it completes, the deadline
  // passes, `stop` says so (asked every poll) or Cancel(). On those the
  // socket is closed, which completes the operation.
  template <typename Start>
  beast::error_code Run(Start&& start, SteadyClock::time_point deadline, const CallOptions& call, End* end) {
    beast::error_code result;
    bool done = false;
    *end = End::kNone;
    const auto began = SteadyClock::now();
    start([&](beast::error_code ec, auto&&...) {
      result = ec;
      done = true;
    });
    for (;;) {
      auto until = std::min(deadline, SteadyClock::now() + kCancelSlice);
      if (call.poll.count() > 0) until = std::min(until, SteadyClock::now() + call.poll);
      ioc_.restart();
      ioc_.run_until(until);
      if (done && !cancelled_) return result;
      if (cancelled_) *end = End::kCancelled;
      else if (SteadyClock::now() >= deadline) {
        *end = End::kTimedOut;
        waited_ = std::chrono::ceil<Ms>(deadline - began);
      }
      else if (call.stop && call.stop()) *end = End::kStopped;
      if (*end != End::kNone) break;
    }
    Close();
    ioc_.restart();
    ioc_.run();  // lets the aborted operation finish before its state goes
    return asio::error::operation_aborted;
  }

  // Thread-safe: wakes a wait in progress, which then ends the call.
  void Cancel() {
    cancelled_ = true;
    std::lock_guard l(fd_mu_);
    if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
  }

  Status Connect(SteadyClock::time_point deadline, const CallOptions& call) {
    End end;
    beast::error_code ec;
    if (unix_) {
      if (target_.socket_path.empty() || target_.socket_path.size() >= sizeof(sockaddr_un::sun_path)) {
        return InvalidArgument(fmt::format("{}socket path '{}': empty or too long", options_.prefix,
                                           Printable(target_.socket_path, 200)));
      }
      unix_socket::endpoint endpoint(target_.socket_path);
      ec = Run([&](auto handler) { unix_->async_connect(endpoint, handler); }, deadline, call, &end);
      if (!ec) SetFd(unix_->native_handle());
    } else {
      tcp::resolver resolver(ioc_);
      tcp::resolver::results_type endpoints;
      ec = Run([&](auto handler) {
             resolver.async_resolve(target_.host, target_.port, [&endpoints, handler](auto e, auto results) mutable {
               endpoints = std::move(results);
               handler(e);
             });
           },
           deadline, call, &end);
      tcp::socket& socket = tls_ ? tls_->next_layer() : *tcp_;
      if (!ec) ec = Run([&](auto handler) { asio::async_connect(socket, endpoints, handler); }, deadline, call, &end);
      if (!ec) {
        socket.set_option(tcp::no_delay(true), ec);
        ec = {};
        SetFd(socket.native_handle());
      }
      if (!ec && tls_) {
        if (!SSL_set_tlsext_host_name(tls_->native_handle(), target_.host.c_str())) {
          return Unavailable(fmt::format("{}cannot reach {}: TLS SNI", options_.prefix, Peer()));
        }
        tls_->set_verify_callback(asio::ssl::host_name_verification(target_.host));
        ec = Run([&](auto handler) { tls_->async_handshake(asio::ssl::stream_base::client, handler); }, deadline, call,
                 &end);
        if (ec && end == End::kNone) return TlsFailed(ec);
      }
    }
    if (!ec) return Status::Ok();
    if (end == End::kNone && (ec == asio::error::access_denied || ec == asio::error::no_permission)) {
      return PermissionDenied(fmt::format("{}cannot reach {}: {}", options_.prefix, Peer(), ec.message()));
    }
    return Failed(fmt::format("cannot reach {}", Peer()), ec, end);
  }

  Status Send(const ClientRequest& request, bool keep_alive, SteadyClock::time_point deadline,
              const CallOptions& call, const std::string& what) {
    const auto verb = bhttp::string_to_verb(request.method);
    if (verb == bhttp::verb::unknown) return InvalidArgument("HTTP method " + Printable(request.method, 20));
    End end;
    auto fields = [&](auto& req) {
      bool host = false, agent = false;
      for (const auto& [k, v] : request.headers) {
        req.insert(k, v);
        host = host || IEquals(k, "host");
        agent = agent || IEquals(k, "user-agent");
      }
      if (!host) {
        req.set(bhttp::field::host, !target_.host_header.empty() ? target_.host_header
                                    : unix_                      ? std::string("localhost")
                                                                 : target_.host + ":" + target_.port);
      }
      if (!agent) req.set(bhttp::field::user_agent, "ringmaster");
      req.keep_alive(keep_alive);
    };
    if (!request.body_source) {
      bhttp::request<bhttp::string_body> req{verb, request.target, 11};
      fields(req);
      req.body() = request.body;
      req.prepare_payload();
      auto ec = Run([&](auto h) { Visit([&](auto& s) { bhttp::async_write(s, req, h); }); }, Wait(deadline, call),
                    call, &end);
      return ec ? Failed("send " + what, ec, end) : Status::Ok();
    }
    bhttp::request<bhttp::empty_body> req{verb, request.target, 11};
    fields(req);
    req.content_length(request.body_size);
    bhttp::request_serializer<bhttp::empty_body> head(req);
    auto ec = Run([&](auto h) { Visit([&](auto& s) { bhttp::async_write_header(s, head, h); }); },
                  Wait(deadline, call), call, &end);
    if (ec) return Failed("send " + what, ec, end);
    std::string chunk(1 << 20, '\0');
    for (uint64_t sent = 0; sent < request.body_size;) {
      auto n = request.body_source(chunk.data(), std::min<uint64_t>(chunk.size(), request.body_size - sent));
      if (!n.ok()) return n.status();
      if (*n == 0) return Internal(fmt::format("{}{}: the body ended after {} of {} bytes", options_.prefix, what,
                                               sent, request.body_size));
      ec = Run([&](auto h) { Visit([&](auto& s) { asio::async_write(s, asio::buffer(chunk.data(), *n), h); }); },
               Wait(deadline, call), call, &end);
      if (ec) return Failed("send " + what, ec, end);
      sent += *n;
    }
    return Status::Ok();
  }

  StatusOr<ClientResponse> ReadHead(bool head_request, SteadyClock::time_point deadline, const CallOptions& call,
                                    const std::string& what) {
    parser_.emplace();
    parser_->body_limit(std::numeric_limits<uint64_t>::max());  // the callers bound what they keep
    if (head_request) parser_->skip(true);
    End end;
    QuickAck();
    auto ec = Run([&](auto h) { Visit([&](auto& s) { bhttp::async_read_header(s, buffer_, *parser_, h); }); },
                  Wait(deadline, call), call, &end);
    if (ec) return Failed("read the answer to " + what, ec, end);
    ClientResponse r;
    const auto& res = parser_->get();
    r.status = static_cast<int>(res.result_int());
    for (const auto& f : res) r.headers.emplace_back(std::string(f.name_string()), std::string(f.value()));
    if (parser_->content_length()) r.content_length = *parser_->content_length();
    return r;
  }

  StatusOr<size_t> ReadSome(char* buf, size_t n, SteadyClock::time_point deadline, const CallOptions& call,
                            const std::string& what) {
    auto& body = parser_->get().body();
    // A read may parse only framing (a chunk's size line): go on until bytes
    // arrive or the body ends, so that 0 means the end.
    while (!parser_->is_done() && n > 0) {
      body.data = buf;
      body.size = n;
      End end;
      QuickAck();
      auto ec = Run([&](auto h) { Visit([&](auto& s) { bhttp::async_read_some(s, buffer_, *parser_, h); }); },
                    Wait(deadline, call), call, &end);
      if (ec == bhttp::error::need_buffer) ec = {};
      if (ec == bhttp::error::end_of_stream || ec == bhttp::error::partial_message) {
        return Unavailable(fmt::format("{}{}: the connection closed before the body's end", options_.prefix, what));
      }
      if (ec) return Failed("read the answer to " + what, ec, end);
      if (body.size < n) return n - body.size;
    }
    return size_t{0};
  }

  bool done() const { return parser_ && parser_->is_done(); }
  bool reusable() const { return done() && parser_->get().keep_alive(); }

  Status Failed(const std::string& what, const beast::error_code& ec, End end) const {
    switch (end) {
      case End::kCancelled: return Aborted(fmt::format("{}{}: cancelled", options_.prefix, what));
      case End::kStopped: return Aborted(fmt::format("{}{}: stopped", options_.prefix, what));
      case End::kTimedOut:
        return DeadlineExceeded(fmt::format("{}{}: no answer in {} ms", options_.prefix, what, waited_.count()));
      case End::kNone: break;
    }
    return Unavailable(fmt::format("{}{}: {}", options_.prefix, what, ec.message()));
  }

  std::string Peer() const { return options_.peer.empty() ? target_.Describe() : options_.peer; }

 private:
  template <typename F>
  void Visit(F&& f) {
    if (unix_) f(*unix_);
    else if (tls_) f(*tls_);
    else f(*tcp_);
  }

  SteadyClock::time_point Wait(SteadyClock::time_point deadline, const CallOptions& call) const {
    const Ms io = std::min(call.io_timeout.value_or(options_.io_timeout), kForever);
    return std::min(deadline, SteadyClock::now() + io);
  }

  Status TlsFailed(const beast::error_code& ec) {
    const long verify = SSL_get_verify_result(tls_->native_handle());
    if (verify != X509_V_OK) {
      return Unavailable(fmt::format("{}{} has a certificate this client does not trust ({}){}{}", options_.prefix,
                                     Peer(), X509_verify_cert_error_string(verify),
                                     options_.untrusted_hint.empty() ? "" : ": ", options_.untrusted_hint));
    }
    return Unavailable(fmt::format("{}TLS handshake with {} failed ({}); does it speak plain HTTP? then use http://",
                                   options_.prefix, Peer(), ec.message()));
  }

  void QuickAck() {
    if (!options_.quick_ack || unix_) return;
    int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_QUICKACK, &one, sizeof one);
  }

  void SetFd(int fd) {
    std::lock_guard l(fd_mu_);
    fd_ = fd;
    if (cancelled_) ::shutdown(fd_, SHUT_RDWR);
  }

  void Close() {
    std::lock_guard l(fd_mu_);
    beast::error_code ignored;
    if (unix_) unix_->close(ignored);
    else if (tls_) tls_->next_layer().close(ignored);
    else tcp_->close(ignored);
    fd_ = -1;
  }

  const ClientTarget& target_;
  const ClientOptions& options_;
  asio::io_context ioc_;
  std::optional<tcp::socket> tcp_;
  std::optional<asio::ssl::stream<tcp::socket>> tls_;
  std::optional<unix_socket::socket> unix_;
  beast::flat_buffer buffer_;
  std::optional<bhttp::response_parser<bhttp::buffer_body>> parser_;
  std::atomic<bool> cancelled_{false};
  std::mutex fd_mu_;
  int fd_ = -1;  // GUARDED_BY(fd_mu_) for Cancel()
  Ms waited_{0};  // how long the wait that timed out had
};

// ---- the client

Client::Client(ClientTarget target, ClientOptions options) : target_(std::move(target)), options_(std::move(options)) {
  if (target_.transport != ClientTarget::Transport::kTls) return;
  tls_ = std::make_unique<Tls>();
  beast::error_code ec;
  tls_->context.set_default_verify_paths(ec);
  if (!target_.ca_file.empty()) {
    tls_->context.load_verify_file(target_.ca_file, ec);
    if (ec) {
      tls_->loaded = Unavailable(fmt::format("{}cannot load the CA file {}: {}", options_.prefix,
                                             Printable(target_.ca_file, 200), ec.message()));
    }
  }
  tls_->context.set_verify_mode(asio::ssl::verify_peer);
}

Client::~Client() = default;

void Client::Register(Connection* c) {
  std::lock_guard l(mu_);
  active_.insert(c);
  if (cancelled_) c->Cancel();
}

void Client::Unregister(Connection* c) {
  std::lock_guard l(mu_);
  active_.erase(c);
}

void Client::Cancel() {
  std::lock_guard l(mu_);
  cancelled_ = true;
  for (Connection* c : active_) c->Cancel();
  idle_.clear();
}

StatusOr<std::unique_ptr<Connection>> Client::Acquire(const CallOptions& options, bool* reused) {
  {
    std::lock_guard l(mu_);
    if (cancelled_) return Aborted(options_.prefix + "cancelled");
    *reused = !idle_.empty();
    if (*reused) {
      auto conn = std::move(idle_.back());
      idle_.pop_back();
      active_.insert(conn.get());
      return conn;
    }
  }
  if (tls_) RM_RETURN_IF_ERROR(tls_->loaded);
  auto conn = std::make_unique<Connection>(target_, options_, tls_ ? &tls_->context : nullptr);
  Register(conn.get());
  auto deadline = SteadyClock::now() + std::min(options_.connect_timeout, kForever);
  if (options.deadline) deadline = std::min(deadline, *options.deadline);
  if (Status s = conn->Connect(deadline, options); !s.ok()) {
    Unregister(conn.get());
    return s;
  }
  return conn;
}

void Client::Release(std::unique_ptr<Connection> conn) {
  std::lock_guard l(mu_);
  active_.erase(conn.get());
  if (!cancelled_ && conn->reusable() && idle_.size() < options_.max_idle) idle_.push_back(std::move(conn));
}

StatusOr<std::unique_ptr<ResponseStream>> Client::Start(const ClientRequest& request, const CallOptions& options) {
  const std::string what = options.what.empty() ? request.method + " " + request.target : options.what;
  const auto deadline = options.deadline.value_or(SteadyClock::time_point::max());
  for (int attempt = 0;; ++attempt) {
    bool reused = false;
    RM_ASSIGN_OR_RETURN(std::unique_ptr<Connection> conn, Acquire(options, &reused));
    const bool retry = reused && attempt == 0 && !request.body_source;
    Status sent = conn->Send(request, options_.max_idle > 0, deadline, options, what);
    if (!sent.ok() && sent.code() != StatusCode::kUnavailable) {
      Unregister(conn.get());
      return sent;
    }
    if (!sent.ok() && retry) {
      Unregister(conn.get());
      continue;
    }
    // A server that refuses a streamed body early answers and closes: its
    // answer says why, so read it if there is one, briefly.
    auto head_deadline = sent.ok() ? deadline : std::min(deadline, SteadyClock::now() + std::chrono::seconds(5));
    auto head = conn->ReadHead(request.method == "HEAD", head_deadline, options, what);
    if (!head.ok()) {
      Unregister(conn.get());
      if (retry && head.status().code() == StatusCode::kUnavailable) continue;
      return sent.ok() ? head.status() : sent;
    }
    head->send_error = sent;
    return std::unique_ptr<ResponseStream>(new ResponseStream(this, std::move(conn), options, std::move(*head)));
  }
}

StatusOr<std::unique_ptr<ResponseStream>> Client::Open(const ClientRequest& request, const CallOptions& options) {
  return Start(request, options);
}

StatusOr<ClientResponse> Client::Do(const ClientRequest& request, const CallOptions& options) {
  RM_ASSIGN_OR_RETURN(std::unique_ptr<ResponseStream> stream, Start(request, options));
  RM_ASSIGN_OR_RETURN(std::string body, stream->ReadAll(options.max_body));
  ClientResponse r = stream->head();
  r.body = std::move(body);
  return r;
}

// ---- the body

ResponseStream::ResponseStream(Client* client, std::unique_ptr<Connection> conn, CallOptions options,
                               ClientResponse head)
    : client_(client), conn_(std::move(conn)), options_(std::move(options)), head_(std::move(head)) {}

ResponseStream::~ResponseStream() {
  if (!head_.send_error.ok()) client_->Unregister(conn_.get());  // half sent: never reused
  else client_->Release(std::move(conn_));
}

bool ResponseStream::done() const { return conn_->done(); }

StatusOr<size_t> ResponseStream::ReadSome(char* buf, size_t n) {
  const std::string what = options_.what.empty() ? "the answer" : options_.what;
  return conn_->ReadSome(buf, n, options_.deadline.value_or(SteadyClock::time_point::max()), options_, what);
}

StatusOr<std::string> ResponseStream::ReadAll(uint64_t limit) {
  const std::string what = options_.what.empty() ? "the answer" : options_.what;
  if (conn_->done()) return std::string();  // no body (HEAD, 204, 304), whatever Content-Length says
  if (head_.content_length && *head_.content_length > limit) {
    return Internal(fmt::format("{}{}: the answer is too large ({} bytes, over {})", client_->options_.prefix, what,
                                *head_.content_length, limit));
  }
  std::string out;
  char buf[64 << 10];
  while (!conn_->done()) {
    RM_ASSIGN_OR_RETURN(size_t n, ReadSome(buf, sizeof buf));
    out.append(buf, n);
    if (out.size() > limit) {
      return Internal(fmt::format("{}{}: the answer is too large (over {} bytes)", client_->options_.prefix, what,
                                  limit));
    }
  }
  return out;
}

}  // namespace ringmaster::http
