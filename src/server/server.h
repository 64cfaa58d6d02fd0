// Server: the ringmaster control plane process. It owns the data directory
// (SQLite metadata, task logs, the bootstrap admin token), the JobService,
// and the REST API under /api/v1 (docs/api.md). Every route but /healthz
// needs a bearer token; users see only their own jobs; agent routes need an
// admin token (agents are privileged clients of the same API).
// Thread-safety: Start/Stop from one thread; requests run on a thread pool.
#pragma once

#include <memory>
#include <string>
#include <thread>

#include "common/clock.h"
#include "common/status.h"
#include "server/job_service.h"
#include "server/log_store.h"
#include "store/meta_store.h"

namespace httplib {
class Server;
class Request;
class Response;
}  // namespace httplib

namespace ringmaster::server {

struct ServerOptions {
  std::string data_dir;
  std::string host = "127.0.0.1";
  int port = 0;  // 0 = any free port (see Server::port())
  JobServiceOptions jobs;
};

class Server {
 public:
  explicit Server(ServerOptions options);
  ~Server();

  // Opens the data dir (migrating the database), creates the admin user and
  // writes <data>/admin.token (0600) on first start, binds the port and
  // starts serving in the background. Writes <data>/server.json {url, pid}.
  Status Start();
  void Stop();

  int port() const { return port_; }
  std::string url() const;
  std::string admin_token_path() const { return options_.data_dir + "/admin.token"; }

 private:
  Status Bootstrap();
  void Routes();

  ServerOptions options_;  // Bootstrap fills in defaults (the file store root)
  std::unique_ptr<store::MetaStore> store_;
  std::unique_ptr<LogStore> logs_;
  std::unique_ptr<LogStore> metrics_;  // tasks' metrics lines, shipped like logs
  std::unique_ptr<JobService> jobs_;
  std::unique_ptr<httplib::Server> http_;
  std::thread http_thread_;
  int port_ = 0;
};

}  // namespace ringmaster::server
