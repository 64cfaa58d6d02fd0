// Fuzz target `http_wire`: arbitrary bytes sent over a real socket to a real
// http::Server (plain HTTP on loopback), so Beast's parser, the framing checks
// (Content-Length, Transfer-Encoding, chunked bodies), routing, the
// authenticate-before-body order, body limits and streamed answers all see
// hostile input. The client half-closes after writing, so every exchange ends.
// The oracle: no crash or sanitizer report, the server answers (or closes)
// within 5 s, never with a 500, and it still serves a good request afterwards.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <spdlog/spdlog.h>

#include "http/server.h"

namespace {

using namespace ringmaster;

class Pieces final : public http::BodySource {
 public:
  void Pull(std::function<void(std::string, bool)> next) override {
    ++n_;
    next("piece " + std::to_string(n_) + "\n", n_ >= 3);
  }

 private:
  int n_ = 0;
};

struct Harness {
  Harness() {
    spdlog::set_level(spdlog::level::off);
    http::ServerOptions o;
    o.header_timeout = std::chrono::seconds(2);
    o.idle_timeout = std::chrono::seconds(2);
    o.body_timeout = std::chrono::seconds(2);
    o.api_threads = 2;
    o.agent_threads = 1;
    o.io_threads = 1;
    server = std::make_unique<http::Server>(o);
    server->SetAuthenticator([](const http::Request& head, const http::RouteOptions&) -> StatusOr<http::Principal> {
      if (head.Header("authorization") != "Bearer good") return Unauthenticated("no");
      return http::Principal{"fuzzer", {}};
    });
    http::RouteOptions open;
    open.authenticate = false;
    server->Route("GET", "/echo", open, [](http::Request& r, http::Responder respond) {
      http::Response res;
      res.content_type = "text/plain";
      res.body = r.path + "?" + std::to_string(r.query.size()) + " " + std::to_string(r.headers.size());
      respond(std::move(res));
    });
    http::RouteOptions small;
    small.max_body = 1024;
    server->Route("POST", "/body", small, [](http::Request& r, http::Responder respond) {
      http::Response res;
      res.body = "{\"size\":" + std::to_string(r.body.size()) + "}";
      respond(std::move(res));
    });
    server->Route("GET", "/stream", open, [](http::Request&, http::Responder respond) {
      http::Response res;
      res.stream = std::make_shared<Pieces>();
      respond(std::move(res));
    });
    server->Route("GET", "/ids/{id}/things/{name}", open, [](http::Request& r, http::Responder respond) {
      http::Response res;
      res.body = "{\"n\":" + std::to_string(r.matches.size()) + "}";
      respond(std::move(res));
    });
    if (!server->Start().ok()) std::abort();
  }

  // Sends `bytes`, half-closes, and reads until the server closes.
  std::string Exchange(const std::string& bytes) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(server->port()));
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) std::abort();
    size_t off = 0;
    while (off < bytes.size()) {
      ssize_t n = send(fd, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
      if (n <= 0) break;  // the server may answer and close early (401, 413, 400)
      off += static_cast<size_t>(n);
    }
    shutdown(fd, SHUT_WR);
    std::string out;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (true) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) {
        std::fprintf(stderr, "http_wire fuzz: no answer and no close within 5 s\n");
        std::abort();
      }
      pollfd p{fd, POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
      char buf[16384];
      ssize_t n = recv(fd, buf, sizeof buf, 0);
      if (n <= 0) break;
      if (out.size() < (1 << 20)) out.append(buf, static_cast<size_t>(n));
    }
    close(fd);
    return out;
  }

  std::unique_ptr<http::Server> server;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Harness* h = new Harness();
  std::string out = h->Exchange(std::string(reinterpret_cast<const char*>(data), size));
  for (size_t at = out.find("HTTP/1.1 500"); at != std::string::npos; at = std::string::npos) {
    std::fprintf(stderr, "http_wire fuzz: a 500: %s\n", out.substr(at, 300).c_str());
    std::abort();
  }
  // Still serving.
  std::string ok = h->Exchange("GET /echo HTTP/1.1\r\nHost: x\r\n\r\n");
  if (ok.rfind("HTTP/1.1 200", 0) != 0) {
    std::fprintf(stderr, "http_wire fuzz: a good request after the input got: %s\n", ok.substr(0, 200).c_str());
    std::abort();
  }
  return 0;
}
