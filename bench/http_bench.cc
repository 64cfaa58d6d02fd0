// http-bench: Ringmaster's HTTP server (http::Server, Beast/Asio) against the
// anchor it replaced, cpp-httplib's server as Debian ships it, serving the
// same small authenticated JSON call, measured in the same run:
//   1. keep-alive: N sequential requests on one connection (delayed ACKs
//      show up here when TCP_NODELAY is off);
//   2. fresh connections: N requests, each on its own connection;
//   3. waiting clients: W long-polls (each answered after 10 s) are opened
//      first, then the same keep-alive loop runs: a server that holds a
//      thread per waiting request stops answering once W exceeds its pool.
// Prints requests/s for each server and the ratio.
#include <httplib.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include "http/server.h"

namespace {

using namespace ringmaster;
using SteadyClock = std::chrono::steady_clock;
constexpr const char* kToken = "Bearer rm_bench";
constexpr const char* kBody = R"({"id":1,"name":"bench","role":"user"})";

struct Result {
  double keepalive_rps = 0, fresh_rps = 0, waiting_rps = 0;
  int waiting_answered = 0;
};

// `n` GETs on one keep-alive connection (or a new one each time); requests/s, 0 on failure.
double Loop(int port, int n, bool keep_alive, int* answered = nullptr, std::chrono::seconds timeout = std::chrono::seconds(30)) {
  httplib::Client c("127.0.0.1", port);
  c.set_keep_alive(keep_alive);
  c.set_tcp_nodelay(true);  // the client side is the same for both servers
  c.set_read_timeout(timeout);
  httplib::Headers h = {{"Authorization", kToken}};
  int ok = 0;
  auto t0 = SteadyClock::now();
  for (int i = 0; i < n; ++i) {
    auto r = c.Get("/api/v1/whoami", h);
    if (!r || r->status != 200) break;
    ++ok;
  }
  double s = std::chrono::duration<double>(SteadyClock::now() - t0).count();
  if (answered) *answered = ok;
  return ok == n ? n / s : 0;
}

// Opens `w` long-polls and leaves them waiting; joins them on destruction.
struct Waiters {
  Waiters(int port, int w) {
    for (int i = 0; i < w; ++i) {
      threads.emplace_back([port] {
        httplib::Client c("127.0.0.1", port);
        c.set_read_timeout(std::chrono::seconds(30));
        c.Get("/api/v1/wait", {{"Authorization", kToken}});
      });
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2000));  // let them all connect and wait
  }
  ~Waiters() {
    for (auto& t : threads) t.join();
  }
  std::vector<std::thread> threads;
};

Result Measure(int port, int n, int waiting) {
  Result r;
  Loop(port, 50, true);  // warm up
  r.keepalive_rps = Loop(port, n, true);
  r.fresh_rps = Loop(port, n / 4, false);
  {
    Waiters w(port, waiting);
    r.waiting_rps = Loop(port, n / 4, true, &r.waiting_answered, std::chrono::seconds(3));
  }
  return r;
}

Result Ours(int n, int waiting) {
  http::ServerOptions o;
  http::Server s(o);
  s.SetAuthenticator([](const http::Request& head, const http::RouteOptions&) -> StatusOr<http::Principal> {
    if (head.Header("authorization") != kToken) return Unauthenticated("no");
    return http::Principal{"bench", {}};
  });
  s.Route("GET", "/api/v1/whoami", {}, [](http::Request&, http::Responder respond) {
    http::Response r;
    r.body = kBody;
    respond(std::move(r));
  });
  s.Route("GET", "/api/v1/wait", {}, [&s](http::Request&, http::Responder respond) {
    s.After(std::chrono::seconds(10), [respond] {
      http::Response r;
      r.body = "{}";
      respond(std::move(r));
    });
  });
  if (!s.Start().ok()) std::abort();
  Result r = Measure(s.port(), n, waiting);
  s.Stop();
  return r;
}

Result Anchor(int n, int waiting) {
  httplib::Server s;  // as the previous server ran it: 64 threads, defaults otherwise
  s.new_task_queue = [] { return new httplib::ThreadPool(64); };
  s.Get("/api/v1/whoami", [](const httplib::Request& req, httplib::Response& res) {
    if (req.get_header_value("Authorization") != kToken) {
      res.status = 401;
      return;
    }
    res.set_content(kBody, "application/json");
  });
  s.Get("/api/v1/wait", [](const httplib::Request&, httplib::Response& res) {
    std::this_thread::sleep_for(std::chrono::seconds(10));  // a long-poll holds its thread
    res.set_content("{}", "application/json");
  });
  int port = s.bind_to_any_port("127.0.0.1");
  std::thread t([&] { s.listen_after_bind(); });
  Result r = Measure(port, n, waiting);
  s.stop();
  t.join();
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"http-bench: Ringmaster's HTTP server vs cpp-httplib (the anchor)"};
  int n = 2000, waiting = 100;
  app.add_option("-n,--requests", n, "requests in the keep-alive loop")->capture_default_str();
  app.add_option("-w,--waiting", waiting, "long-polls left waiting during the third measure")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  spdlog::set_level(spdlog::level::warn);
  Result ours = Ours(n, waiting);
  Result anchor = Anchor(n, waiting);
  auto ratio = [](double a, double b) { return b > 0 ? a / b : 0; };
  std::printf("%-44s %12s %12s %8s\n", "requests/s (1 client, loopback)", "ringmaster", "cpp-httplib", "ratio");
  std::printf("%-44s %12.0f %12.0f %7.1fx\n", "keep-alive connection", ours.keepalive_rps, anchor.keepalive_rps,
              ratio(ours.keepalive_rps, anchor.keepalive_rps));
  std::printf("%-44s %12.0f %12.0f %7.1fx\n", "a new connection per request", ours.fresh_rps, anchor.fresh_rps,
              ratio(ours.fresh_rps, anchor.fresh_rps));
  std::printf("%-44s %12.0f %12.0f %8s\n", fmt::format("keep-alive, {} long-polls waiting", waiting).c_str(),
              ours.waiting_rps, anchor.waiting_rps, anchor.waiting_rps > 0 ? "" : "(stuck)");
  std::printf("  answered in 3 s with %d waiting: ringmaster %d of %d, cpp-httplib %d of %d\n", waiting,
              ours.waiting_answered, n / 4, anchor.waiting_answered, n / 4);
  return 0;
}
