// Rendezvous stores: how ranks find each other. A Store is a small
// key-value service with blocking Get and atomic Add, every call under a
// deadline. Backends: TcpStore (a client of TcpStoreServer, like torch's
// TCPStore; wire protocol in store_protocol.h, authenticated by the job's
// secret) and FileStore (a shared directory). PrefixStore scopes keys, e.g.
// to a generation ("gen/<g>/"). All stores are thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "common/status.h"

namespace ringmaster::comm {

class Store {
 public:
  virtual ~Store() = default;
  // Each call gives up after `timeout` (DeadlineExceeded, or Unavailable when
  // the store cannot be reached).
  virtual Status Set(const std::string& key, const std::string& value, std::chrono::milliseconds timeout) = 0;
  // Waits until `key` exists.
  virtual StatusOr<std::string> Get(const std::string& key, std::chrono::milliseconds timeout) = 0;
  // Adds `delta` to the integer at `key` (0 if absent); returns the new value.
  virtual StatusOr<int64_t> Add(const std::string& key, int64_t delta, std::chrono::milliseconds timeout) = 0;
};

class PrefixStore final : public Store {
 public:
  PrefixStore(std::string prefix, Store* base) : prefix_(std::move(prefix)), base_(base) {}
  Status Set(const std::string& k, const std::string& v, std::chrono::milliseconds t) override {
    return base_->Set(prefix_ + k, v, t);
  }
  StatusOr<std::string> Get(const std::string& k, std::chrono::milliseconds t) override {
    return base_->Get(prefix_ + k, t);
  }
  StatusOr<int64_t> Add(const std::string& k, int64_t d, std::chrono::milliseconds t) override {
    return base_->Add(prefix_ + k, d, t);
  }

 private:
  const std::string prefix_;
  Store* const base_;
};

class FileStore final : public Store {
 public:
  explicit FileStore(std::string dir);
  Status Set(const std::string& key, const std::string& value, std::chrono::milliseconds timeout) override;
  StatusOr<std::string> Get(const std::string& key, std::chrono::milliseconds timeout) override;
  StatusOr<int64_t> Add(const std::string& key, int64_t delta, std::chrono::milliseconds timeout) override;

 private:
  std::string Path(const std::string& key) const;
  const std::string dir_;
};

struct TcpStoreServerOptions {
  std::string secret;  // the job's (auth.h); "" = open: any client may use every key
  std::chrono::milliseconds auth_timeout{5000};  // a client that has not proven the secret by then is closed
  size_t reply_budget = 64 << 20;                // replies queued for all clients together (StoreCore)
};

// What the server did with its clients, for tests and log lines.
struct TcpStoreStats {
  size_t queued_bytes = 0;       // replies queued now
  size_t peak_queued_bytes = 0;  // the most ever queued at once
  size_t budget_drops = 0;       // clients closed because their reply would exceed the budget
  size_t refused = 0;            // clients closed before proving the secret (wrong, late, too many)
};

// The server side of TcpStore: one thread, poll(), in-memory map
// (StoreCore). Other processes may reach its port, so clients are bounded:
// at most kMaxClients, of which kMaxUnauthenticated still to prove the
// secret (the oldest goes beyond); a malformed request drops its client;
// the replies queued for all of them share one budget, so no client can
// stall the others or grow the store's memory. Each drop is a line on stderr
// naming the peer. stats() is thread-safe.
class TcpStoreServer {
 public:
  ~TcpStoreServer();
  // Listens on host:port (0 = any free port).
  static StatusOr<std::unique_ptr<TcpStoreServer>> Start(const std::string& host, int port,
                                                         TcpStoreServerOptions options = {});
  int port() const { return port_; }
  TcpStoreStats stats() const;
  void Stop();

  static constexpr size_t kMaxClients = 1024;
  static constexpr size_t kMaxUnauthenticated = 64;

 private:
  TcpStoreServer() = default;
  void Run();

  TcpStoreServerOptions options_;
  int listen_fd_ = -1;
  int wake_fd_ = -1;  // eventfd that ends Run()
  int port_ = 0;
  std::atomic<size_t> queued_bytes_{0}, peak_queued_bytes_{0}, budget_drops_{0}, refused_{0};
  std::thread thread_;
};

class TcpStore final : public Store {
 public:
  // Connects to a TcpStoreServer, retrying until `timeout` (it may start
  // later). With a `secret`, every connection proves it and checks the
  // server's proof (Unauthenticated when either fails: not this job's store).
  static StatusOr<std::unique_ptr<TcpStore>> Connect(const std::string& host, int port,
                                                     std::chrono::milliseconds timeout, std::string secret = "");
  ~TcpStore() override;
  Status Set(const std::string& key, const std::string& value, std::chrono::milliseconds timeout) override;
  StatusOr<std::string> Get(const std::string& key, std::chrono::milliseconds timeout) override;
  StatusOr<int64_t> Add(const std::string& key, int64_t delta, std::chrono::milliseconds timeout) override;

 private:
  TcpStore(int fd, std::string host, int port, std::string secret)
      : fd_(fd), host_(std::move(host)), port_(port), secret_(std::move(secret)) {}
  // A fresh connection before `deadline`, its handshake done.
  StatusOr<int> Open(std::chrono::steady_clock::time_point deadline) const;
  // One request and its reply within `timeout`. A connection that timed out
  // still owes a reply, so it is dropped; the next call connects afresh.
  StatusOr<std::string> Call(uint8_t op, const std::string& key, const std::string& value,
                             std::chrono::milliseconds timeout);

  std::mutex mu_;
  int fd_;  // -1: connect at the next call; GUARDED_BY(mu_)
  const std::string host_;
  const int port_;
  const std::string secret_;
};

}  // namespace ringmaster::comm
