#include "server/server.h"

#include <arpa/inet.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <set>

#include <fmt/format.h>
#include <spdlog/sinks/rotating_file_sink.h>
#include <spdlog/spdlog.h>

#include "common/crypto.h"
#include "common/files.h"
#include "common/log.h"
#include "common/thread_name.h"
#include "http/tls_cert.h"

namespace ringmaster::server {

using nlohmann::json;
using store::Role;

namespace {

bool IsLoopback(const std::string& host) {
  if (host == "localhost" || host == "::1") return true;
  in_addr a{};
  return inet_pton(AF_INET, host.c_str(), &a) == 1 && (ntohl(a.s_addr) >> 24) == 127;
}

// Mode `mode` on a directory the server made (its umask is 077).
Status Dir(const std::string& path, mode_t mode) {
  RM_RETURN_IF_ERROR(MakeDirs(path, mode));
  if (chmod(path.c_str(), mode) != 0) return Internal(fmt::format("chmod {}: {}", path, std::strerror(errno)));
  return Status::Ok();
}

}  // namespace

Server::Server(ServerOptions options)
    : options_(std::move(options)), clock_(options_.clock ? options_.clock : RealClock::Get()) {}

Server::~Server() {
  Stop();
  // Connections and streams still queued on the HTTP server refer to api_
  // and the services: they go first.
  http_.reset();
}

std::string Server::url() const {
  std::string host = options_.host == "0.0.0.0" ? "127.0.0.1" : options_.host == "::" ? "::1" : options_.host;
  if (host.find(':') != std::string::npos) host = "[" + host + "]";
  return fmt::format("{}://{}:{}", ca_path_.empty() && options_.tls_cert.empty() ? "http" : "https", host, port_);
}

Status Server::Bootstrap() {
  // Everything the server writes is private unless it says otherwise below;
  // tasks run as other uids and must read none of it.
  umask(077);
  // Root writes, chmods and follows paths in here: nobody else may own the
  // data dir, or own or be able to rename anything above it (a sticky /tmp is fine).
  if (geteuid() == 0) {
    const std::filesystem::path data(options_.data_dir);
    for (std::filesystem::path p = data;; p = p.parent_path()) {
      struct stat st {};
      if (lstat(p.c_str(), &st) == 0) {
        const bool others_write = (st.st_mode & (S_IWGRP | S_IWOTH)) != 0 && (st.st_mode & S_ISVTX) == 0;
        if (st.st_uid != 0 || others_write || !S_ISDIR(st.st_mode)) {
          return FailedPrecondition(fmt::format(
              "--data {}: {} is {}; a root server's data dir and every directory above it must be root's and "
              "writable by nobody else",
              options_.data_dir, p.string(),
              !S_ISDIR(st.st_mode)  ? "not a directory"
              : st.st_uid != 0      ? fmt::format("owned by uid {}", st.st_uid)
                                    : fmt::format("writable by others (mode {:o})", st.st_mode & 07777)));
        }
      }
      if (p == p.parent_path()) break;
    }
  }
  RM_RETURN_IF_ERROR(MakeDirs(options_.data_dir, 0700));
  // An earlier run's: written again once this one serves (a standby never
  // does), so clients that read it never find a server that is not up.
  std::error_code ignored;
  std::filesystem::remove(options_.data_dir + "/server.json", ignored);
  // Traversable, not listable: an agent on this machine may keep its tasks'
  // sandboxes in here (as `ringmaster up` does). Nothing else in <data> is theirs.
  if (chmod(options_.data_dir.c_str(), 0711) != 0) {
    return Internal(fmt::format("chmod {}: {}", options_.data_dir, std::strerror(errno)));
  }
  for (const char* sub : {"/logs", "/metrics"}) RM_RETURN_IF_ERROR(Dir(options_.data_dir + sub, 0700));
  const std::string meta_url = options_.meta_url.empty() ? "sqlite:" + options_.data_dir + "/meta.db" : options_.meta_url;
  if (options_.meta) {
    store_ = options_.meta;
  } else {
    RM_ASSIGN_OR_RETURN(store_, store::OpenMetaStore(meta_url));
  }
  logs_ = std::make_unique<LogStore>(options_.data_dir + "/logs", options_.max_log_bytes, options_.max_job_log_bytes);
  metrics_ = std::make_unique<LogStore>(options_.data_dir + "/metrics", options_.max_metrics_bytes);
  if (options_.files) {
    RM_RETURN_IF_ERROR(CheckFilesShared("(a store given in-process)"));
    files_ = options_.files;
  } else {
    const std::string url = options_.files_url.empty() ? "local:" + options_.data_dir + "/blobs" : options_.files_url;
    RM_RETURN_IF_ERROR(CheckFilesShared(url));
    auto files = files::OpenBlobStore(url);
    if (!files.ok()) return files.status().Annotate("--files");
    files_ = std::move(*files);
  }
  if (auto damage = store_->Damage(); !damage.empty()) {
    spdlog::error("the database {} is damaged in {} place(s) (above); damaged rows are not served, and /healthz "
                  "names them until it is restored (docs/operations.md)",
                  meta_url, damage.size());
  }
  spdlog::info("users' files: {}", files_->Describe());
  return Status::Ok();
}

// Users' files on this machine's disk (local:) and a shared store: this server
// must be the store's only one, for a server taking over could not read them.
// Its lease says so (LocalFilesMark in its id): a server that finds a live lease
// of another machine's or data dir's local files refuses to stand by, and so
// does a local one that finds a live lease of shared files. The same server
// restarted finds its own mark and waits out its old lease.
std::string Server::LocalFilesMark() const {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  return fmt::format("[local files at {}:{}]", host, options_.data_dir);
}

Status Server::CheckFilesShared(const std::string& files_url) {
  if (store_->leadership() == nullptr) return Status::Ok();
  local_files_ = files_url.rfind("local:", 0) == 0;
  auto lease = store_->leadership()->Current();
  if (!lease.ok()) return lease.status().Annotate("reading the store's leader lease");
  return MayFollow(*lease, files_url);
}

Status Server::MayFollow(const store::LeaseState& lease_state, const std::string& files_url) const {
  const store::LeaseState* lease = &lease_state;
  if (lease->holder.empty() || lease->remaining_ms <= 0) return Status::Ok();
  const size_t mark = lease->holder.find("[local files at ");
  if (mark != std::string::npos && lease->holder.substr(mark) != LocalFilesMark()) {
    return FailedPrecondition(fmt::format(
        "the leader of this store ({}) keeps users' files on its own disk (--files local), so it cannot have a "
        "standby: a server taking over could not read them. Move its files to a shared service first "
        "(--files s3://BUCKET?endpoint=URL on every server; docs/failover.md)",
        lease->holder_url));
  }
  if (local_files_ && mark == std::string::npos) {
    return FailedPrecondition(fmt::format(
        "--files {}: the store's leader ({}) has a standby's shared files, and a server that takes over cannot read "
        "files kept on another machine's disk; give every server the same shared files service, "
        "--files s3://BUCKET?endpoint=URL (docs/files.md, docs/failover.md)",
        files_url, lease->holder_url));
  }
  return Status::Ok();
}

Status Server::SetUpTls(http::ServerOptions* h) {
  if (!options_.tls_cert.empty() || !options_.tls_key.empty()) {
    h->tls_cert = options_.tls_cert;
    h->tls_key = options_.tls_key;
    return Status::Ok();
  }
  const bool loopback = IsLoopback(options_.host);
  if (!options_.tls && (loopback || options_.insecure_http)) return Status::Ok();
  if (!loopback && options_.insecure_http) return Status::Ok();
  RM_ASSIGN_OR_RETURN(http::TlsFiles f,
                      http::EnsureSelfSignedTls(options_.data_dir + "/tls", http::ServerNames(options_.host)));
  h->tls_cert = f.server_cert;
  h->tls_key = f.server_key;
  ca_path_ = f.ca_cert;
  return Status::Ok();
}

Status Server::Start() {
  RM_RETURN_IF_ERROR(Bootstrap());
  options_.jobs.files = files_.get();
  // Registry logins are sealed with a key outside the database; sessions'
  // CSRF tokens are MACs under a key derived from it, so they need no
  // storage and outlive a restart.
  auto box = SecretBox::Open(options_.secrets_key.empty() ? options_.data_dir + "/secrets.key" : options_.secrets_key);
  if (!box.ok()) return box.status().Annotate("--secrets-key");
  AuthOptions auth;
  auth.session_ttl_ms = options_.session_ttl_ms;
  auth.csrf_key = box->DeriveKey("csrf");
  // Every job's RINGMASTER_JOB_SECRET derives from it: the same after a restart or a failover.
  options_.jobs.job_secret_key = box->DeriveKey("job-secret");
  auth_ = std::make_unique<Auth>(store_.get(), clock_, auth);

  http::ServerOptions h;
  h.host = options_.host;
  h.port = options_.port;
  h.api_threads = options_.api_threads;
  h.agent_threads = options_.agent_threads;
  RM_RETURN_IF_ERROR(SetUpTls(&h));
  // Access log: method, path, status, duration, user; never a token.
  auto sink = std::make_shared<spdlog::sinks::rotating_file_sink_mt>(options_.data_dir + "/access.log", 16 << 20, 3);
  auto access = std::make_shared<spdlog::logger>("access", sink);
  access->set_formatter(EscapingFormatter("%Y-%m-%dT%H:%M:%S.%eZ %v", spdlog::pattern_time_type::utc));
  access->flush_on(spdlog::level::info);
  h.access_log = [access, this](const http::AccessRecord& r) {
    if (api_) api_->http_metrics.Observe(r);
    access->info("{} {} {} {} {} {:.1f}ms {}B #{}", r.remote, r.user.empty() ? "-" : r.user, r.method, r.path,
                 r.status, r.ms, r.bytes, r.id);
  };
  // Group commit (store/meta_store.h): no answer leaves before the writes
  // its handler made are on disk. A handler during which nothing committed
  // waits for nothing; otherwise the latest commit's ticket covers its own.
  // A leader that stepped down while the handler ran answers 503, never a
  // success: its writes may have been refused by the fence.
  h.before_respond = [this, store = store_.get()]() -> std::function<Status()> {
    Election* e = election_ptr_.load();
    const bool leading = e && e->View().role == ServerRole::kLeader;
    return [e, store, leading] {
      if (leading && e->View().role == ServerRole::kSteppedDown) {
        return Unavailable("this server stepped down as leader while answering; retry on the leader");
      }
      // Every commit the handler could have seen, its own or another's, is
      // durable before the answer: an answer never shows what a crash could
      // take back (an id handed out again, a job that was never there).
      // AwaitDurable returns at once when the sync has caught up. Under a
      // mixed load (bench/load, 64 users) this cost 13% of the throughput on
      // SQLite and 5% on PostgreSQL against waiting for the handler's own
      // commits only (docs/performance.md).
      return store->AwaitDurable(store->CommitTicket());
    };
  };
  h.gate = [this](const http::Request& head) { return Gate(head); };
  http_ = std::make_unique<http::Server>(h);
  http_->SetAuthenticator([this](const http::Request& head, const http::RouteOptions& route) {
    return auth_->Authenticate(head, route);
  });

  api_ = std::make_unique<Api>();
  api_->store = store_.get();
  api_->files = files_.get();
  api_->auth = auth_.get();
  api_->logs = logs_.get();
  api_->metrics = metrics_.get();
  // Notebook tunnels' node keys come from the secrets key too: they survive restarts.
  lab_ = std::make_unique<LabTunnels>(box->DeriveKey("lab-tunnel"));
  api_->lab = lab_.get();
  registries_ = std::make_unique<Registries>(store_.get(), std::move(*box), options_.registries, clock_);
  api_->registries = registries_.get();
  api_->http = http_.get();
  api_->clock = clock_;
  api_->limits = options_.limits;
  api_->role = [this] { return RoleJson(); };
  // The services a leader runs (monitor, jobs) are set before the first
  // request reaches a route: at once without a shared store, at takeover with one.
  AddAllRoutes(*api_);

  if (!store_->leadership()) {
    if (!options_.listen) return Lead();
    RM_RETURN_IF_ERROR(http_->Start());
    port_ = http_->port();
    return Lead();
  }
  if (!options_.listen) return InvalidArgument("a server on a shared store must listen (it takes part in an election)");
  RM_RETURN_IF_ERROR(http_->Start());
  port_ = http_->port();
  ElectionOptions e = options_.election;
  if (e.id.empty()) {
    char host[256] = {};
    gethostname(host, sizeof(host) - 1);
    e.id = fmt::format("{}:{}:{}", host, getpid(), RandomHex(4));
  }
  if (local_files_) e.id += " " + LocalFilesMark();
  // Checked at start, and again at every try: a server that started beside
  // another at the same moment finds out which files its leader keeps.
  e.may_follow = [this, files = local_files_ ? std::string("local:") : std::string("shared")](
                     const store::LeaseState& leader) { return MayFollow(leader, files); };
  if (e.url.empty()) {
    // Standbys send clients to this URL: a wildcard address names no host.
    if (options_.host == "0.0.0.0" || options_.host == "::") {
      return FailedPrecondition(fmt::format(
          "--host {}: on a shared store, standbys send clients to the leader's URL; say which with "
          "--advertise-url https://THIS-HOST:{}",
          options_.host, port_));
    }
    e.url = url();
  }
  election_ = std::make_unique<Election>(
      store_->leadership(), clock_, e, [this](int64_t) { return Lead(); },
      [this](const std::string& why) {
        if (options_.on_stepped_down) options_.on_stepped_down(why);
      });
  store_->leadership()->OnFenced([this](int64_t seen) {
    election_->Lose(fmt::format("a write was refused: the lease's epoch moved to {}", seen));
  });
  spdlog::info("ringmaster server {} on {}: standing by until it holds the lease (data in {})", e.id, url(),
               options_.data_dir);
  election_ptr_ = election_.get();
  election_->Start();
  return Status::Ok();
}

Status Server::Lead() {
  RM_ASSIGN_OR_RETURN(int64_t users, store_->CountUsers());
  if (users == 0) {
    const int64_t now = clock_->NowMs();
    std::string token = NewApiToken();
    RM_RETURN_IF_ERROR(store_->InTransaction([&]() -> Status {
      RM_ASSIGN_OR_RETURN(int64_t uid, store_->CreateUser({0, "admin", Role::kAdmin, "", now}));
      return store_->CreateToken({0, uid, "bootstrap", Sha256Hex(token), now, "admin", ""}).status();
    }));
    RM_RETURN_IF_ERROR(WriteFileAtomic(admin_token_path(), token + "\n", 0600));
    spdlog::info("created user admin; its token is in {}", admin_token_path());
  }
  monitor_ = std::make_unique<monitor::Monitor>(options_.monitor);
  if (Status st = monitor_->series().Load(MonitorPath()); !st.ok()) {
    // History only: the server starts without it and says so.
    spdlog::warn("monitor: {}", st.message());
  }
  // Series of tasks deleted since it was saved go (ids are not reused, so
  // this only frees memory).
  std::set<int64_t> gone;
  for (const std::string& key : monitor_->series().Keys("task/")) {
    const int64_t id = std::atoll(key.c_str() + 5);
    if (gone.count(id)) continue;
    auto t = store_->GetTask(id);
    if (!t.ok() && t.status().code() == StatusCode::kNotFound) gone.insert(id);
  }
  for (int64_t id : gone) monitor_->series().Erase(fmt::format("task/{}/", id));
  options_.jobs.monitor = monitor_.get();
  options_.jobs.on_job_ended = [this](int64_t job_id) {
    if (archiver_) archiver_->Enqueue(job_id);
    if (api_) api_->job_ends.Fire(job_id);  // GET /api/v1/jobs/{id}?wait=S
  };
  // Made now, not at start: nodes' leases count from here, so a standby that
  // takes over gives every agent a full lease to find it.
  if (options_.slurm) {
    options_.jobs.backend = "slurm";
    // Under the service's lock: Wake only flags the backend's loop.
    options_.jobs.on_external_work = [this] {
      if (slurm_) slurm_->Wake();
    };
  }
  jobs_ = std::make_unique<JobService>(store_.get(), clock_, options_.jobs);
  if (options_.slurm) {
    SlurmBackendOptions so = options_.slurm_backend;
    if (so.server_url.empty()) so.server_url = url();
    if (so.ca_file.empty()) so.ca_file = ca_path_;
    slurm_ = std::make_unique<SlurmBackend>(jobs_.get(), store_.get(), options_.slurm.get(), clock_, so);
    api_->slurm = slurm_.get();
  }
  api_->monitor = monitor_.get();
  api_->jobs = jobs_.get();
  StartAgentService(*api_);
  archiver_ = std::make_unique<LogArchiver>(api_.get());
  api_->on_checkpoint = [this](int64_t job_id) { archiver_->EnqueuePrune(job_id); };
  archiver_->Start();
  if (!options_.listen) {
    serving_ = true;
    return Status::Ok();
  }
  {
    std::string own = options_.registry_name;
    if (own.empty()) own = url().substr(url().find("://") + 3);
    registries_->ServeOwn(own, files_.get());
  }
  jobs_->Start();
  if (slurm_) slurm_->Start();
  monitor_saver_ = std::thread([this] {
    NameThisThread("server-monitor");
    std::unique_lock<std::mutex> l(saver_mu_);
    while (!stopping_) {
      saver_cv_.wait_for(l, std::chrono::milliseconds(options_.monitor_save_interval_ms));
      if (stopping_) break;
      l.unlock();
      SaveMonitor();
      l.lock();
    }
  });
  json info = {{"url", url()}, {"pid", getpid()}};
  if (!ca_path_.empty()) info["ca"] = ca_path_;
  // Serving before server.json says where: a client that finds the file finds the routes up.
  serving_ = true;
  RM_RETURN_IF_ERROR(WriteFileAtomic(options_.data_dir + "/server.json", info.dump() + "\n", 0600));
  spdlog::info("ringmaster server listening on {} (data in {}{})", url(), options_.data_dir,
               ca_path_.empty() ? "" : "; clients trust " + ca_path_);
  return Status::Ok();
}

std::optional<http::Response> Server::Gate(const http::Request& head) const {
  if (head.path == "/healthz") return std::nullopt;
  if (!store_->leadership()) {
    // Alone on its store: it serves once its services are up (the port opens first).
    if (serving_.load()) return std::nullopt;
    http::Response r = http::ErrorResponse(503, "Unavailable", "the server is starting");
    r.headers.emplace_back("Retry-After", "1");
    return r;
  }
  Election* e = election_ptr_.load();
  const ElectionView v = e ? e->View() : ElectionView{ServerRole::kStandby, "", 0};
  if (v.role == ServerRole::kLeader) return std::nullopt;
  http::Response r;
  if (v.role == ServerRole::kStandby && !v.leader_url.empty()) {
    r = http::ErrorResponse(307, "unavailable", "this server is a standby; the leader is " + v.leader_url);
    r.headers.emplace_back("Location", v.leader_url + head.target);
  } else {
    r = http::ErrorResponse(503, "unavailable",
                            v.role == ServerRole::kSteppedDown
                                ? "this server stepped down as leader; it comes back as a standby"
                                : "this server is a standby and no leader holds the lease yet");
    r.headers.emplace_back("Retry-After", "1");
  }
  json body = json::parse(r.body);
  body["leader"] = v.role == ServerRole::kStandby ? v.leader_url : "";
  r.body = body.dump();
  return r;
}

json Server::RoleJson() const {
  Election* e = election_ptr_.load();
  if (!store_->leadership()) return {{"role", "leader"}, {"leader", url()}, {"epoch", 0}};
  const ElectionView v = e ? e->View() : ElectionView{ServerRole::kStandby, "", 0};
  return {{"role", RoleName(v.role)}, {"leader", v.leader_url}, {"epoch", v.epoch}};
}

void Server::Stop() {
  if (slurm_) slurm_->Stop();
  if (jobs_) jobs_->Stop();  // ends long-polls: their answers go out before the connections close
  if (http_) http_->Stop();
  if (archiver_) archiver_->Stop();
  {
    std::lock_guard<std::mutex> l(saver_mu_);
    stopping_ = true;
  }
  saver_cv_.notify_all();
  if (monitor_saver_.joinable()) {
    monitor_saver_.join();
    SaveMonitor();
  }
  // After the last write: a standby takes over at once instead of waiting
  // for the lease to run out.
  if (election_) election_->Stop();
}

std::string Server::MonitorPath() const { return options_.data_dir + "/monitor.series"; }

void Server::SaveMonitor() {
  if (!monitor_) return;
  // Series of what has been silent for longer than the coarsest ring reaches
  // are of no use; a task's are kept an hour after it ended (users make
  // tasks: their series must not crowd out the nodes').
  const auto& tiers = options_.monitor.series.tiers;
  const int64_t now = clock_->NowMs();
  if (!tiers.empty()) monitor_->series().EraseIdle(now - tiers.back().resolution_ms * tiers.back().points);
  monitor_->series().EraseIdle(now - options_.monitor_task_retention_ms, "task/");
  if (Status st = monitor_->series().Save(MonitorPath()); !st.ok()) spdlog::warn("monitor: saving its history: {}", st.message());
}

Status Server::AwaitLeading(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!serving_.load()) {
    Election* e = election_ptr_.load();
    const ElectionView v = e ? e->View() : ElectionView{};
    if (v.role == ServerRole::kSteppedDown) return FailedPrecondition("this server stepped down as leader");
    if (std::chrono::steady_clock::now() >= deadline) {
      return DeadlineExceeded(fmt::format("this server did not become the store's leader within {} s{}",
                                          timeout.count() / 1000,
                                          v.leader_url.empty() ? "" : "; the leader is " + v.leader_url));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return Status::Ok();
}

StatusOr<std::string> Server::LocalAgentToken(const std::string& node) {
  const std::string path = options_.data_dir + "/agent.token";
  if (auto text = ReadFile(path); text.ok()) {
    std::string secret = *text;
    while (!secret.empty() && (secret.back() == '\n' || secret.back() == ' ')) secret.pop_back();
    auto t = store_->GetTokenByHash(Sha256Hex(secret));
    if (t.ok() && t->scope == "agent" && t->node == node) return secret;
  }
  RM_ASSIGN_OR_RETURN(store::User admin, store_->GetUserByName("admin"));
  const std::string secret = NewApiToken();
  RM_RETURN_IF_ERROR(
      store_->CreateToken({0, admin.id, "agent:" + node, Sha256Hex(secret), clock_->NowMs(), "agent", node})
          .status());
  RM_RETURN_IF_ERROR(WriteFileAtomic(path, secret + "\n", 0600));
  return secret;
}

}  // namespace ringmaster::server
