// The HTTP server's per-connection state machine (HttpSession), a template
// over the stream (plain or TLS), shared by session.cc (which instantiates it)
// and takeover.h (splicing a taken-over connection). Internal to http/.
// Thread-safety: a session runs on its connection's strand.
#pragma once

#include "http/server_impl.h"

namespace ringmaster::http {

// One HTTP/1.1 connection over a plain or TLS stream (CRTP, after Beast's
// advanced_server_flex example). Reads one request at a time: the head, then
// (after routing and authentication) the body, then waits for the handler's
// response, writes it, and reads the next request if the connection is kept.
template <class Derived>
class HttpSession : public SessionBase {
 public:
  HttpSession(Server::Impl& impl, beast::flat_buffer buffer, std::string remote)
      : impl_(impl), buffer_(std::move(buffer)), remote_(std::move(remote)) {
    ++impl_.connections;
    // What is read but not yet parsed: a head, a chunk header, a trailer.
    // Bodies go straight into the request, so this bound is what stops an
    // endless chunk extension or trailer from growing without limit; and at
    // 64 KiB no trailer field can reach Beast's 64 KiB field limit (it throws).
    buffer_.max_size(std::max<size_t>(impl_.opt.max_header_bytes + 4096, 64 << 10));
  }
  ~HttpSession() override {
    if (source_) source_->Cancel();
    Release();
    if (taken_) impl_.ReleaseTakeover(taken_by_);
    --impl_.connections;
    std::lock_guard<std::mutex> l(impl_.sessions_mu);
    impl_.sessions.erase(session_id_);
  }

  void Register() {
    session_id_ = impl_.next_id++;
    std::lock_guard<std::mutex> l(impl_.sessions_mu);
    impl_.sessions[session_id_] = self().shared_from_this();
  }

  void Close() override {
    net::post(Tcp().get_executor(), [self = self().shared_from_this()] { self->Shutdown(/*force=*/true); });
  }

 protected:
  Derived& self() { return static_cast<Derived&>(*this); }
  beast::tcp_stream& Tcp() { return beast::get_lowest_layer(self().stream()); }

  void ReadHead() {
    if (impl_.stopping) return Shutdown();
    waiting_since_ns = Now();
    parser_.emplace();
    parser_->header_limit(static_cast<std::uint32_t>(impl_.opt.max_header_bytes));
    // Set per route before the body is read. Not boost::none: Boost 1.74
    // compares the Content-Length with the optional, and any length > none.
    parser_->body_limit(std::numeric_limits<std::uint64_t>::max());
    Tcp().expires_after(first_ ? impl_.opt.header_timeout : impl_.opt.idle_timeout);
    // The whole head first, to look at its lines as sent: Beast's parser
    // joins an obs-fold into the value, where a proxy may read it otherwise.
    obs_fold_ = false;
    head_scanned_ = 0;
    ReadHeadBytes();
  }

  // Reads until the buffer holds a whole head ("\r\n\r\n"), then checks it
  // and hands it to the parser (which reads nothing more for it).
  void ReadHeadBytes() {
    const std::string_view have(static_cast<const char*>(buffer_.data().data()), buffer_.size());
    if (const size_t end = have.find("\r\n\r\n", head_scanned_); end != std::string_view::npos) {
      return OnHeadBytes(have.substr(0, end + 4));
    }
    head_scanned_ = have.size() < 3 ? 0 : have.size() - 3;  // a delimiter may straddle reads
    if (buffer_.size() >= buffer_.max_size()) return OnHead(bhttp::error::header_limit, 0);
    const size_t room = std::min<size_t>(buffer_.max_size() - buffer_.size(), 16 << 10);
    self().stream().async_read_some(buffer_.prepare(room), [self = self().shared_from_this()](beast::error_code ec, std::size_t n) {
      self->buffer_.commit(n);
      if (ec) return self->OnHead(ec, 0);
      self->ReadHeadBytes();
    });
  }

  void OnHeadBytes(std::string_view head) {
    for (size_t i = head.find("\r\n"); i != std::string_view::npos && i + 2 < head.size(); i = head.find("\r\n", i + 2)) {
      if (head[i + 2] == ' ' || head[i + 2] == '\t') {
        obs_fold_ = true;
        return OnHead(bhttp::error::bad_value, 0);
      }
    }
    bhttp::async_read_header(self().stream(), buffer_, *parser_,
                             beast::bind_front_handler(&HttpSession::OnHead, self().shared_from_this()));
  }

  void OnHead(beast::error_code ec, std::size_t) {
    waiting_since_ns = 0;
    start_ = SteadyClock::now();
    req_ = Request();
    body_read_ = false;
    req_.id = impl_.next_id++;
    req_.remote = remote_;
    route_ = nullptr;
    if (ec) {
      if (ec == bhttp::error::end_of_stream || ec == net::error::eof || ec == beast::error::timeout ||
          ec == net::error::operation_aborted || ec == net::error::connection_reset || ec == ssl::error::stream_truncated) {
        return Shutdown();  // the client went away or stayed silent: nothing to answer
      }
      keep_alive_ = false;
      if (obs_fold_) {
        return Finish(ErrorResponse(400, "InvalidArgument",
                                    "request header: a line starts with a space or tab (obs-fold is not accepted)"));
      }
      if (ec == bhttp::error::header_limit) {
        return Finish(ErrorResponse(431, "InvalidArgument",
                                    fmt::format("request header: larger than {} bytes", impl_.opt.max_header_bytes)));
      }
      return Finish(ErrorResponse(400, "InvalidArgument", "malformed request: " + ec.message()));
    }
    const auto& head = parser_->get();
    req_.method = std::string(head.method_string());
    req_.target = std::string(head.target());
    int content_lengths = 0, transfer_encodings = 0;
    for (const auto& f : head) {
      std::string name(f.name_string());
      std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
      if (name == "content-length") ++content_lengths;
      if (name == "transfer-encoding") ++transfer_encodings;
      req_.headers.emplace_back(std::move(name), std::string(f.value()));
    }
    keep_alive_ = head.keep_alive();
    body_pending_ = !parser_->is_done();
    // Framing that proxies and servers may read differently is refused (request smuggling).
    if (content_lengths > 1 || req_.Header("content-length").find(',') != std::string::npos) {
      keep_alive_ = false;
      return Finish(ErrorResponse(400, "InvalidArgument", "Content-Length: given more than once"));
    }
    if (transfer_encodings > 0) {
      if (content_lengths > 0) {
        keep_alive_ = false;
        return Finish(ErrorResponse(400, "InvalidArgument", "Transfer-Encoding and Content-Length: send one, not both"));
      }
      if (transfer_encodings > 1 || !IEquals(Trim(req_.Header("transfer-encoding")), "chunked")) {
        keep_alive_ = false;
        return Finish(ErrorResponse(400, "InvalidArgument", "Transfer-Encoding: only \"chunked\" is supported"));
      }
    }
    if (req_.target.size() > kMaxTarget) {
      keep_alive_ = false;
      return Finish(ErrorResponse(414, "InvalidArgument", fmt::format("request target: longer than {} bytes", kMaxTarget)));
    }
    if (Status st = ParseTarget(req_.target, &req_.path, &req_.query); !st.ok()) {
      keep_alive_ = keep_alive_ && !body_pending_;
      return Finish(FromStatus(st));
    }
    if (auto err = impl_.Route(req_, &route_)) {
      keep_alive_ = keep_alive_ && !body_pending_;
      return Finish(std::move(*err));
    }
    // A route that never blocks, asks no credentials and gets no body is
    // answered here, on the I/O thread: no hop to a pool and back.
    if (route_->options.inline_handler && !route_->options.authenticate && !body_pending_) {
      body_read_ = true;
      return Server::Impl::RunHandler(*route_, req_, MakeResponder(), impl_.opt.before_respond);
    }
    // Authenticate before a single body byte is read. With no body to read,
    // the handler runs right after, on the same pool thread (one hop, not
    // two): the session waits meanwhile and touches neither the request nor
    // the parser until the answer is posted back.
    net::post(impl_.PoolFor(route_->options.pool), [self = self().shared_from_this()] {
      auto err = self->impl_.Authenticate(self->req_, *self->route_);
      if (!err && self->route_->options.takeover) return self->StartTakeover();
      if (!err && !self->body_pending_ && !self->route_->options.stream_body) {
        self->body_read_ = true;
        auto req = std::make_shared<Request>(self->req_);  // req_ stays for the access record
        req->body = std::move(self->parser_->get().body());
        if (req->body.size() > self->route_->options.max_body) {
          return self->RespondLater(ErrorResponse(413, "InvalidArgument",
                                                  fmt::format("body: more than this call accepts ({} bytes)",
                                                              self->route_->options.max_body)));
        }
        return Server::Impl::RunHandler(*self->route_, *req, self->MakeResponder(), self->impl_.opt.before_respond);
      }
      net::post(self->Tcp().get_executor(), [self, err = std::move(err)]() mutable { self->OnAuthenticated(std::move(err)); });
    });
  }

  // A Responder for the request in hand: called once, from any thread; the
  // answer is written on the session's strand.
  Responder MakeResponder(std::shared_ptr<std::atomic<bool>> once = std::make_shared<std::atomic<bool>>(false)) {
    return [self = self().shared_from_this(), once](Response r) {
      if (once->exchange(true)) return;
      net::post(self->Tcp().get_executor(), [self, r = std::move(r)]() mutable { self->Finish(std::move(r)); });
    };
  }
  void RespondLater(Response r) { MakeResponder()(std::move(r)); }

  // ---- taken-over connections (RouteOptions::takeover; takeover.h)

  // On the pool thread, once authenticated: the handler gets the connection.
  // The body stays unread: it is forwarded raw to the upstream.
  void StartTakeover() {
    keep_alive_ = false;
    if (Status st = impl_.AcquireTakeover(req_.principal.name); !st.ok()) return RespondLater(FromStatus(st));
    taken_by_ = req_.principal.name;
    taken_ = true;
    auto once = std::make_shared<std::atomic<bool>>(false);
    auto req = std::make_shared<Request>(req_);
    req->connection = MakeConnection(once);
    Server::Impl::RunHandler(*route_, *req, MakeResponder(once), impl_.opt.before_respond);
  }
  std::shared_ptr<Connection> MakeConnection(std::shared_ptr<std::atomic<bool>> once);
  // On the strand: the splice takes over the connection until it ends (Splicer::End logs it).
  void BeginSplice(Connection::Upstream upstream);
  template <class>
  friend class Splicer;

  void OnAuthenticated(std::optional<Response> err) {
    if (err) {
      keep_alive_ = keep_alive_ && !body_pending_;
      return Finish(std::move(*err));
    }
    const size_t max_body = route_->options.max_body;
    auto length = parser_->content_length();
    if (length && *length > max_body) {
      keep_alive_ = false;
      return Finish(ErrorResponse(413, "InvalidArgument",
                                  fmt::format("body: {} bytes, more than this call accepts ({})", *length, max_body)));
    }
    if (!body_pending_) return Dispatch();
    // Memory for bodies is a budget: one of its own for agents, and for
    // everyone else a share per principal within a shared whole, so no user
    // can hold all of it (and never the agents').
    const size_t want = route_->options.stream_body ? 2 * kBodyPiece : length ? static_cast<size_t>(*length) : max_body;
    if (Status st = impl_.Reserve(route_->options.pool, req_.principal.name, want); !st.ok()) {
      keep_alive_ = false;
      return Finish(FromStatus(st));
    }
    reserved_ = want;
    reserved_pool_ = route_->options.pool;
    reserved_by_ = req_.principal.name;
    parser_->body_limit(max_body);
    const bool expect_continue = IEquals(req_.Header("expect"), "100-continue");
    // A streamed body's handler may still refuse (a quota, a permission): the
    // client is told to go on only when the handler first asks for the body.
    if (route_->options.stream_body) {
      continue_pending_ = expect_continue;
      return Dispatch();
    }
    if (expect_continue) {
      return WriteContinue([self = self().shared_from_this()] { self->ReadBody(); });
    }
    ReadBody();
  }

  void WriteContinue(std::function<void()> then) {
    static const std::string kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
    Tcp().expires_after(impl_.opt.write_timeout);
    net::async_write(self().stream(), net::buffer(kContinue),
                     [self = self().shared_from_this(), then = std::move(then)](beast::error_code ec, std::size_t) {
                       if (ec) return self->Shutdown();
                       then();
                     });
  }

  // ---- streamed request bodies (RouteOptions::stream_body)

  class PieceReader : public BodyReader {
   public:
    explicit PieceReader(std::shared_ptr<Derived> session) : session_(std::move(session)) {}
    void Read(Next next) override {
      auto s = session_;
      net::post(s->Tcp().get_executor(), [s, next = std::move(next)]() mutable { s->ReadPiece(std::move(next)); });
    }

   private:
    std::shared_ptr<Derived> session_;
  };

  // A streamed body is read one piece ahead: while the handler works on one
  // piece (hashing it, writing it to disk or S3), the next fills from the
  // socket into the other buffer. The handler is done with a piece when it
  // asks for the next, so the buffers alternate.
  struct Filled {
    Status status;
    size_t n = 0;
    bool last = false;
    int buf = 0;
  };

  void DeliverPiece(BodyReader::Next next, Filled f) {
    net::post(impl_.PoolFor(route_->options.pool),
              [self = self().shared_from_this(), next = std::move(next), f = std::move(f)] {
                next(f.status, std::string_view(self->pieces_[f.buf].data(), f.n), f.last);
              });
  }

  // The handler asks for the next piece (on the I/O thread).
  void ReadPiece(BodyReader::Next next) {
    if (ready_) {  // it was read ahead
      Filled f = std::move(*ready_);
      ready_.reset();
      ReadAhead(f);
      return DeliverPiece(std::move(next), std::move(f));
    }
    if (filling_) {
      waiting_ = std::move(next);
      return;
    }
    if (closed_ || !stream_parser_) return DeliverPiece(std::move(next), {Aborted("the connection closed"), 0, true, 0});
    waiting_ = std::move(next);
    if (continue_pending_) {  // the first ask: now the client may send
      continue_pending_ = false;
      filling_ = true;  // a Read meanwhile waits for this piece
      return WriteContinue([self = self().shared_from_this()] {
        self->filling_ = false;
        self->StartFill(0);
      });
    }
    StartFill(0);
  }

  // After handing over piece `f`: fill the other buffer unless the body ended.
  void ReadAhead(const Filled& f) {
    if (f.status.ok() && !f.last && !closed_) StartFill(1 - f.buf);
  }

  void StartFill(int buf) {
    if (stream_parser_->is_done()) {
      body_read_ = true;
      return OnFilled({Status::Ok(), 0, true, buf});
    }
    pieces_[buf].resize(kBodyPiece);
    fill_buf_ = buf;
    piece_filled_ = 0;
    filling_ = true;
    ReadMore();
  }

  // Fills the piece before handing it over: a socket read brings at most what
  // the connection buffer holds (64 KiB), and each hand-over to the pool and
  // back costs two context switches.
  void ReadMore() {
    auto& body = stream_parser_->get().body();
    body.data = pieces_[fill_buf_].data() + piece_filled_;
    body.size = kBodyPiece - piece_filled_;
    body.more = true;
    Tcp().expires_after(impl_.opt.body_timeout);
    bhttp::async_read_some(self().stream(), buffer_, *stream_parser_,
                           [self = self().shared_from_this()](beast::error_code ec, std::size_t) { self->OnPiece(ec); });
  }

  void OnPiece(beast::error_code ec) {
    if (ec == bhttp::error::need_buffer) ec = {};
    if (ec) {
      keep_alive_ = false;
      Status st = ec == bhttp::error::body_limit
                      ? ResourceExhausted(fmt::format("body: more than this call accepts ({} bytes)", route_->options.max_body))
                  : ec == beast::error::timeout ? DeadlineExceeded("the request body did not arrive in time")
                  : ec.category() == beast::error_code(bhttp::error::bad_chunk).category() &&
                          ec != bhttp::error::partial_message && ec != bhttp::error::end_of_stream
                      ? InvalidArgument("malformed request body: " + ec.message())
                      : Aborted("the client went away before the body ended");
      return OnFilled({st, 0, true, fill_buf_});
    }
    piece_filled_ = kBodyPiece - stream_parser_->get().body().size;
    const bool last = stream_parser_->is_done();
    if (piece_filled_ < kBodyPiece && !last && !closed_) return ReadMore();
    if (last) body_read_ = true;
    Tcp().expires_never();  // the handler may take its time with the piece
    OnFilled({Status::Ok(), piece_filled_, last, fill_buf_});
  }

  void OnFilled(Filled f) {
    filling_ = false;
    if (closed_ && !waiting_) return;  // answered already: nobody will ask for it
    if (waiting_) {
      BodyReader::Next next = std::move(waiting_);
      waiting_ = nullptr;
      ReadAhead(f);
      return DeliverPiece(std::move(next), std::move(f));
    }
    ready_ = std::move(f);
  }

  void ReadBody() {
    Tcp().expires_after(impl_.opt.body_timeout);
    bhttp::async_read(self().stream(), buffer_, *parser_,
                      beast::bind_front_handler(&HttpSession::OnBody, self().shared_from_this()));
  }

  void OnBody(beast::error_code ec, std::size_t) {
    if (ec == bhttp::error::body_limit) {
      keep_alive_ = false;
      return Finish(ErrorResponse(413, "InvalidArgument",
                                  fmt::format("body: more than this call accepts ({} bytes)", route_->options.max_body)));
    }
    if (ec) {
      keep_alive_ = false;
      if (ec == beast::error::timeout) {
        return Finish(ErrorResponse(408, "DeadlineExceeded", "the request body did not arrive in time"));
      }
      if (ec.category() == beast::error_code(bhttp::error::bad_chunk).category() && ec != bhttp::error::partial_message &&
          ec != bhttp::error::end_of_stream) {
        return Finish(ErrorResponse(400, "InvalidArgument", "malformed request body: " + ec.message()));
      }
      return Shutdown();  // the client went away
    }
    Dispatch();
  }

  // The handler gets its own copy of the request, alive for as long as the
  // handler runs: the session moves on to the next request once it has the
  // response, and must not pull the request from under a handler still running.
  void Dispatch() {
    auto req = std::make_shared<Request>(req_);
    if (route_->options.stream_body && body_pending_) {
      stream_parser_.emplace(std::move(*parser_));
      stream_parser_->body_limit(route_->options.max_body);
      req->body_reader = std::make_shared<PieceReader>(self().shared_from_this());
    } else {
      body_read_ = true;
      req->body = std::move(parser_->get().body());
      if (route_->options.stream_body) req->body_reader = std::make_shared<WholeBodyReader>(std::string());
    }
    Tcp().expires_never();  // no deadline while the handler works (long-polls wait here, holding no thread)
    Responder respond = MakeResponder();
    const Router::Route* route = route_;
    net::post(impl_.PoolFor(route->options.pool),
              [route, req, respond, &impl = impl_] { Server::Impl::RunHandler(*route, *req, respond, impl.opt.before_respond); });
  }

  void Release() {
    if (reserved_ == 0) return;
    impl_.Unreserve(reserved_pool_, reserved_by_, reserved_);
    reserved_ = 0;
  }

  // Writes the response and logs it; then the next request, or close.
  void Finish(Response r) {
    Release();
    if (body_pending_ && !body_read_) keep_alive_ = false;  // a streamed body answered before its end
    status_ = r.status;
    bytes_ = 0;
    if (r.status == 500) spdlog::error("request {} ({} {}) answered 500: {}", req_.id, req_.method, req_.path, r.body);
    const bool keep = keep_alive_ && !impl_.stopping;
    if (r.content_type == "application/json") {
      // No JSON answer is a page: browsers neither sniff it into one nor frame it
      // (a handler's own values, set below, win).
      using Field = std::pair<std::string, std::string>;
      const Field fields[] = {{"X-Content-Type-Options", "nosniff"}, {"X-Frame-Options", "DENY"}};
      r.headers.insert(r.headers.begin(), std::begin(fields), std::end(fields));
    }
    if (!r.stream) {
      auto res = std::make_shared<bhttp::response<bhttp::string_body>>(static_cast<bhttp::status>(r.status), 11);
      res->set(bhttp::field::content_type, r.content_type);
      for (const auto& [k, v] : r.headers) res->set(k, v);
      res->keep_alive(keep);
      res->body() = std::move(r.body);
      res->prepare_payload();
      bytes_ = res->body().size();
      Tcp().expires_after(impl_.opt.write_timeout);
      return bhttp::async_write(self().stream(), *res,
                                [self = self().shared_from_this(), res, keep](beast::error_code ec, std::size_t) {
                                  self->Done(ec, keep);
                                });
    }
    // A streamed body ends its connection: the hang-up watch below keeps a
    // read pending, so no next request could be read on it cleanly.
    source_ = std::move(r.stream);
    auto res = std::make_shared<bhttp::response<bhttp::empty_body>>(static_cast<bhttp::status>(r.status), 11);
    res->set(bhttp::field::content_type, r.content_type);
    for (const auto& [k, v] : r.headers) res->set(k, v);
    res->keep_alive(false);
    res->chunked(true);
    auto sr = std::make_shared<bhttp::response_serializer<bhttp::empty_body>>(*res);
    Tcp().expires_after(impl_.opt.write_timeout);
    bhttp::async_write_header(self().stream(), *sr,
                              [self = self().shared_from_this(), res, sr](beast::error_code ec, std::size_t) {
                                if (ec) return self->Done(ec, false);
                                self->WatchForHangUp();
                                self->PullNext(false);
                              });
  }

  // While a stream waits for its source, a client that hangs up is noticed at
  // once (a follower's place is freed), not at the next write. Bytes that do
  // arrive (a pipelined request) stay in the buffer for after the stream.
  // The read has no deadline: Beast arms a read's timer when it starts, so
  // one started under the header write's deadline would end the stream then.
  // A client gone silent is found by the next keep-alive write's deadline.
  void WatchForHangUp() {
    watching_ = true;
    Tcp().expires_never();
    self().stream().async_read_some(
        buffer_.prepare(4096), [self = self().shared_from_this()](beast::error_code ec, std::size_t n) {
          self->watching_ = false;
          if (ec) {
            if (self->source_) self->source_->Cancel();
            return self->Shutdown();
          }
          self->buffer_.commit(n);
        });
  }

  void PullNext(bool keep) {
    if (impl_.stopping || !source_) return Done(net::error::operation_aborted, false);
    Tcp().expires_never();  // a source may wait for data: no thread is held meanwhile
    source_->Pull([self = self().shared_from_this(), keep](std::string data, bool last) {
      net::post(self->Tcp().get_executor(), [self, data = std::move(data), last, keep]() mutable {
        self->WriteChunk(std::move(data), last, keep);
      });
    });
  }

  void WriteChunk(std::string data, bool last, bool keep) {
    Tcp().expires_after(impl_.opt.write_timeout);
    if (data.empty()) {
      return net::async_write(self().stream(), bhttp::make_chunk_last(),
                              [self = self().shared_from_this(), keep](beast::error_code ec, std::size_t) {
                                self->Done(ec, keep);
                              });
    }
    auto buf = std::make_shared<std::string>(std::move(data));
    net::async_write(self().stream(), bhttp::make_chunk(net::buffer(*buf)),
                     [self = self().shared_from_this(), buf, last, keep](beast::error_code ec, std::size_t) {
                       if (ec) return self->Done(ec, false);
                       self->bytes_ += buf->size();
                       if (last) return self->WriteChunk(std::string(), true, keep);
                       self->PullNext(keep);
                     });
  }

  void Done(beast::error_code ec, bool keep) {
    if (source_) {
      source_->Cancel();
      source_.reset();
    }
    AccessRecord rec;
    rec.id = req_.id;
    rec.remote = remote_;
    rec.user = req_.principal.name;
    // Never a query string; escaped, so a %0A in a path cannot forge a log line.
    rec.method = Printable(req_.method, 16);
    rec.path = Printable(req_.path.empty() ? req_.target.substr(0, req_.target.find('?')) : req_.path, 256);
    // One field: a space in a (decoded) path could otherwise forge the fields after it.
    for (size_t at; (at = rec.path.find(' ')) != std::string::npos;) rec.path.replace(at, 1, "\\x20");
    rec.route = route_ ? &route_->pattern : nullptr;
    rec.status = status_;
    rec.ms = std::chrono::duration<double, std::milli>(SteadyClock::now() - start_).count();
    rec.bytes = bytes_;
    impl_.Log(rec);
    if (ec || !keep) return Shutdown();
    first_ = false;
    ReadHead();
  }

  // force: close at once (Stop(), eviction), whatever is pending.
  void Shutdown(bool force = false) {
    if (closed_) return;
    closed_ = true;
    waiting_since_ns = 0;
    if (source_) {
      source_->Cancel();
      source_.reset();
    }
    // abrupt: another operation (the hang-up watch, a write) is still pending,
    // so no orderly TLS close_notify can be written. linger: the client is
    // still sending a body we answered without reading; closing now would
    // reset the connection and could lose our answer.
    // A read-ahead still pending cannot share the socket with a drain: close at once.
    self().ShutdownStream(/*linger=*/!force && body_pending_ && !body_read_ && !filling_,
                          /*abrupt=*/force || watching_ || filling_);
  }

  Server::Impl& impl_;
  beast::flat_buffer buffer_;
  std::string remote_;
  uint64_t session_id_ = 0;
  std::optional<bhttp::request_parser<bhttp::string_body>> parser_;
  bool obs_fold_ = false;    // the head being read folds a line
  size_t head_scanned_ = 0;  // bytes of the buffer searched for the head's end
  std::optional<bhttp::request_parser<bhttp::buffer_body>> stream_parser_;  // a stream_body route's, after its head
  std::string pieces_[2];  // a streamed body's pieces: one with the handler, one filling
  int fill_buf_ = 0;
  size_t piece_filled_ = 0;
  bool filling_ = false;              // a read into pieces_[fill_buf_] is pending
  bool continue_pending_ = false;     // "Expect: 100-continue", answered at the handler's first Read
  BodyReader::Next waiting_;          // the handler's request for the piece being filled
  std::optional<Filled> ready_;       // a piece read ahead, not yet asked for
  Request req_;
  const Router::Route* route_ = nullptr;
  SteadyClock::time_point start_ = SteadyClock::now();
  bool first_ = true;
  bool keep_alive_ = true;
  bool body_pending_ = false;
  bool body_read_ = false;
  bool watching_ = false;  // the hang-up watch's read is pending
  bool closed_ = false;
  int status_ = 0;
  uint64_t bytes_ = 0;
  size_t reserved_ = 0;  // of the body budget (Impl::Reserve), until the response is written
  Pool reserved_pool_ = Pool::kApi;
  std::string reserved_by_;
  std::shared_ptr<BodySource> source_;
  bool taken_ = false;  // holds a takeover slot (Impl::AcquireTakeover) until destroyed
  std::string taken_by_;
};

}  // namespace ringmaster::http
