// Test helpers for what needs a real registry: Distribution, Debian's
// docker-registry (distribution 2.8) of the test's own on a free loopback
// port (TLS with a certificate for 127.0.0.1; htpasswd, token or no auth),
// TokenServer for its token auth, both stopped by pid; and Pusher, which puts
// blobs and manifests in through the Registry API. Not thread-safe.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "common/crypto.h"
#include "common/status.h"
#include "common/subprocess.h"
#include "http/client.h"

namespace ringmaster::registry::testing {

// A loopback port that was free a moment ago.
inline int FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  int port = -1;
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
    port = ntohs(a.sin_port);
  }
  close(fd);
  return port;
}

// A self-signed certificate for IP 127.0.0.1 in dir/cert.pem, dir/key.pem.
inline Status MakeLoopbackCert(const std::filesystem::path& dir) {
  auto made = RunTool({"openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj",
                       "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1", "-keyout",
                       (dir / "key.pem").string(), "-out", (dir / "cert.pem").string()},
                      std::chrono::seconds(60));
  return made.status();
}

// A process of the test's, its stdout and stderr in `log`, killed by pid.
// setpriv (util-linux) makes a crashed or timed-out test take it along, then
// execs it, so the pid is the tool's; posix_spawn runs no code of ours in the
// child, so none of the test's threads can deadlock it.
class Child {
 public:
  ~Child() { Stop(); }
  // A fresh directory for its files, removed by Stop(); "" or why not.
  std::string MakeDir(const std::string& prefix) {
    std::string tmpl = "/tmp/" + prefix + "XXXXXX";
    if (!mkdtemp(tmpl.data())) return "mkdtemp failed";
    dir_ = tmpl;
    return "";
  }
  const std::filesystem::path& dir() const { return dir_; }
  std::string Spawn(std::vector<std::string> args, const std::filesystem::path& log) {
    log_ = log;
    args.insert(args.begin(), {"/usr/bin/setpriv", "--pdeathsig", "KILL", "--"});
    posix_spawn_file_actions_t files;
    posix_spawn_file_actions_init(&files);
    posix_spawn_file_actions_addopen(&files, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&files, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&files, 1, 2);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    const int spawned = posix_spawn(&pid_, args[0].c_str(), &files, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&files);
    if (spawned == 0) return "";
    pid_ = -1;
    return "posix_spawn " + args[0] + ": " + std::strerror(spawned);
  }
  // True once it has ended (then reaped).
  bool Exited() {
    int status;
    if (pid_ > 0 && waitpid(pid_, &status, WNOHANG) == pid_) pid_ = -1;
    return pid_ <= 0;
  }
  // "" once `ready` says so within 30 s, else why not.
  std::string AwaitReady(const std::function<bool()>& ready, const std::string& name) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (std::chrono::steady_clock::now() < deadline) {
      if (ready()) return "";
      if (Exited()) return name + " exited at start: " + LogTail();
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return name + " was not ready in 30 s: " + LogTail();
  }
  void Stop() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      int status;
      waitpid(pid_, &status, 0);
      pid_ = -1;
    }
    if (!dir_.empty()) {
      std::error_code ec;
      std::filesystem::remove_all(dir_, ec);
      dir_.clear();
    }
  }
  std::string Log() const {
    std::ifstream in(log_);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }
  std::string LogTail() const {
    std::string all = Log();
    return all.size() > 3000 ? all.substr(all.size() - 3000) : all;
  }

 private:
  std::filesystem::path dir_, log_;
  pid_t pid_ = -1;
};

class Distribution {
 public:
  static constexpr const char* kBinary = "/usr/bin/docker-registry";

  struct Config {
    bool tls = true;
    // htpasswd auth when set.
    std::string user, password;
    // Token auth when set (auth: token:, with rootcertbundle = token_cert).
    std::string token_realm, token_service = "test-registry", token_issuer = "test-issuer", token_cert;
  };

  ~Distribution() { Stop(); }

  // "" when it answers on its port, else why not.
  std::string Start(const Config& config) {
    if (access(kBinary, X_OK) != 0) return std::string("no ") + kBinary;
    if (std::string why = child_.MakeDir("rmreg"); !why.empty()) return why;
    const std::filesystem::path d = child_.dir();
    tls_ = config.tls;
    if (tls_) {
      if (Status s = MakeLoopbackCert(d); !s.ok()) return "openssl: " + s.ToString();
    }
    port_ = FreePort();
    std::string yaml = "version: 0.1\nlog:\n  level: info\n  accesslog:\n    disabled: true\nstorage:\n  filesystem:\n"
                       "    rootdirectory: " + storage().string() +
                       "\n  delete:\n    enabled: true\nhttp:\n  addr: 127.0.0.1:" + std::to_string(port_) + "\n";
    if (tls_) yaml += "  tls:\n    certificate: " + ca_file() + "\n    key: " + (d / "key.pem").string() + "\n";
    if (!config.user.empty()) {
      auto line = RunTool({"htpasswd", "-Bbn", config.user, config.password});
      if (!line.ok()) return "htpasswd: " + line.status().ToString();
      std::ofstream(d / "htpasswd") << *line;
      yaml += "auth:\n  htpasswd:\n    realm: test-registry\n    path: " + (d / "htpasswd").string() + "\n";
    } else if (!config.token_realm.empty()) {
      yaml += "auth:\n  token:\n    realm: " + config.token_realm + "\n    service: " + config.token_service +
              "\n    issuer: " + config.token_issuer + "\n    rootcertbundle: " + config.token_cert + "\n";
    }
    std::ofstream(d / "config.yml") << yaml;
    if (std::string why = child_.Spawn({kBinary, "serve", (d / "config.yml").string()}, d / "registry.log");
        !why.empty()) {
      return why;
    }
    http::ClientOptions quick;
    quick.connect_timeout = std::chrono::milliseconds(500);
    quick.io_timeout = std::chrono::milliseconds(2000);
    http::Client probe(Target(), quick);
    http::ClientRequest ping;
    ping.target = "/v2/";
    return child_.AwaitReady([&] { return probe.Do(ping).ok(); }, "docker-registry");
  }

  void Stop() { child_.Stop(); }

  std::string host() const { return "127.0.0.1:" + std::to_string(port_); }
  std::string ca_file() const { return (dir() / "cert.pem").string(); }
  std::filesystem::path storage() const { return dir() / "storage"; }
  const std::filesystem::path& dir() const { return child_.dir(); }
  // Where the registry keeps blob `digest` ("sha256:<hex>").
  std::filesystem::path BlobFile(const std::string& digest) const {
    const std::string hex = digest.substr(7);
    return storage() / "docker/registry/v2/blobs/sha256" / hex.substr(0, 2) / hex / "data";
  }
  http::ClientTarget Target() const {
    http::ClientTarget t;
    t.transport = tls_ ? http::ClientTarget::Transport::kTls : http::ClientTarget::Transport::kTcp;
    t.host = "127.0.0.1";
    t.port = std::to_string(port_);
    if (tls_) t.ca_file = ca_file();
    return t;
  }
  std::string LogTail() const { return child_.LogTail(); }

 private:
  bool tls_ = true;
  int port_ = -1;
  Child child_;
};

// tests/fixtures/token_server.py (`script`) on a free loopback port: issues
// the JWTs a registry configured with Config::token_realm accepts.
class TokenServer {
 public:
  ~TokenServer() { Stop(); }
  std::string Start(const std::string& script, const std::string& user, const std::string& password) {
    if (std::string why = child_.MakeDir("rmtok"); !why.empty()) return why;
    const std::filesystem::path d = child_.dir();
    const auto port_file = d / "port";
    if (std::string why = child_.Spawn({"/usr/bin/python3", script, "--dir", d.string(), "--port-file",
                                        port_file.string(), "--user", user, "--password", password},
                                       d / "token.log");
        !why.empty()) {
      return why;
    }
    return child_.AwaitReady([&] { return static_cast<bool>(std::ifstream(port_file) >> port_); }, "token server");
  }
  void Stop() { child_.Stop(); }
  std::string realm() const { return "http://127.0.0.1:" + std::to_string(port_) + "/token"; }
  std::string cert_file() const { return (child_.dir() / "token-cert.pem").string(); }
  int port() const { return port_; }
  // What it printed: one line per request.
  std::string Log() const { return child_.Log(); }

 private:
  int port_ = -1;
  Child child_;
};

// Puts content into a registry with the Registry API (monolithic uploads).
class Pusher {
 public:
  // `authorization`: a whole header value ("Basic ..."), "" = none.
  Pusher(const http::ClientTarget& target, std::string authorization)
      : client_(target, http::ClientOptions{}), authorization_(std::move(authorization)) {}

  // Returns the blob's digest.
  StatusOr<std::string> Blob(const std::string& repository, const std::string& bytes) {
    const std::string digest = "sha256:" + Sha256Hex(bytes);
    http::ClientRequest start = Request("POST", "/v2/" + repository + "/blobs/uploads/");
    RM_ASSIGN_OR_RETURN(http::ClientResponse started, client_.Do(start));
    if (started.status != 202) return Internal("upload start: " + std::to_string(started.status) + " " + started.body);
    std::string location = started.Header("Location");
    if (const size_t scheme = location.find("://"); scheme != std::string::npos) {
      location = location.substr(location.find('/', scheme + 3));
    }
    http::ClientRequest put = Request("PUT", location + (location.find('?') == std::string::npos ? "?" : "&") +
                                                 "digest=" + digest);
    put.headers.emplace_back("Content-Type", "application/octet-stream");
    put.body = bytes;
    RM_ASSIGN_OR_RETURN(http::ClientResponse done, client_.Do(put));
    if (done.status != 201) return Internal("upload: " + std::to_string(done.status) + " " + done.body);
    return digest;
  }

  // Returns the manifest's digest.
  StatusOr<std::string> Manifest(const std::string& repository, const std::string& reference,
                                 const std::string& media_type, const std::string& json) {
    http::ClientRequest put = Request("PUT", "/v2/" + repository + "/manifests/" + reference);
    put.headers.emplace_back("Content-Type", media_type);
    put.body = json;
    RM_ASSIGN_OR_RETURN(http::ClientResponse done, client_.Do(put));
    if (done.status != 201) return Internal("manifest: " + std::to_string(done.status) + " " + done.body);
    return "sha256:" + Sha256Hex(json);
  }

 private:
  http::ClientRequest Request(const std::string& method, const std::string& target) {
    http::ClientRequest r;
    r.method = method;
    r.target = target;
    if (!authorization_.empty()) r.headers.emplace_back("Authorization", authorization_);
    return r;
  }

  http::Client client_;
  std::string authorization_;
};

}  // namespace ringmaster::registry::testing
