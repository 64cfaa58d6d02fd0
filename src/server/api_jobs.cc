// Jobs: submit, list (filtered, paged, with queue positions), show, timeline, cancel, delete.
#include <algorithm>
#include <cctype>
#include <cstdint>

#include <fmt/format.h>

#include "common/json_limits.h"
#include "server/api.h"
#include "protocol/job_spec.h"
#include "server/timeline.h"

namespace ringmaster::server {
namespace {

using nlohmann::json;
using store::StateName;

std::string UserName(Api& api, int64_t id) {
  auto u = api.store->GetUser(id);
  return u.ok() ? u->name : std::to_string(id);
}

json JobJson(const store::Job& j, const std::string& user) {
  json out = {{"id", j.id},
              {"name", j.name},
              {"kind", j.kind},
              {"user", user},
              {"state", StateName(j.state)},
              {"reason", j.reason},
              {"priority", j.priority},
              {"replicas", j.replicas},
              {"restarts", j.restarts},
              {"max_restarts", j.max_restarts},
              {"created_at", FormatTimeUtc(j.created_ms)},
              {"started_at", FormatTimeUtc(j.started_ms)},
              {"finished_at", FormatTimeUtc(j.finished_ms)}};
  if (j.stop_state) out["stopping"] = j.stop_reason;
  if (auto lab = LabUrl(j)) out["lab_url"] = *lab;
  return out;
}

// GET /api/v1/jobs/{id}'s answer: the job, its spec, tasks and events.
StatusOr<JobViews::View> BuildJobView(Api& api, int64_t id) {
  RM_ASSIGN_OR_RETURN(store::Job job, api.store->GetJob(id));
  json out = JobJson(job, UserName(api, job.user_id));
  auto spec = ParseJson(job.spec_json, JsonLimits{}, "stored spec");
  out["spec"] = spec.ok() ? *spec : json(nullptr);
  RM_ASSIGN_OR_RETURN(auto nodes, api.store->ListNodes());
  std::map<int64_t, std::string> names;
  for (const auto& n : nodes) names[n.id] = n.name;
  RM_ASSIGN_OR_RETURN(auto tasks, api.store->ListTasks(job.id));
  json tj = json::array();
  for (const auto& t : tasks) {
    json x = {{"id", t.id},
              {"rank", t.rank},
              {"state", StateName(t.state)},
              {"reason", t.reason},
              {"node", t.node_id ? names[t.node_id] : ""},
              {"attempt", t.attempt},
              {"port", t.port},
              {"overlay_address", t.overlay_ip},
              {"started_at", FormatTimeUtc(t.started_ms)},
              {"finished_at", FormatTimeUtc(t.finished_ms)}};
    x["exit_code"] = t.exit_code ? json(*t.exit_code) : json(nullptr);
    tj.push_back(x);
  }
  out["tasks"] = tj;
  RM_ASSIGN_OR_RETURN(auto events, api.store->ListEvents(job.id));
  json ej = json::array();
  for (const auto& e : events) {
    json x = {{"time", FormatTimeUtc(e.ts_ms)}, {"from", e.from_state}, {"to", e.to_state}, {"reason", e.reason}};
    if (e.task_id) x["rank"] = e.rank;
    ej.push_back(x);
  }
  out["events"] = ej;
  // Stragglers and idle allocations: raised and cleared as events, so the
  // view is rebuilt when they change.
  // Only while it runs: the view of an ended job is cached for good.
  json flags = json::array();
  if (job.state == store::State::kRunning) {
    for (const auto& f : api.monitor->Flags(job.id)) flags.push_back(FlagJson(f));
  }
  out["flags"] = flags;
  return JobViews::View{0, job.user_id, store::IsTerminal(job.state), std::make_shared<const std::string>(Dump(out))};
}

// The job's view, if the caller may see it (their own, or an admin's token).
// `fresh`: built from the store even if a view is cached (a waiter fired by
// the job's end runs while the change may still be committing: the store's
// reads wait for that, the cached view would not).
StatusOr<JobViews::View> VisibleView(Api& api, int64_t id, const Caller& c, bool fresh = false) {
  const uint64_t version = api.store->JobVersion(id);  // before the reads (MetaStore::JobVersion)
  std::optional<JobViews::View> view;
  if (!fresh) view = api.job_views.Find(id, version);
  if (!view) {
    auto built = BuildJobView(api, id);
    if (!built.ok() && built.status().code() == StatusCode::kNotFound) return NotFound(fmt::format("job {} not found", id));
    if (!built.ok()) return built.status();
    built->version = version;
    api.job_views.Put(id, *built);
    view = std::move(*built);
  }
  if (view->user_id != c.user.id && !c.admin()) return NotFound(fmt::format("job {} not found", id));
  return *view;
}

http::Response ViewResponse(const JobViews::View& view) {
  http::Response r;
  r.body = *view.body;
  return r;
}

// GET /api/v1/jobs's query: which jobs, whose, which page. InvalidArgument
// naming the parameter for a bad value; PermissionDenied for another user's
// jobs without an admin's token.
StatusOr<store::JobFilter> JobFilterOf(Api& api, const http::Request& req, const Caller& c) {
  store::JobFilter f;
  RM_ASSIGN_OR_RETURN(int64_t limit, IntParam(req, "limit", 100, 1, 10000));
  f.limit = static_cast<int>(limit);
  RM_ASSIGN_OR_RETURN(f.offset, IntParam(req, "offset", 0, 0, INT64_MAX / 2));
  RM_ASSIGN_OR_RETURN(bool all, BoolParam(req, "all"));
  if (all && !c.admin()) return PermissionDenied("all: only admin tokens may list every user's jobs");
  f.user_id = all ? 0 : c.user.id;
  RM_ASSIGN_OR_RETURN(auto user, req.Param("user"));
  if (user && *user != c.user.name) {
    if (!c.admin()) return PermissionDenied("user: only admins may list other users' jobs");
    auto u = api.store->GetUserByName(*user);
    if (!u.ok() && u.status().code() == StatusCode::kNotFound) {
      return InvalidArgument(fmt::format("user: no user named \"{}\"", user->substr(0, 64)));
    }
    if (!u.ok()) return u.status();
    f.user_id = u->id;
  }
  RM_ASSIGN_OR_RETURN(auto states, req.Param("state"));
  if (states) {
    for (size_t from = 0, comma = 0; comma != std::string::npos; from = comma + 1) {
      comma = states->find(',', from);
      std::string name = states->substr(from, comma == std::string::npos ? std::string::npos : comma - from);
      for (char& ch : name) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
      auto state = store::ParseState(name);
      if (!state) return InvalidArgument(fmt::format("state: \"{}\" is not a job state", name.substr(0, 40)));
      f.states.push_back(*state);
    }
  }
  RM_ASSIGN_OR_RETURN(auto kind, req.Param("kind"));
  if (kind) {
    if (*kind != "dev" && *kind != "train" && *kind != "distributed") {
      return InvalidArgument(fmt::format("kind: \"{}\" is not a job kind (expected dev, train or distributed)",
                                         kind->substr(0, 40)));
    }
    f.kind = *kind;
  }
  RM_ASSIGN_OR_RETURN(auto name, req.Param("name"));
  if (name) {
    if (name->size() > 256) return InvalidArgument("name: longer than 256 bytes");
    f.name = *name;
  }
  return f;
}

// Someone else's job touched with an admin token: an admin action, audited.
void AuditIfAdminAction(Api& api, const http::Request& req, const Caller& c, const store::Job& job,
                        const std::string& action) {
  if (job.user_id != c.user.id) {
    api.auth->Audit(req, c.user.name, action, fmt::format("job {} of {}", job.id, UserName(api, job.user_id)), "ok");
  }
}

// The Idempotency-Key header of a submit: "" when absent. A client that may
// retry (its server failed over, its answer was lost) sends one per submit.
StatusOr<std::string> SubmitKey(const http::Request& req) {
  std::string key = req.Header("idempotency-key");
  bool ok = key.size() <= 128;
  for (char ch : key) ok = ok && (std::isalnum(static_cast<unsigned char>(ch)) || ch == '-' || ch == '_');
  const bool given = std::any_of(req.headers.begin(), req.headers.end(),
                                 [](const auto& h) { return h.first == "idempotency-key"; });
  if (!ok || (given && key.empty())) {
    return InvalidArgument("Idempotency-Key: expected 1 to 128 characters of A-Z a-z 0-9 - _ (one per submit)");
  }
  return key;
}

}  // namespace

void AddJobRoutes(Api& api) {
  http::RouteOptions submit{api.limits.max_spec_bytes, http::Pool::kApi, true, access::kSubmit};
  http::RouteOptions read{api.limits.max_body_bytes, http::Pool::kApi, true, access::kRead};
  http::RouteOptions change{api.limits.max_body_bytes, http::Pool::kApi, true, access::kSubmit};

  api.http->Route("POST", "/api/v1/jobs", submit, Json([&api](const http::Request& req, const Caller& c) -> StatusOr<Reply> {
    if (req.body.empty()) return InvalidArgument("body: empty; send a job spec (YAML or JSON, docs/jobspec.md)");
    RM_ASSIGN_OR_RETURN(protocol::JobSpec spec, protocol::ParseJobSpec(req.body));
    RM_RETURN_IF_ERROR(CheckJobInputs(api, c, spec));
    RM_RETURN_IF_ERROR(ResolveJobImage(api, c, &spec));
    RM_ASSIGN_OR_RETURN(std::string key, SubmitKey(req));
    bool existed = false;
    RM_ASSIGN_OR_RETURN(int64_t id, api.jobs->Submit(c.user, spec, key, &existed));
    return Reply{existed ? 200 : 201, {{"id", id}}};
  }));

  api.http->Route("GET", "/api/v1/jobs", read, Json([&api](const http::Request& req, const Caller& c) -> StatusOr<Reply> {
    RM_ASSIGN_OR_RETURN(store::JobFilter filter, JobFilterOf(api, req, c));
    RM_ASSIGN_OR_RETURN(store::JobPage page, api.store->ListJobs(filter));
    const auto positions = api.jobs->QueuePositions();
    json out = json::array();
    std::map<int64_t, std::string> users;  // one read per owner, not per job
    for (const auto& j : page.jobs) {
      auto u = users.find(j.user_id);
      if (u == users.end()) u = users.emplace(j.user_id, UserName(api, j.user_id)).first;
      json x = JobJson(j, u->second);
      if (auto p = positions->find(j.id); p != positions->end() && j.state == store::State::kPending) {
        x["queue_position"] = p->second;
      }
      if (j.state == store::State::kRunning) {  // what `ringmaster top` shows
        RM_ASSIGN_OR_RETURN(auto tasks, api.store->ListTasks(j.id));
        x["usage"] = JobUsageJson(api, tasks);
        json flags = json::array();
        for (const auto& f : api.monitor->Flags(j.id)) flags.push_back(FlagJson(f));
        x["flags"] = flags;
      }
      out.push_back(std::move(x));
    }
    return Reply{200, {{"jobs", out}, {"total", page.total}, {"offset", filter.offset}}};
  }));

  // Served from JobViews: built once per change of the job, not per request.
  // ?wait=S (up to 60): a job not yet ended is answered when it ends, or
  // after S seconds, whichever is first; no thread waits meanwhile. The
  // caller's token is checked again before the answer.
  api.http->Route("GET", "/api/v1/jobs/{id}", read, [&api](http::Request& req, http::Responder respond) {
    auto wait = IntParam(req, "wait", 0, 0, 60);
    if (!wait.ok()) return respond(ErrorFor(req, wait.status()));
    const Caller& c = CallerOf(req);
    const int64_t id = PathId(req);
    auto view = VisibleView(api, id, c);
    if (!view.ok()) return respond(ErrorFor(req, view.status()));
    if (view->ended || *wait == 0) return respond(ViewResponse(*view));
    if (!api.job_waiters.TryAdd(c.user.id, api.limits.max_followers_per_user)) {
      return respond(ErrorFor(req, ResourceExhausted(fmt::format("{} waits for jobs of yours are open: close some first",
                                                                 api.limits.max_followers_per_user))));
    }
    struct Wait {
      std::atomic<bool> done{false};
      std::mutex mu;
      uint64_t waiter = 0;                 // GUARDED_BY(mu)
      std::shared_ptr<http::Timer> timer;  // GUARDED_BY(mu)
    };
    auto w = std::make_shared<Wait>();
    auto answer = [&api, id, c, respond, req_copy = req]() {
      api.job_waiters.Remove(c.user.id);
      // A token revoked (or its user disabled) while it waited gets 401, not the job.
      if (Status still = api.auth->Recheck(c); !still.ok()) return respond(ErrorFor(req_copy, still));
      auto v = VisibleView(api, id, c, /*fresh=*/true);
      // The end was written on another thread (the scheduler's, an agent's
      // report): on disk before anyone is told.
      Status durable = v.ok() ? api.store->Sync() : Status::Ok();
      if (!durable.ok()) return respond(ErrorFor(req_copy, durable));
      respond(v.ok() ? ViewResponse(*v) : ErrorFor(req_copy, v.status()));
    };
    auto finish = [&api, w, answer] {
      if (w->done.exchange(true)) return;
      std::lock_guard<std::mutex> l(w->mu);
      if (w->waiter) api.job_ends.Remove(w->waiter);
      if (w->timer) w->timer->Cancel();
      api.http->Post(http::Pool::kApi, answer);
    };
    {
      std::lock_guard<std::mutex> l(w->mu);
      w->waiter = api.job_ends.Add(id, finish);
    }
    // It may have ended between the view and the waiter: look again, in the
    // store (its read waits for a change still committing; a cached view
    // would not), with no lock held (finish may run under the service's and
    // the store's locks).
    auto again = VisibleView(api, id, c, /*fresh=*/true);
    if (!again.ok() || again->ended) return finish();
    std::lock_guard<std::mutex> l(w->mu);
    if (!w->done) w->timer = api.http->After(std::chrono::seconds(*wait), finish);
  });

  // Derived from the job's events on each call: a job has tens of them per attempt.
  api.http->Route("GET", "/api/v1/jobs/{id}/timeline", read,
                  Json([&api](const http::Request& req, const Caller& c) -> StatusOr<Reply> {
                    RM_ASSIGN_OR_RETURN(store::Job job, VisibleJob(api, PathId(req), c));
                    RM_ASSIGN_OR_RETURN(auto events, api.store->ListEvents(job.id));
                    json phases = json::array();
                    for (const TimelinePhase& p : BuildTimeline(events)) {
                      json x = {{"phase", p.phase}, {"attempt", p.attempt}, {"start", FormatTimeUtc(p.start_ms)}};
                      if (p.rank >= 0) x["rank"] = p.rank;
                      x["end"] = p.end_ms ? json(FormatTimeUtc(*p.end_ms)) : json(nullptr);
                      phases.push_back(std::move(x));
                    }
                    return Reply{200, {{"job_id", job.id}, {"phases", std::move(phases)}}};
                  }));

  api.http->Route("POST", "/api/v1/jobs/{id}/cancel", change,
                  Json([&api](const http::Request& req, const Caller& c) -> StatusOr<Reply> {
                    RM_ASSIGN_OR_RETURN(store::Job job, VisibleJob(api, PathId(req), c));
                    RM_RETURN_IF_ERROR(api.jobs->Cancel(job.id, c.user.name));
                    AuditIfAdminAction(api, req, c, job, "job.cancel");
                    return Reply{202, {{"id", job.id}, {"cancelling", true}}};
                  }));

  api.http->Route("DELETE", "/api/v1/jobs/{id}", change,
                  Json([&api](const http::Request& req, const Caller& c) -> StatusOr<Reply> {
                    RM_ASSIGN_OR_RETURN(store::Job job, VisibleJob(api, PathId(req), c));
                    if (!store::IsTerminal(job.state)) {
                      return FailedPrecondition(
                          fmt::format("job {} is {}: cancel it first", job.id, StateName(job.state)));
                    }
                    // Its files first: a job's files without the job could be read and removed by nobody.
                    RM_RETURN_IF_ERROR(DeleteJobFiles(api, job));
                    RM_ASSIGN_OR_RETURN(auto tasks, api.store->ListTasks(job.id));
                    RM_RETURN_IF_ERROR(api.store->DeleteJob(job.id));
                    api.logs->DeleteJob(job.id);
                    api.metrics->DeleteJob(job.id);
                    // Its usage series and flags too (they would otherwise stay until idle).
                    std::vector<int64_t> task_ids;
                    for (const auto& t : tasks) task_ids.push_back(t.id);
                    api.monitor->ForgetJob(job.id, task_ids);
                    AuditIfAdminAction(api, req, c, job, "job.delete");
                    return Reply{200, {{"id", job.id}, {"deleted", true}}};
                  }));
}

}  // namespace ringmaster::server
