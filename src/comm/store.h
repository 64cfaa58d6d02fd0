// Rendezvous stores: how ranks find each other. A Store is a small
// key-value service with blocking Get (until the key exists or a deadline)
// and atomic Add. Every call has a deadline: the store may be served by a
// rank that has gone. Backends: TcpStore (a client of TcpStoreServer, like
// torch's TCPStore; the wire protocol is store_protocol.h) and FileStore (a
// shared directory). PrefixStore scopes keys, e.g. to a generation: each new
// membership of an elastic job forms its ring under "gen/<g>/". All stores
// are thread-safe.
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

// The server side of TcpStore: one thread, poll(), in-memory map
// (StoreCore). Any process on the host can connect, so clients are bounded:
// at most kMaxClients, a malformed request drops its client, and a client
// that stops reading its replies is dropped once kMaxPendingReply bytes wait
// for it, so no client can stall the others.
class TcpStoreServer {
 public:
  ~TcpStoreServer();
  // Listens on host:port (0 = any free port).
  static StatusOr<std::unique_ptr<TcpStoreServer>> Start(const std::string& host, int port);
  int port() const { return port_; }
  void Stop();

  static constexpr size_t kMaxClients = 1024;
  static constexpr size_t kMaxPendingReply = 64 << 20;

 private:
  TcpStoreServer() = default;
  void Run();

  int listen_fd_ = -1;
  int wake_fd_ = -1;  // eventfd that ends Run()
  int port_ = 0;
  std::thread thread_;
};

class TcpStore final : public Store {
 public:
  // Connects to a TcpStoreServer, retrying until `timeout` (it may start later).
  static StatusOr<std::unique_ptr<TcpStore>> Connect(const std::string& host, int port,
                                                     std::chrono::milliseconds timeout);
  ~TcpStore() override;
  Status Set(const std::string& key, const std::string& value, std::chrono::milliseconds timeout) override;
  StatusOr<std::string> Get(const std::string& key, std::chrono::milliseconds timeout) override;
  StatusOr<int64_t> Add(const std::string& key, int64_t delta, std::chrono::milliseconds timeout) override;

 private:
  TcpStore(int fd, std::string host, int port) : fd_(fd), host_(std::move(host)), port_(port) {}
  // One request and its reply within `timeout`. A connection that timed out
  // still owes a reply, so it is dropped; the next call connects afresh.
  StatusOr<std::string> Call(uint8_t op, const std::string& key, const std::string& value,
                             std::chrono::milliseconds timeout);

  std::mutex mu_;
  int fd_;  // -1: connect at the next call; GUARDED_BY(mu_)
  const std::string host_;
  const int port_;
};

}  // namespace ringmaster::comm
