// The canned answers a connection gets before any session: plain HTTP on a
// TLS port, or too many connections. Written once, then the socket closes.
#include "http/server_impl.h"

namespace ringmaster::http {
namespace {

// Writes one canned response and closes: plain HTTP on a TLS port, or too many connections.
class RejectSession final : public std::enable_shared_from_this<RejectSession> {
 public:
  RejectSession(beast::tcp_stream stream, int status, std::string reason, std::string code, std::string message)
      : stream_(std::move(stream)) {
    Response r = ErrorResponse(status, code, message);
    text_ = fmt::format("HTTP/1.1 {} {}\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{}",
                        status, reason, r.body.size(), r.body);
  }
  void Run() {
    stream_.expires_after(std::chrono::seconds(5));
    net::async_write(stream_, net::buffer(text_), [self = shared_from_this()](beast::error_code, std::size_t) {
      beast::error_code ec;
      self->stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
      self->stream_.socket().close(ec);
    });
  }

 private:
  beast::tcp_stream stream_;
  std::string text_;
};

}  // namespace

void Reject(beast::tcp_stream stream, int status, std::string reason, std::string code, std::string message) {
  std::make_shared<RejectSession>(std::move(stream), status, std::move(reason), std::move(code), std::move(message))->Run();
}

}  // namespace ringmaster::http
