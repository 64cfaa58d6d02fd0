// Fuzz target `api`: the REST API's handlers driven in-process through
// http::Server::Dispatch (routing, authentication and scopes, query
// parameters, headers, bodies) against a real server on a real SQLite store
// in /dev/shm. The input is a request as text:
//
//   METHOD TARGET\n
//   Header: value\n ... \n
//   \n
//   body
//
// `$ADMIN`, `$USER`, `$READ` and `$AGENT` in a header value become real tokens
// of those scopes, so the fuzzer reaches the handlers behind authentication.
// The oracle: no crash, no sanitizer report, and never a 500 (every bad input
// must be the caller's 4xx); JSON responses must be valid JSON.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "common/crypto.h"
#include "common/files.h"
#include "server/server.h"

namespace {

using ringmaster::server::Server;
using ringmaster::server::ServerOptions;

struct Harness {
  Harness() {
    spdlog::set_level(spdlog::level::off);
    dir = std::filesystem::path(std::filesystem::exists("/dev/shm") ? "/dev/shm" : "/tmp") /
          ("rm-fuzz-api-" + std::to_string(getpid()));
    std::filesystem::remove_all(dir);
    ServerOptions o;
    o.data_dir = dir.string();
    o.listen = false;
    o.jobs.max_pending_jobs_per_user = 50;
    server = std::make_unique<Server>(o);
    if (!server->Start().ok()) std::abort();
    admin = ringmaster::ReadFile((dir / "admin.token").string()).value();
    admin.pop_back();
    Call("POST", "/api/v1/users", "$ADMIN", R"({"name":"fuzz"})");
    user = Token(R"({"user":"fuzz"})");
    read = Token(R"({"user":"fuzz","scope":"read"})");
    agent = Token(R"({"scope":"agent","node":"node-1"})");
    // Something to look at: a node, a job, a placed task.
    Call("POST", "/api/v1/agent/register", "$AGENT", R"({"name":"node-1","cpu_milli":4000,"memory_bytes":1000000000})");
    Call("POST", "/api/v1/jobs", "$USER", "command: [echo, hi]\nreplicas: 2\n");
  }
  ~Harness() {
    server.reset();
    std::filesystem::remove_all(dir);
  }

  std::string Token(const std::string& body) {
    std::string out = Call("POST", "/api/v1/tokens", "$ADMIN", body);
    auto j = nlohmann::json::parse(out, nullptr, false);
    return j.is_object() && j.contains("token") ? j["token"].get<std::string>() : "";
  }

  std::string Expand(std::string v) const {
    for (auto [from, to] : {std::pair<std::string, std::string>{"$ADMIN", admin}, {"$USER", user}, {"$READ", read},
                            {"$AGENT", agent}}) {
      for (size_t at; (at = v.find(from)) != std::string::npos;) v.replace(at, from.size(), to);
    }
    return v;
  }

  std::string Call(const std::string& method, const std::string& target, const std::string& who,
                   const std::string& body) {
    ringmaster::http::Request r;
    r.method = method;
    r.target = target;
    r.remote = "127.0.0.1";
    r.headers.emplace_back("authorization", "Bearer " + Expand(who));
    r.body = body;
    return Run(std::move(r));
  }

  // Dispatches and checks the oracle; returns the (first pieces of the) body.
  std::string Run(ringmaster::http::Request r) {
    ringmaster::http::Response got;
    bool answered = false;
    server->http()->Dispatch(std::move(r), [&](ringmaster::http::Response res) {
      got = std::move(res);
      answered = true;
    });
    if (!answered) return "";  // a long-poll waiting for its timer: fine
    if (got.status == 500 || got.status < 100 || got.status > 599) {
      std::fprintf(stderr, "api fuzz: status %d: %s\n", got.status, got.body.c_str());
      std::abort();
    }
    std::string body = got.body;
    if (got.stream) {
      // Pull a few pieces; a follower that waits on a timer simply stops here.
      for (int i = 0; i < 8; ++i) {
        bool more = false, called = false;
        got.stream->Pull([&](std::string data, bool last) {
          body += data;
          more = !last;
          called = true;
        });
        server->http()->RunQueued();  // the pull's work, now, while this frame's locals live
        if (!called || !more) break;
      }
      got.stream->Cancel();
    } else if (got.content_type == "application/json") {
      if (nlohmann::json::parse(body, nullptr, false).is_discarded()) {
        std::fprintf(stderr, "api fuzz: invalid JSON answer (%d): %s\n", got.status, body.c_str());
        std::abort();
      }
    }
    return body;
  }

  std::filesystem::path dir;
  std::unique_ptr<Server> server;
  std::string admin, user, read, agent;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Harness* h = new Harness();  // one server for the whole run
  std::string in(reinterpret_cast<const char*>(data), size);
  ringmaster::http::Request r;
  r.remote = "127.0.0.1";
  size_t nl = in.find('\n');
  std::string first = in.substr(0, nl);
  size_t sp = first.find(' ');
  if (sp == std::string::npos) return 0;
  r.method = first.substr(0, sp);
  r.target = first.substr(sp + 1);
  size_t pos = nl == std::string::npos ? in.size() : nl + 1;
  while (pos < in.size()) {
    size_t end = in.find('\n', pos);
    std::string line = in.substr(pos, end == std::string::npos ? std::string::npos : end - pos);
    pos = end == std::string::npos ? in.size() : end + 1;
    if (line.empty()) break;
    size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string name = line.substr(0, colon);
    for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    std::string value = line.substr(colon + 1);
    while (!value.empty() && value.front() == ' ') value.erase(0, 1);
    r.headers.emplace_back(name, h->Expand(value));
  }
  r.body = in.substr(std::min(pos, in.size()));
  h->Run(std::move(r));
  return 0;
}
