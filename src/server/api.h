// The REST API's routes (docs/api.md), one file per resource: api_jobs.cc,
// api_logs.cc (logs and metrics), api_nodes.cc, api_users.cc (users, tokens,
// audit), api_agent.cc (the agent protocol), api_files.cc (users' files),
// api_agent_files.cc (jobs' files, for agents), api_monitor.cc (usage
// series and /metrics), api_version.cc, api_session.cc (browser sessions),
// api_lab.cc (notebooks). This header holds what they share: the service
// handles, JSON replies and errors, parameter parsing.
// Handlers run on the http::Server's pools; everything here is thread-safe.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "common/clock.h"
#include "common/status.h"
#include "files/blob_store.h"
#include "http/server.h"
#include "monitor/monitor.h"
#include "monitor/prometheus.h"
#include "server/auth.h"
#include "server/job_service.h"
#include "server/lab_proxy.h"
#include "server/log_store.h"
#include "server/registries.h"
#include "store/meta_store.h"

namespace ringmaster::server {

class AgentService;
class SlurmBackend;

struct ApiLimits {
  size_t max_spec_bytes = 1 << 20;
  size_t max_body_bytes = 64 << 10;         // JSON bodies of other calls
  size_t max_agent_chunk = 4 << 20;         // one log or metrics shipment
  int max_followers_per_user = 32;          // concurrent `logs?follow=1` streams
  int64_t max_tokens_per_user = 100;
  uint64_t max_file_bytes = 16ull << 30;    // one uploaded file (and never more than the owner's quota has room for)
  // Users without a quota of their own (server/file_quota.h); 0 = none.
  int64_t default_file_quota = 100ll << 30;
  // Charged per object and per directory level of its key, besides its bytes.
  int64_t file_object_cost = 4096;
};

// How many of something (log streams, metrics reads) each user holds at once.
class FollowerCount {
 public:
  bool TryAdd(int64_t user_id, int limit);
  void Remove(int64_t user_id);

 private:
  std::mutex mu_;
  std::map<int64_t, int> count_;  // GUARDED_BY(mu_)
};

// GET /api/v1/jobs/{id}'s answers, built once per change of the job (the
// store's JobVersion) rather than per request. Bounded: at kMax entries it
// starts afresh.
class JobViews {
 public:
  struct View {
    uint64_t version = 0;
    int64_t user_id = 0;  // whose job: only they and admins see it
    bool ended = false;   // the job is in a terminal state
    std::shared_ptr<const std::string> body;
  };
  std::optional<View> Find(int64_t job_id, uint64_t version);
  void Put(int64_t job_id, View view);

 private:
  static constexpr size_t kMax = 4096;
  std::mutex mu_;
  std::unordered_map<int64_t, View> views_;  // GUARDED_BY(mu_)
};

// Who waits for which job to end (GET /api/v1/jobs/{id}?wait=S): the
// server fires a job's waiters when it reaches a terminal state.
class JobEnds {
 public:
  // `fn` is called at most once, when the job ends (it must only hand work off).
  uint64_t Add(int64_t job_id, std::function<void()> fn);
  void Remove(uint64_t waiter);
  void Fire(int64_t job_id);

 private:
  std::mutex mu_;
  uint64_t next_ = 1;                                           // GUARDED_BY(mu_)
  std::map<uint64_t, std::pair<int64_t, std::function<void()>>> waiters_;  // GUARDED_BY(mu_)
};

// Requests and their latency by route, for /metrics (the access log feeds it).
class HttpMetrics {
 public:
  void Observe(const http::AccessRecord& r);
  void Write(monitor::Exposition& out) const;

 private:
  struct Route {
    std::map<int, uint64_t> codes;
    std::unique_ptr<monitor::Histogram> latency;
  };
  mutable std::mutex mu_;
  std::map<std::pair<std::string, std::string>, Route> routes_;  // GUARDED_BY(mu_): (route, method)
};

struct Api {
  store::MetaStore* store = nullptr;
  monitor::Monitor* monitor = nullptr;
  HttpMetrics http_metrics;
  JobService* jobs = nullptr;
  SlurmBackend* slurm = nullptr;  // `--backend slurm`: Slurm's nodes are the cluster's
  LogStore* logs = nullptr;
  LogStore* metrics = nullptr;
  files::BlobStore* files = nullptr;
  Auth* auth = nullptr;
  Registries* registries = nullptr;  // images from registries; nullptr = none
  LabTunnels* lab = nullptr;         // where nodes take notebook connections
  http::Server* http = nullptr;
  Clock* clock = nullptr;
  ApiLimits limits;
  // Called after a job's checkpoints/latest is written (the server prunes
  // the job's old checkpoints from it, in the background).
  std::function<void(int64_t job_id)> on_checkpoint;
  // This server's part among servers sharing the store, for /healthz:
  // {"role": "leader"|"standby"|"stepped-down", "leader": URL or "", "epoch": N}.
  std::function<nlohmann::json()> role;
  // The agent protocol's service (StartAgentService, once jobs and monitor are set).
  std::shared_ptr<AgentService> agent_service;
  JobViews job_views;
  JobEnds job_ends;
  FollowerCount followers;        // log streams
  FollowerCount job_waiters;      // GET /api/v1/jobs/{id}?wait=S in progress (same limit per user)
  FollowerCount metrics_readers;  // metrics reads in progress
  // Quota checks and usage updates of one user's files happen one at a time.
  std::array<std::mutex, 64> file_usage_mu;
  std::mutex& FileUsageLock(int64_t user_id) { return file_usage_mu[static_cast<size_t>(user_id) % file_usage_mu.size()]; }
};

struct Reply {
  int status = 200;
  nlohmann::json body;
  std::vector<std::pair<std::string, std::string>> headers = {};  // besides Content-Type
};

using JsonFn = std::function<StatusOr<Reply>(const http::Request&, const Caller&)>;

// A handler that answers `fn`'s JSON, or its error as {"error": ...}. An
// Internal error or a throw answers 500 with the request's number only; its
// cause goes to the server log.
http::Handler Json(JsonFn fn);
http::Response ErrorFor(const http::Request& req, const Status& st);
http::Response JsonResponse(int status, const nlohmann::json& body);
std::string Dump(const nlohmann::json& j);

// The request body as a JSON object ({} when empty); 400 naming what is wrong.
StatusOr<nlohmann::json> BodyObject(const http::Request& req);
// An integer query parameter within [lo, hi], or `def` when absent.
StatusOr<int64_t> IntParam(const http::Request& req, const std::string& name, int64_t def, int64_t lo, int64_t hi);
StatusOr<bool> BoolParam(const http::Request& req, const std::string& name);
// The i-th capture of the route (an {id}).
int64_t PathId(const http::Request& req, size_t i = 0);
// An optional string field of a JSON object: `def` when absent, 400 when not a string.
StatusOr<std::string> StringField(const nlohmann::json& body, const std::string& name, const std::string& def);

// A job the caller may see: its own, or any for admins. Others get NotFound,
// so another user's job ids are not even confirmed to exist.
StatusOr<store::Job> VisibleJob(Api& api, int64_t id, const Caller& caller);

// Every route below, /healthz and GET /api/v1/openapi.json (api_routes.cc):
// what the server registers, and what the OpenAPI document must describe.
void AddAllRoutes(Api& api);
void AddJobRoutes(Api& api);
void AddLogRoutes(Api& api);
void AddNodeRoutes(Api& api);
void AddUserRoutes(Api& api);
// Users' (and the site's) logins to OCI registries.
void AddRegistryRoutes(Api& api);
// This server as a read-only OCI registry of users' own images (/v2/).
void AddRegistryV2Routes(Api& api);
void AddAgentRoutes(Api& api);
// Makes api.agent_service from api's jobs, monitor and stores: call once they are set.
void StartAgentService(Api& api);
void AddFileRoutes(Api& api);
// The agent's side of the files service: a task's staging plan, reads of its
// inputs and checkpoints, writes of its outputs and checkpoints.
void AddAgentFileRoutes(Api& api);
void AddMonitorRoutes(Api& api);
// GET /api/v1/version (any valid token).
void AddVersionRoutes(Api& api);
// Browser sessions: /api/v1/session (log in, look, log out).
void AddSessionRoutes(Api& api);
// /jobs/{id}/lab/{path...}: a notebook job's Jupyter, through its node's agent (api_lab.cc).
void AddLabRoutes(Api& api);
// "/jobs/<id>/lab/" for a running notebook job; nullopt for any other.
std::optional<std::string> LabUrl(const store::Job& job);
// What the monitor routes and views share: a flag on a job as JSON, a job's
// latest use ({cpu_cores, memory_bytes, gpu_util}, null when not measured),
// and the /metrics text.
nlohmann::json FlagJson(const monitor::Finding& f);
nlohmann::json JobUsageJson(Api& api, const std::vector<store::Task>& tasks);
StatusOr<std::string> MetricsText(Api& api);
// The route's task, if it is placed on the calling agent's node; else
// FailedPrecondition (409), which tells an agent the task is no longer its own.
StatusOr<store::Task> AgentTask(Api& api, const http::Request& req, const Caller& c);
// What jobs/<id>/checkpoints/latest says: the name it holds (trimmed; ""
// when it names no single directory) and its own info. nullopt: no latest.
struct LatestCheckpoint {
  std::string name;
  files::ObjectInfo info;
};
StatusOr<std::optional<LatestCheckpoint>> ReadLatestCheckpoint(files::BlobStore& store, int64_t job_id);
// Whether `c` may read every input of `spec`, and each is there: a submit's check.
Status CheckJobInputs(Api& api, const Caller& c, const protocol::JobSpec& spec);
// Pins spec->image to a digest, so every task and restart runs the same
// image: one of the site's ("torch") to the one images/<name>/latest names
// ("torch@sha256:<hex>"); any other reference to the manifest its registry
// serves `c` (Registries::Pin). InvalidArgument naming `image` when there is
// no such image or its registry refuses `c`.
Status ResolveJobImage(Api& api, const Caller& c, protocol::JobSpec* spec);
// Removes everything under jobs/<id>/ from the files store, giving the bytes
// back to the job owner's quota (a job being deleted).
Status DeleteJobFiles(Api& api, const store::Job& job);
// The file quota that applies to `u` (0 = none), and what an object of `size`
// bytes at `key` is charged against it (server/file_quota.h, with api's limits).
int64_t Quota(Api& api, const store::User& u);
int64_t Charge(Api& api, const std::string& key, uint64_t size);
// Sets each user's file usage to what the store holds under users/<name>/ and
// their jobs' jobs/<id>/; [{"user", "before", "after"}].
StatusOr<nlohmann::json> ReconcileFileUsage(Api& api);

}  // namespace ringmaster::server
