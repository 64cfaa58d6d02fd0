// Rendezvous stores: how ranks find each other. A Store is a small
// key-value service with blocking Get (until the key exists or a deadline)
// and atomic Add. Backends: TcpStore (a client of TcpStoreServer, like
// torch's TCPStore) and FileStore (a shared directory). PrefixStore scopes
// keys, e.g. to a generation: each new membership of an elastic job forms
// its ring under "gen/<g>/". All stores are thread-safe.
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
  virtual Status Set(const std::string& key, const std::string& value) = 0;
  // Waits until `key` exists; DeadlineExceeded after `timeout`.
  virtual StatusOr<std::string> Get(const std::string& key, std::chrono::milliseconds timeout) = 0;
  // Adds `delta` to the integer at `key` (0 if absent); returns the new value.
  virtual StatusOr<int64_t> Add(const std::string& key, int64_t delta) = 0;
};

class PrefixStore final : public Store {
 public:
  PrefixStore(std::string prefix, Store* base) : prefix_(std::move(prefix)), base_(base) {}
  Status Set(const std::string& k, const std::string& v) override { return base_->Set(prefix_ + k, v); }
  StatusOr<std::string> Get(const std::string& k, std::chrono::milliseconds t) override {
    return base_->Get(prefix_ + k, t);
  }
  StatusOr<int64_t> Add(const std::string& k, int64_t d) override { return base_->Add(prefix_ + k, d); }

 private:
  const std::string prefix_;
  Store* const base_;
};

class FileStore final : public Store {
 public:
  explicit FileStore(std::string dir);
  Status Set(const std::string& key, const std::string& value) override;
  StatusOr<std::string> Get(const std::string& key, std::chrono::milliseconds timeout) override;
  StatusOr<int64_t> Add(const std::string& key, int64_t delta) override;

 private:
  std::string Path(const std::string& key) const;
  const std::string dir_;
};

// The server side of TcpStore: one thread, poll(), in-memory map.
class TcpStoreServer {
 public:
  ~TcpStoreServer();
  // Listens on host:port (0 = any free port).
  static StatusOr<std::unique_ptr<TcpStoreServer>> Start(const std::string& host, int port);
  int port() const { return port_; }
  void Stop();

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
  Status Set(const std::string& key, const std::string& value) override;
  StatusOr<std::string> Get(const std::string& key, std::chrono::milliseconds timeout) override;
  StatusOr<int64_t> Add(const std::string& key, int64_t delta) override;

 private:
  TcpStore(int fd, std::string host, int port) : fd_(fd), host_(std::move(host)), port_(port) {}
  int Release();  // gives up the socket
  StatusOr<std::string> Call(uint8_t op, const std::string& key, const std::string& value,
                             std::chrono::milliseconds timeout);

  std::mutex mu_;
  int fd_;  // GUARDED_BY(mu_)
  const std::string host_;
  const int port_;
};

}  // namespace ringmaster::comm
