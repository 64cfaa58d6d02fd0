// The fixture of the REST API's tests over real HTTP (server_test.cc,
// server_agent_test.cc): a real server on loopback with SQLite in a temp
// dir, an admin token, and helpers to make users, tokens and agents.
#pragma once

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <string>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/files.h"
#include "server/server.h"

namespace ringmaster::server {

// A raw TCP connection, for what a well-behaved client library never sends.
class RawConn {
 public:
  explicit RawConn(int port) {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    connected_ = connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  }
  ~RawConn() { close(fd_); }
  bool ok() const { return connected_; }
  bool Send(const std::string& bytes) {
    size_t off = 0;
    while (off < bytes.size()) {
      ssize_t n = send(fd_, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return false;
      off += static_cast<size_t>(n);
    }
    return true;
  }
  // Reads until `until` appears, the peer closes, or `timeout` passes.
  std::string Read(std::chrono::milliseconds timeout, const std::string& until = "") {
    std::string out;
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      pollfd p{fd_, POLLIN, 0};
      int left = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count());
      if (poll(&p, 1, std::max(left, 1)) <= 0) break;
      char buf[65536];
      ssize_t n = recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) break;
      out.append(buf, static_cast<size_t>(n));
      if (!until.empty() && out.find(until) != std::string::npos) break;
    }
    return out;
  }

 private:
  int fd_ = -1;
  bool connected_ = false;
};

inline int StatusOf(const std::string& response) {
  int code = 0;
  return sscanf(response.c_str(), "HTTP/1.1 %d", &code) == 1 ? code : 0;
}

class ServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("rm_server_test_" + std::to_string(getpid()) + "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    StartServer();
    admin_ = ReadFile((dir_ / "admin.token").string()).value();
    admin_.pop_back();  // newline
  }
  void TearDown() override {
    server_.reset();
    std::filesystem::remove_all(dir_);
  }
  void StartServer(ServerOptions o = {}) {
    server_.reset();
    o.data_dir = dir_.string();
    server_ = std::make_unique<Server>(o);
    Status st = server_->Start();
    ASSERT_TRUE(st.ok()) << st.ToString();
  }

  httplib::Result Call(const std::string& method, const std::string& path, const std::string& token,
                       const std::string& body = "", const std::string& type = "application/json") {
    httplib::Client c("127.0.0.1", server_->port());
    c.set_read_timeout(std::chrono::seconds(10));
    httplib::Headers h;
    if (!token.empty()) h.emplace("Authorization", "Bearer " + token);
    if (method == "GET") return c.Get(path, h);
    if (method == "DELETE") return c.Delete(path, h);
    if (method == "PATCH") return c.Patch(path, h, body, type);
    return c.Post(path, h, body, type);
  }

  std::string MakeUser(const std::string& name, const std::string& extra = "") {
    auto r = Call("POST", "/api/v1/users", admin_, nlohmann::json{{"name", name}}.dump());
    EXPECT_EQ(r->status, 201) << r->body;
    return MakeToken(name, extra);
  }
  std::string MakeToken(const std::string& user, const std::string& scope = "", const std::string& node = "") {
    nlohmann::json body = {{"user", user}};
    if (!scope.empty()) body["scope"] = scope;
    if (!node.empty()) body["node"] = node;
    auto r = Call("POST", "/api/v1/tokens", admin_, body.dump());
    EXPECT_EQ(r->status, 201) << r->body;
    return r->status == 201 ? nlohmann::json::parse(r->body)["token"].get<std::string>() : "";
  }

  int64_t SubmitAs(const std::string& token, const std::string& spec) {
    auto r = Call("POST", "/api/v1/jobs", token, spec, "application/yaml");
    EXPECT_EQ(r->status, 201) << r->body;
    return r->status == 201 ? nlohmann::json::parse(r->body)["id"].get<int64_t>() : 0;
  }

  // An agent for `node` with a token bound to it; returns its node id.
  int64_t RegisterAgent(const std::string& node, std::string* token, int64_t cpu_milli = 4000,
                        nlohmann::json gpus = nlohmann::json::array()) {
    *token = MakeToken("admin", "agent", node);
    auto r = Call("POST", "/api/v1/agent/register", *token,
                  nlohmann::json{{"name", node}, {"cpu_milli", cpu_milli}, {"memory_bytes", 8LL << 30}, {"gpus", gpus}}.dump());
    EXPECT_EQ(r->status, 200) << r->body;
    return r->status == 200 ? nlohmann::json::parse(r->body)["node_id"].get<int64_t>() : 0;
  }

  // Waits (a hang guard) until the job's rank-0 task is placed; returns the task.
  nlohmann::json PlacedTask(const std::string& token, int64_t id) {
    for (int i = 0; i < 100; ++i) {
      nlohmann::json t = nlohmann::json::parse(Call("GET", "/api/v1/jobs/" + std::to_string(id), token)->body)["tasks"][0];
      if (t["state"] == "SCHEDULED" || t["state"] == "RUNNING") return t;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ADD_FAILURE() << "job " << id << " was not placed";
    return nlohmann::json::object();
  }

  static std::string ErrorMessage(const httplib::Result& r) { return nlohmann::json::parse(r->body)["error"]["message"]; }

  std::filesystem::path dir_;
  std::unique_ptr<Server> server_;
  std::string admin_;
};

}  // namespace ringmaster::server
