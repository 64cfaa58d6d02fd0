// Splicing a taken-over client connection (RouteOptions::takeover) with an
// upstream: connect, preface, the upstream's response head (rewritten by the
// route), then raw bytes both ways. Internal to http/; session.cc
// instantiates it. Thread-safety: everything runs on the connection's strand.
#pragma once

#include <algorithm>
#include <cstdlib>
#include <optional>

#include "http/http_session.h"

namespace ringmaster::http {

// The Connection a takeover handler gets: Splice hands the upstream to the
// session's strand, at most once and never after the Responder was called.
class StrandConnection final : public Connection {
 public:
  explicit StrandConnection(std::function<void(Upstream)> splice) : splice_(std::move(splice)) {}
  void Splice(Upstream upstream) override { splice_(std::move(upstream)); }

 private:
  std::function<void(Upstream)> splice_;
};

// "HTTP/1.1 200 OK\r\nname: value\r\n...\r\n".
inline std::string SerializeHead(const UpstreamHead& head) {
  std::string out = fmt::format("HTTP/1.1 {} {}\r\n", head.status, head.reason);
  for (const auto& [name, value] : head.headers) out += fmt::format("{}: {}\r\n", name, value);
  return out + "\r\n";
}

// An upgrade request's bytes past its own body go upstream only once the
// upstream switched protocols (101): after any other answer they would be
// further requests, which must each pass the route's handler (its checks,
// its rewriting of the head), so they are never read.
template <class Session>
class Splicer : public std::enable_shared_from_this<Splicer<Session>> {
 public:
  Splicer(std::shared_ptr<Session> session, Connection::Upstream upstream)
      : s_(std::move(session)),
        up_(std::move(upstream)),
        resolver_(s_->Tcp().get_executor()),
        upstream_(s_->Tcp().get_executor()),
        idle_(s_->Tcp().get_executor()) {}

  void Start() {
    // The body was never read: no lingering drain. Reads stay pending from
    // now on, so the session's close is abrupt (no TLS close_notify).
    s_->body_read_ = true;
    s_->watching_ = true;
    s_->Tcp().expires_never();
    upgrade_ = s_->req_.AsksUpgrade();
    if (upgrade_ && s_->req_.Header("transfer-encoding").empty()) {
      // A chunked body would have to be parsed to find its end: none goes before the answer.
      body_left_ = std::strtoull(s_->req_.Header("content-length").c_str(), nullptr, 10);
    }
    last_ = SteadyClock::now();
    ArmIdle(s_->impl_.opt.takeover_idle_timeout);
    upstream_.expires_after(s_->impl_.opt.takeover_connect_timeout);
    resolver_.async_resolve(up_.host, std::to_string(up_.port),
                            [self = this->shared_from_this()](beast::error_code ec, tcp::resolver::results_type r) {
                              if (ec) return self->Fail(502, "Unavailable", "cannot reach the upstream: " + ec.message());
                              self->upstream_.async_connect(
                                  r, [self](beast::error_code ec, const tcp::endpoint&) { self->OnConnect(ec); });
                            });
  }

 private:
  void OnConnect(beast::error_code ec) {
    if (ended_) return;
    if (ec == beast::error::timeout) {
      return Fail(504, "DeadlineExceeded",
                  fmt::format("the upstream accepted no connection within {} ms",
                              s_->impl_.opt.takeover_connect_timeout.count()));
    }
    if (ec) return Fail(502, "Unavailable", "cannot reach the upstream: " + ec.message());
    upstream_.expires_never();  // the idle timer watches the pair from now on
    beast::error_code ignored;
    upstream_.socket().set_option(tcp::no_delay(true), ignored);
    fcntl(upstream_.socket().native_handle(), F_SETFD, FD_CLOEXEC);
    // What the client sent after its head (a body's start) follows the preface.
    auto out = std::make_shared<std::string>(std::move(up_.preface));
    std::string buffered = beast::buffers_to_string(s_->buffer_.data());
    s_->buffer_.consume(s_->buffer_.size());
    if (upgrade_ && buffered.size() > body_left_) held_ = buffered.substr(body_left_);
    buffered.resize(buffered.size() - held_.size());
    body_left_ -= std::min<uint64_t>(body_left_, buffered.size());
    out->append(buffered);
    net::async_write(upstream_, net::buffer(*out), [self = this->shared_from_this(), out](beast::error_code ec, size_t) {
      if (ec) return self->Fail(502, "Unavailable", "cannot write to the upstream: " + ec.message());
      if (!self->ClientHeld()) self->PumpClient();
      self->ReadHead();
    });
  }

  // True while an upgrade request's body has been sent whole and no 101 came (yet).
  bool ClientHeld() const { return upgrade_ && status_ != 101 && body_left_ == 0; }

  void PumpClient() {
    if (ClientHeld()) {
      client_reading_ = false;
      return;
    }
    client_reading_ = true;
    const size_t want = upgrade_ && status_ != 101 ? std::min<uint64_t>(c2u_.size(), body_left_) : c2u_.size();
    s_->stream().async_read_some(net::buffer(c2u_.data(), want), [self = this->shared_from_this()](beast::error_code ec, size_t n) {
      if (ec || self->ended_) return self->End();
      self->last_ = SteadyClock::now();
      if (self->upgrade_ && self->status_ != 101) self->body_left_ -= std::min<uint64_t>(self->body_left_, n);
      net::async_write(self->upstream_, net::buffer(self->c2u_.data(), n), [self](beast::error_code ec, size_t) {
        if (ec) return self->End();
        self->PumpClient();
      });
    });
  }

  // After the 101: what the client sent past its request, then everything.
  void ResumeClient() {
    if (client_reading_) return;
    if (held_.empty()) return PumpClient();
    auto out = std::make_shared<std::string>(std::move(held_));
    held_.clear();
    client_reading_ = true;
    net::async_write(upstream_, net::buffer(*out), [self = this->shared_from_this(), out](beast::error_code ec, size_t) {
      if (ec) return self->End();
      self->PumpClient();
    });
  }

  void ReadHead() {
    parser_.emplace();
    parser_->header_limit(64 << 10);
    parser_->body_limit(std::numeric_limits<std::uint64_t>::max());
    bhttp::async_read_header(upstream_, up_buf_, *parser_,
                             [self = this->shared_from_this()](beast::error_code ec, size_t) { self->OnHead(ec); });
  }

  void OnHead(beast::error_code ec) {
    if (ended_) return;
    if (ec) return Fail(502, "Unavailable", "the upstream sent no valid response: " + ec.message());
    last_ = SteadyClock::now();
    const auto& res = parser_->get();
    UpstreamHead head;
    head.status = static_cast<int>(res.result_int());
    head.reason = std::string(res.reason());
    for (const auto& f : res) head.headers.emplace_back(std::string(f.name_string()), std::string(f.value()));
    const bool interim = head.status / 100 == 1 && head.status != 101;  // 100 Continue: a final head follows
    if (!interim) {
      if (up_.rewrite_head) up_.rewrite_head(head);
      if (head.status != 101) {
        std::erase_if(head.headers,
                      [](const auto& h) { return IEquals(h.first, "connection") || IEquals(h.first, "keep-alive"); });
        head.headers.emplace_back("Connection", "close");
      }
      status_ = head.status;
      if (upgrade_ && status_ != 101) {
        // The connection ends with this answer: where its body ends, if the head says.
        if (status_ == 204 || status_ == 304 || s_->req_.method == "HEAD") res_left_ = 0;
        else if (parser_->content_length()) res_left_ = *parser_->content_length();
      }
    }
    auto out = std::make_shared<std::string>(SerializeHead(head));
    if (!interim) {
      std::string body = beast::buffers_to_string(up_buf_.data());
      up_buf_.consume(up_buf_.size());
      if (res_left_) {
        body.resize(std::min<uint64_t>(body.size(), *res_left_));
        *res_left_ -= body.size();
      }
      out->append(body);
    }
    net::async_write(s_->stream(), net::buffer(*out),
                     [self = this->shared_from_this(), out, interim](beast::error_code ec, size_t) {
                       if (ec) return self->End();
                       if (interim) return self->ReadHead();
                       if (self->upgrade_ && self->status_ == 101) self->ResumeClient();
                       self->PumpUpstream();
                     });
  }

  void PumpUpstream() {
    if (res_left_ && *res_left_ == 0) return End();
    const size_t want = res_left_ ? std::min<uint64_t>(u2c_.size(), *res_left_) : u2c_.size();
    upstream_.async_read_some(net::buffer(u2c_.data(), want), [self = this->shared_from_this()](beast::error_code ec, size_t n) {
      if (ec || self->ended_) return self->End();
      self->last_ = SteadyClock::now();
      if (self->res_left_) *self->res_left_ -= std::min<uint64_t>(*self->res_left_, n);
      net::async_write(self->s_->stream(), net::buffer(self->u2c_.data(), n), [self, n](beast::error_code ec, size_t) {
        if (ec) return self->End();
        self->bytes_ += n;
        self->PumpUpstream();
      });
    });
  }

  void ArmIdle(std::chrono::milliseconds after) {
    idle_.expires_after(after);
    idle_.async_wait([self = this->shared_from_this()](beast::error_code ec) {
      if (ec || self->ended_) return;
      const auto idle = self->s_->impl_.opt.takeover_idle_timeout;
      const auto quiet = std::chrono::duration_cast<std::chrono::milliseconds>(SteadyClock::now() - self->last_);
      if (quiet < idle) return self->ArmIdle(idle - quiet);
      if (self->status_ == 0) return self->Fail(504, "DeadlineExceeded", "the upstream did not answer in time");
      self->End();
    });
  }

  void CloseUpstream() {
    ended_ = true;
    idle_.cancel();
    resolver_.cancel();
    beast::error_code ignored;
    upstream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
    upstream_.socket().close(ignored);
  }

  // Before any head reached the client: a JSON error instead.
  void Fail(int status, std::string_view code, std::string message) {
    if (ended_) return;
    if (status_ != 0) return End();
    CloseUpstream();
    spdlog::info("request {}: proxied to {}:{}: {}", s_->req_.id, up_.host, up_.port, message);
    s_->Finish(ErrorResponse(status, code, message));
  }

  // Either side closed (or the pair idled): close both and log the request.
  void End() {
    if (ended_) return;
    CloseUpstream();
    s_->status_ = status_ != 0 ? status_ : 499;  // 499: the client went away before an answer
    s_->bytes_ = bytes_;
    s_->Done(net::error::operation_aborted, false);
  }

  std::shared_ptr<Session> s_;
  Connection::Upstream up_;
  tcp::resolver resolver_;
  beast::tcp_stream upstream_;
  net::steady_timer idle_;
  beast::flat_buffer up_buf_;
  std::optional<bhttp::response_parser<bhttp::empty_body>> parser_;
  std::array<char, 16384> c2u_{}, u2c_{};
  SteadyClock::time_point last_;
  bool ended_ = false;
  int status_ = 0;  // the final head's, once sent to the client
  bool upgrade_ = false;         // the request asks to switch protocols (Request::AsksUpgrade)
  uint64_t body_left_ = 0;       // of an upgrade request's body, still to forward before the answer
  std::string held_;             // what the client sent past it, until a 101
  bool client_reading_ = false;  // a PumpClient chain is running
  std::optional<uint64_t> res_left_;  // a non-101 answer to an upgrade: its body's bytes still to send
  uint64_t bytes_ = 0;
};

template <class Derived>
std::shared_ptr<Connection> HttpSession<Derived>::MakeConnection(std::shared_ptr<std::atomic<bool>> once) {
  return std::make_shared<StrandConnection>([self = self().shared_from_this(), once](Connection::Upstream up) {
    if (once->exchange(true)) return;
    net::post(self->Tcp().get_executor(), [self, up = std::move(up)]() mutable { self->BeginSplice(std::move(up)); });
  });
}

template <class Derived>
void HttpSession<Derived>::BeginSplice(Connection::Upstream upstream) {
  if (closed_) return;
  std::make_shared<Splicer<Derived>>(self().shared_from_this(), std::move(upstream))->Start();
}

}  // namespace ringmaster::http
