// Server: the ringmaster control plane process. It owns the data directory
// (SQLite metadata, task logs and metrics, the bootstrap admin token, TLS
// files, the access log), the JobService, and the REST API under /api/v1
// (docs/api.md) and the dashboard served by http::Server. Every route but
// /healthz, the dashboard's files and the browser login needs a bearer token
// of the right scope or a session cookie (server/auth.h); users see only their own
// jobs. The data dir is private: the process runs with umask 077; only the
// data dir itself is 0711, for agents that keep sandboxes in it (docs/security.md).
// With a store that servers share (MetaStore::leadership()), it leads or
// stands by (server/leader.h): a standby answers /healthz and sends every
// other request to the leader (307), and starts the scheduler and the rest
// only once it takes over.
// Thread-safety: Start/Stop from one thread; requests run on the http pools.
#pragma once

#include <functional>
#include <atomic>
#include <memory>
#include <optional>
#include <thread>
#include <mutex>
#include <condition_variable>
#include <string>

#include "common/clock.h"
#include "common/status.h"
#include "http/server.h"
#include "server/api.h"
#include "server/auth.h"
#include "server/job_service.h"
#include "files/blob_store.h"
#include "monitor/monitor.h"
#include "server/log_archiver.h"
#include "server/log_store.h"
#include "server/leader.h"
#include "server/registries.h"
#include "server/slurm_backend.h"
#include "store/meta_store.h"

namespace ringmaster::server {

struct ServerOptions {
  std::string data_dir;
  std::string host = "127.0.0.1";
  int port = 0;  // 0 = any free port (see Server::port())
  // HTTPS with this certificate and key (PEM). Without them, a self-signed
  // certificate is made in <data>/tls when `tls` is set, and always when the
  // server listens beyond loopback, unless `insecure_http` says otherwise.
  std::string tls_cert, tls_key;
  bool tls = false;
  bool insecure_http = false;
  int64_t max_log_bytes = 64 << 20;      // kept per task attempt; the rest is cut with a marker
  int64_t max_metrics_bytes = 16 << 20;  // the same for metrics files
  // One job's logs together (its older attempts' are dropped first, then heads); 0 = no cap.
  int64_t max_job_log_bytes = 256 << 20;
  // The metadata store (store::OpenMetaStore): "" = sqlite:<data>/meta.db;
  // "memory:" keeps nothing across a restart.
  std::string meta_url;
  // Tests: this store instead of meta_url's (e.g. one that several servers share).
  std::shared_ptr<store::MetaStore> meta;
  // Among servers sharing the store: this server's id ("" = host:pid:random)
  // and the URL clients are sent to ("" = url()), the lease's timing, and what
  // to do once it has stepped down (it then answers 503 to all but /healthz;
  // `ringmaster server` re-executes itself as a standby).
  ElectionOptions election;
  std::function<void(const std::string& why)> on_stepped_down;
  // Where users' files live (files::OpenBlobStore): "" = local:<data>/blobs;
  // "s3://BUCKET?endpoint=..." for S3 (docs/files.md).
  std::string files_url;
  // Tests: this store instead of files_url's (e.g. a FakeBlobStore they take down).
  std::shared_ptr<files::BlobStore> files;
  ApiLimits limits;
  // Images from registries (server/registries.h): their CAs, plain-http
  // registries, the nodes' platform; and the key that seals users' registry
  // passwords ("" = <data>/secrets.key; keep it off the database's disk and
  // backups where you can).
  RegistryOptions registries;
  std::string secrets_key;
  // The name jobs use for this server's own registry of users' images
  // (`image: NAME/alice/mytorch:v1`): "" = the host:port of url().
  std::string registry_name;
  // Browser sessions (POST /api/v1/session) end this long after login.
  int64_t session_ttl_ms = 12 * 3'600'000;
  int api_threads = 16;
  int agent_threads = 4;
  // false: no port and no scheduler loop; requests go through http()->Dispatch
  // on the calling thread (fuzzing, tests).
  bool listen = true;
  Clock* clock = nullptr;  // nullptr = the real clock
  JobServiceOptions jobs;
  // `--backend slurm` (docs/slurm.md): jobs run as Slurm jobs through this
  // client instead of on agents; null = agents. `slurm_backend.server_url`
  // "" = url(), its `ca_file` "" = ca_path().
  std::shared_ptr<slurm::Client> slurm;
  SlurmBackendOptions slurm_backend;
  // The metrics pipeline (docs/monitoring.md): its series, straggler and idle
  // thresholds. Its coarse history is saved to <data>/monitor.series this
  // often and at Stop, and read back at Start.
  monitor::MonitorOptions monitor;
  int64_t monitor_save_interval_ms = 60'000;
  // An ended task's usage series are kept this long after its last sample.
  int64_t monitor_task_retention_ms = 3'600'000;
};

class Server {
 public:
  explicit Server(ServerOptions options);
  ~Server();

  // Opens the data dir (migrating the database), creates the admin user and
  // writes <data>/admin.token (0600) on first start, binds the port and
  // starts serving in the background. Writes <data>/server.json {url, pid, ca}.
  Status Start();
  void Stop();

  int port() const { return port_; }
  std::string url() const;
  // The CA certificate clients should trust ("" when serving plain HTTP).
  const std::string& ca_path() const { return ca_path_; }
  std::string admin_token_path() const { return options_.data_dir + "/admin.token"; }
  // Returns once this server leads and its services are up (at once without
  // a shared store); DeadlineExceeded after `timeout`, naming the leader.
  Status AwaitLeading(std::chrono::milliseconds timeout);
  // A token with scope agent for the local agent of `node`, kept in
  // <data>/agent.token (0600) and reused across restarts while it is valid.
  StatusOr<std::string> LocalAgentToken(const std::string& node);

  // For tests and fuzzing: the HTTP server (Dispatch runs a request in-process).
  http::Server* http() { return http_.get(); }

 private:
  Status Bootstrap();
  Status CheckFilesShared(const std::string& files_url);
  std::string LocalFilesMark() const;
  // Whether this server (its files at `files_url`) may stand by `leader`.
  Status MayFollow(const store::LeaseState& leader, const std::string& files_url) const;
  bool local_files_ = false;  // users' files on this machine, with a shared store: no standby
  Status SetUpTls(http::ServerOptions* http);
  // What a leader runs: the admin user, the JobService and its scheduler, the
  // monitor's history and saver, the log archiver, the own registry.
  Status Lead();
  // The answer of a server that is not (or not yet) leading; nullopt = serve.
  std::optional<http::Response> Gate(const http::Request& head) const;
  nlohmann::json RoleJson() const;

  ServerOptions options_;  // Bootstrap fills in defaults (the file store root)
  Clock* const clock_;
  std::shared_ptr<store::MetaStore> store_;
  std::unique_ptr<Election> election_;  // set when the store is shared
  std::atomic<Election*> election_ptr_{nullptr};
  std::atomic<bool> serving_{false};  // Lead() has finished: the routes may run  // election_, for request threads (set after the port opens)
  std::unique_ptr<LogStore> logs_;
  std::unique_ptr<LogStore> metrics_;
  std::shared_ptr<files::BlobStore> files_;  // users' files (the files API)
  std::unique_ptr<monitor::Monitor> monitor_;
  std::unique_ptr<JobService> jobs_;
  std::unique_ptr<SlurmBackend> slurm_;  // set with options_.slurm once leading
  std::unique_ptr<Auth> auth_;
  std::unique_ptr<Registries> registries_;
  std::unique_ptr<LabTunnels> lab_;
  std::unique_ptr<http::Server> http_;
  std::unique_ptr<Api> api_;
  std::unique_ptr<LogArchiver> archiver_;  // uses api_: declared after it, so destroyed first
  std::string ca_path_;
  int port_ = 0;
  // Saves the monitor's history every monitor_save_interval_ms.
  void SaveMonitor();
  std::string MonitorPath() const;
  std::thread monitor_saver_;
  std::mutex saver_mu_;
  std::condition_variable saver_cv_;
  bool stopping_ = false;  // GUARDED_BY(saver_mu_)
};

}  // namespace ringmaster::server
