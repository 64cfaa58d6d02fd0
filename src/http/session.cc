// Connections of the HTTP server: one HTTP/1.1 session per connection over a
// plain or TLS stream, the sniffer that tells TLS from plain HTTP on a TLS
// port, and the accept loop (the canned refusals are in reject.cc).
#include "http/takeover.h"

namespace ringmaster::http {
namespace {

class PlainSession final : public HttpSession<PlainSession>, public std::enable_shared_from_this<PlainSession> {
 public:
  PlainSession(Server::Impl& impl, beast::tcp_stream stream, beast::flat_buffer buffer, std::string remote)
      : HttpSession(impl, std::move(buffer), std::move(remote)), stream_(std::move(stream)) {}
  beast::tcp_stream& stream() { return stream_; }
  void Run() {
    Register();
    ReadHead();
  }
  void ShutdownStream(bool linger, bool abrupt) {
    beast::error_code ec;
    if (!linger || abrupt) {
      stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
      stream_.socket().close(ec);
      return;
    }
    // A lingering close: stop sending, then read and drop what the client
    // still sends (at most 1 MiB, for at most 2 s) so that it reads our answer.
    stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
    stream_.expires_after(std::chrono::seconds(2));
    Drain(1 << 20);
  }

 private:
  void Drain(size_t left) {
    auto buf = std::make_shared<std::array<char, 16384>>();
    stream_.async_read_some(net::buffer(*buf), [self = shared_from_this(), buf, left](beast::error_code ec, std::size_t n) {
      if (ec || n >= left) {
        beast::error_code ignored;
        self->stream_.socket().close(ignored);
        return;
      }
      self->Drain(left - n);
    });
  }

  beast::tcp_stream stream_;
};

class TlsSession final : public HttpSession<TlsSession>, public std::enable_shared_from_this<TlsSession> {
 public:
  TlsSession(Server::Impl& impl, beast::tcp_stream stream, ssl::context& ctx, beast::flat_buffer buffer,
             std::string remote)
      : HttpSession(impl, std::move(buffer), std::move(remote)), stream_(std::move(stream), ctx) {}
  beast::ssl_stream<beast::tcp_stream>& stream() { return stream_; }
  void Run() {
    Register();
    waiting_since_ns = Now();  // the handshake counts as waiting for a head
    Tcp().expires_after(impl_.opt.header_timeout);
    stream_.async_handshake(ssl::stream_base::server, buffer_.data(),
                            [self = shared_from_this()](beast::error_code ec, std::size_t used) {
                              if (ec) return self->ShutdownStream(false, true);
                              self->buffer_.consume(used);
                              self->ReadHead();
                            });
  }
  void ShutdownStream(bool linger, bool abrupt) {
    if (linger || abrupt) {  // no orderly close_notify over pending operations or an unread body
      beast::error_code ec;
      Tcp().socket().close(ec);
      return;
    }
    Tcp().expires_after(std::chrono::seconds(5));
    stream_.async_shutdown([self = shared_from_this()](beast::error_code) {
      beast::error_code ec;
      self->Tcp().socket().close(ec);
    });
  }

 private:
  beast::ssl_stream<beast::tcp_stream> stream_;
};

// With TLS on: peeks at the first bytes; a TLS handshake goes on as HTTPS,
// anything else gets a plain-text 400 that says to use https.
class DetectSession final : public SessionBase, public std::enable_shared_from_this<DetectSession> {
 public:
  DetectSession(Server::Impl& impl, tcp::socket socket, std::string remote)
      : impl_(impl), stream_(std::move(socket)), remote_(std::move(remote)) {
    ++impl_.connections;  // a connection still in its handshake counts too, and may be evicted
    waiting_since_ns = Now();
  }
  ~DetectSession() override {
    --impl_.connections;
    std::lock_guard<std::mutex> l(impl_.sessions_mu);
    impl_.sessions.erase(id_);
  }
  void Close() override {
    net::post(stream_.get_executor(), [self = shared_from_this()] {
      beast::error_code ignored;
      self->stream_.socket().close(ignored);
    });
  }
  void Run() {
    id_ = impl_.next_id++;
    {
      std::lock_guard<std::mutex> l(impl_.sessions_mu);
      impl_.sessions[id_] = shared_from_this();
    }
    stream_.expires_after(impl_.opt.header_timeout);
    beast::async_detect_ssl(stream_, buffer_, [self = shared_from_this()](beast::error_code ec, bool is_tls) {
      if (ec) {
        beast::error_code ignored;
        self->stream_.socket().close(ignored);
        return;
      }
      if (is_tls) {
        std::make_shared<TlsSession>(self->impl_, std::move(self->stream_), *self->impl_.tls, std::move(self->buffer_),
                                     self->remote_)
            ->Run();
        return;
      }
      Reject(std::move(self->stream_), 400, "Bad Request", "InvalidArgument",
                                      "this server speaks HTTPS only: use an https:// URL");
    });
  }

 private:
  Server::Impl& impl_;
  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  std::string remote_;
  uint64_t id_ = 0;
};

}  // namespace

void Server::Impl::Accept() {
  acceptor.async_accept(net::make_strand(ioc), [this](beast::error_code ec, tcp::socket socket) {
    if (ec) {
      if (ec == net::error::operation_aborted || stopping) return;
      spdlog::warn("http: accept: {}", ec.message());
      if (ec == net::error::no_descriptors) {
        // Out of file descriptors: back off briefly rather than spin.
        auto t = std::make_shared<net::steady_timer>(ioc, std::chrono::milliseconds(100));
        t->async_wait([this, t](beast::error_code) { Accept(); });
        return;
      }
      return Accept();
    }
    beast::error_code ignored;
    socket.set_option(tcp::no_delay(true), ignored);
    // Never inherited by a task's shim (Asio 1.74 accepts without SOCK_CLOEXEC).
    fcntl(socket.native_handle(), F_SETFD, FD_CLOEXEC);
    auto ep = socket.remote_endpoint(ignored);
    std::string remote = ignored ? std::string("?") : ep.address().to_string();
    if (connections >= opt.max_connections && !EvictLongestWaiting()) {
      Reject(beast::tcp_stream(std::move(socket)), 503, "Service Unavailable", "Unavailable",
                                      "too many connections; try again later");
    } else if (tls) {
      std::make_shared<DetectSession>(*this, std::move(socket), std::move(remote))->Run();
    } else {
      std::make_shared<PlainSession>(*this, beast::tcp_stream(std::move(socket)), beast::flat_buffer(), std::move(remote))
          ->Run();
    }
    Accept();
  });
}

}  // namespace ringmaster::http
