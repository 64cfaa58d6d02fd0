#include "http/server.h"

#include <sys/resource.h>

#include <latch>

#include "common/thread_name.h"
#include "http/server_impl.h"

namespace ringmaster::http {
namespace {

// Names each of a pool's `n` threads: one task each, held until all have run
// (the latch is shared: a thread may still be inside it after the last arrives).
void NamePool(net::thread_pool& pool, int n, const char* name) {
  auto named = std::make_shared<std::latch>(n);
  for (int i = 0; i < n; ++i) {
    net::post(pool, [named, name] {
      NameThisThread(name);
      named->arrive_and_wait();
    });
  }
  named->wait();
}

// Mozilla's "intermediate" TLS 1.2 list: ECDHE with AES-GCM or ChaCha20-Poly1305.
constexpr const char* kTls12Ciphers =
    "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:ECDHE-ECDSA-AES256-GCM-SHA384:"
    "ECDHE-RSA-AES256-GCM-SHA384:ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305";

class AsioTimer final : public Timer, public std::enable_shared_from_this<AsioTimer> {
 public:
  explicit AsioTimer(net::io_context& ioc) : strand_(net::make_strand(ioc)), timer_(strand_) {}
  void Start(std::chrono::milliseconds delay, std::function<void()> fn) {
    net::post(strand_, [self = shared_from_this(), delay, fn = std::move(fn)]() mutable {
      if (self->cancelled_) return;
      self->timer_.expires_after(delay);
      self->timer_.async_wait([self, fn = std::move(fn)](beast::error_code ec) {
        if (!ec && !self->cancelled_) fn();
      });
    });
  }
  void Cancel() override {
    net::post(strand_, [self = shared_from_this()] {
      self->cancelled_ = true;
      self->timer_.cancel();
    });
  }

 private:
  net::strand<net::io_context::executor_type> strand_;
  net::steady_timer timer_;
  bool cancelled_ = false;  // on strand_
};

}  // namespace

Server::Server(ServerOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}

Server::~Server() { Stop(); }

bool Server::tls() const { return impl_->tls.has_value(); }

void Server::SetAuthenticator(Authenticator auth) { impl_->auth = std::move(auth); }

void Server::Route(std::string method, const std::string& pattern, RouteOptions options, Handler handler) {
  impl_->router.Add(std::move(method), pattern, std::move(options), std::move(handler));
}

std::vector<std::pair<std::string, std::string>> Server::Routes() const { return impl_->router.Routes(); }

Status Server::Start() {
  Impl& I = *impl_;
  // Connections hold file descriptors, not threads: allow as many as the hard limit.
  rlimit nofile{};
  if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < nofile.rlim_max) {
    nofile.rlim_cur = nofile.rlim_max;
    setrlimit(RLIMIT_NOFILE, &nofile);
  }
  if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur != RLIM_INFINITY) {
    const size_t fit = nofile.rlim_cur > 256 ? static_cast<size_t>(nofile.rlim_cur) - 128 : 128;
    I.opt.max_connections = std::min(I.opt.max_connections, fit);
  }
  if (!I.opt.tls_cert.empty() || !I.opt.tls_key.empty()) {
    if (I.opt.tls_cert.empty() || I.opt.tls_key.empty()) {
      return InvalidArgument("TLS needs both a certificate (--tls-cert) and its key (--tls-key)");
    }
    I.tls.emplace(ssl::context::tls_server);
    I.tls->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 | ssl::context::no_sslv3 |
                       ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1 | ssl::context::single_dh_use);
    // TLS 1.2 offers AEAD suites with forward secrecy only (no CBC: Lucky13
    // and its kin); TLS 1.3's suites are all AEAD already.
    if (SSL_CTX_set_cipher_list(I.tls->native_handle(), kTls12Ciphers) != 1) {
      return Internal("TLS: OpenSSL knows none of the AEAD cipher suites");
    }
    SSL_CTX_set_options(I.tls->native_handle(), SSL_OP_CIPHER_SERVER_PREFERENCE);
    beast::error_code ec;
    I.tls->use_certificate_chain_file(I.opt.tls_cert, ec);
    if (ec) return InvalidArgument(fmt::format("--tls-cert {}: {}", I.opt.tls_cert, ec.message()));
    I.tls->use_private_key_file(I.opt.tls_key, ssl::context::pem, ec);
    if (ec) return InvalidArgument(fmt::format("--tls-key {}: {}", I.opt.tls_key, ec.message()));
  }
  beast::error_code ec;
  auto address = net::ip::make_address(I.opt.host, ec);
  if (ec) return InvalidArgument(fmt::format("--host: \"{}\" is not an IP address", I.opt.host));
  tcp::endpoint ep(address, static_cast<unsigned short>(I.opt.port));
  I.acceptor.open(ep.protocol(), ec);
  if (!ec) fcntl(I.acceptor.native_handle(), F_SETFD, FD_CLOEXEC);
  if (!ec) I.acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) I.acceptor.bind(ep, ec);
  if (!ec) I.acceptor.listen(net::socket_base::max_listen_connections, ec);
  if (ec) {
    return Unavailable(
        fmt::format("cannot listen on {}:{}: {} (is another server using it?)", I.opt.host, I.opt.port, ec.message()));
  }
  port_ = I.acceptor.local_endpoint().port();
  I.api_pool = std::make_unique<net::thread_pool>(std::max(1, I.opt.api_threads));
  I.agent_pool = std::make_unique<net::thread_pool>(std::max(1, I.opt.agent_threads));
  NamePool(*I.api_pool, std::max(1, I.opt.api_threads), "http-api");
  NamePool(*I.agent_pool, std::max(1, I.opt.agent_threads), "http-agent");
  I.Accept();
  for (int i = 0; i < std::max(1, I.opt.io_threads); ++i) {
    // A throw out of a connection's handler (Beast throws for a few malformed
    // inputs, e.g. a trailer field over 64 KiB) ends that connection: its
    // handlers and session are destroyed as the exception leaves run(); the
    // server goes on.
    I.io_threads.emplace_back([&I] {
      NameThisThread("http-io");
      while (true) {
        try {
          I.ioc.run();
          return;
        } catch (const std::exception& e) {
          spdlog::error("http: a connection's handler threw, and the connection was closed: {}", e.what());
        }
      }
    });
  }
  return Status::Ok();
}

void Server::Stop() {
  Impl& I = *impl_;
  if (I.stopping.exchange(true)) return;
  net::post(I.ioc, [&I] {
    beast::error_code ec;
    I.acceptor.close(ec);
  });
  std::vector<std::shared_ptr<SessionBase>> open;
  {
    std::lock_guard<std::mutex> l(I.sessions_mu);
    for (auto& [id, weak] : I.sessions) {
      if (auto s = weak.lock()) open.push_back(std::move(s));
    }
  }
  // Outside the lock: the last reference may go here, and a session's
  // destructor takes sessions_mu.
  for (auto& s : open) s->Close();
  open.clear();
  if (I.api_pool) I.api_pool->join();
  if (I.agent_pool) I.agent_pool->join();
  I.ioc.stop();
  for (auto& t : I.io_threads) t.join();
  I.io_threads.clear();
}

std::shared_ptr<Timer> Server::After(std::chrono::milliseconds delay, std::function<void()> fn) {
  auto t = std::make_shared<AsioTimer>(impl_->ioc);
  t->Start(delay, std::move(fn));
  return t;
}

void Server::Post(Pool pool, std::function<void()> fn) {
  if (!impl_->api_pool) {
    // Not started (tests and fuzzing drive Dispatch): queued and run by
    // Dispatch on its own thread, never inside the caller (which may hold locks).
    std::lock_guard<std::mutex> l(impl_->inline_mu);
    impl_->inline_queue.push_back(std::move(fn));
    return;
  }
  net::post(impl_->PoolFor(pool), std::move(fn));
}

void Server::Dispatch(Request req, Responder respond) {
  Impl& I = *impl_;
  req.id = I.next_id++;
  if (Status st = ParseTarget(req.target, &req.path, &req.query); !st.ok()) return respond(FromStatus(st));
  const Router::Route* route = nullptr;
  if (auto err = I.Route(req, &route)) return respond(std::move(*err));
  if (auto err = I.Authenticate(req, *route)) return respond(std::move(*err));
  if (req.body.size() > route->options.max_body) {
    return respond(ErrorResponse(413, "InvalidArgument", fmt::format("body: more than this call accepts ({} bytes)",
                                                                     route->options.max_body)));
  }
  // Only a streamed body moves to its reader: the others reach the handler whole.
  if (route->options.stream_body) {
    req.body_reader = std::make_shared<WholeBodyReader>(std::move(req.body));
    req.body.clear();
  }
  if (route->options.takeover) req.connection = std::make_shared<NoConnection>(respond);
  Impl::RunHandler(*route, req, respond, I.opt.before_respond);
  RunQueued();
}

void Server::RunQueued() {
  while (true) {
    std::function<void()> fn;
    {
      std::lock_guard<std::mutex> l(impl_->inline_mu);
      if (impl_->inline_queue.empty()) return;
      fn = std::move(impl_->inline_queue.front());
      impl_->inline_queue.pop_front();
    }
    fn();
  }
}

}  // namespace ringmaster::http
