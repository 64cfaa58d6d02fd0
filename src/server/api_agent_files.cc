// The agents' side of jobs' files (docs/files.md, "Jobs use the files
// service"): a task's staging plan, reads of its job's inputs and
// checkpoints and writes of its outputs and checkpoints, each as the job's
// owner, only for a task placed on the calling agent's node, at its current
// attempt and not ended; and the submit-time check of a spec's inputs.
#include <memory>
#include <mutex>
#include <set>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "common/files_key.h"
#include "protocol/image_ref.h"
#include "server/api.h"
#include "server/files_access.h"
#include "server/timeline.h"

namespace ringmaster::server {
namespace {

using nlohmann::json;
using files_api::CheckAccess;
using files_api::KeyOf;
using files_api::Op;

constexpr size_t kMaxStagedFiles = 10000;  // files one task stages, over all its inputs (or its checkpoint)

// Whether `c` may read the input `from`, a file or a directory: what is
// under it is in the same namespace, so this also takes jobs/7/outputs or
// users/alice, which name no file themselves.
Status CheckInputAccess(Api& api, const Caller& c, const std::string& from) {
  Status st = CheckAccess(api, c, from + "/_", Op::kRead);
  if (st.code() == StatusCode::kNotFound) return NotFound(from + ": no such file");
  return st;
}

// Every object at `from`: the object itself, or every one under from/.
// NotFound when there is none; ResourceExhausted past `limit` objects.
Status ListInput(Api& api, const std::string& from, size_t limit, std::vector<files::ObjectInfo>* out) {
  auto head = api.files->Head(from);
  if (head.ok()) {
    out->push_back(*head);
    return Status::Ok();
  }
  if (head.status().code() != StatusCode::kNotFound) return head.status();
  std::string after;
  bool any = false;
  while (true) {
    RM_ASSIGN_OR_RETURN(files::ListResult page, api.files->List(from + "/", after, 1000));
    for (auto& o : page.objects) {
      if (out->size() >= limit) {
        return ResourceExhausted(fmt::format("{}: more files than a task may stage ({} in all, over every input); "
                                             "pack them into one archive", from, kMaxStagedFiles));
      }
      if (o.sha256.empty()) {  // S3 listings carry no metadata: ask each object
        auto h = api.files->Head(o.key);
        if (!h.ok()) return h.status();
        o = *h;
      }
      out->push_back(std::move(o));
      any = true;
    }
    if (!page.next_after) break;
    after = *page.next_after;
  }
  if (!any) return NotFound(fmt::format("{}: no such file or directory in the files store", from));
  return Status::Ok();
}

// The job's owner, as an agent acts for them on the job's files.
StatusOr<Caller> OwnerCaller(Api& api, const store::Job& job) {
  Caller c;
  RM_ASSIGN_OR_RETURN(c.user, api.store->GetUser(job.user_id));
  c.scope = c.user.role == store::Role::kAdmin ? Scope::kAdmin : Scope::kSubmit;
  return c;
}

// What an agent's files call is about: the route's task, placed on the
// agent's node, at the attempt the query names and not ended; its job, spec
// and owner. Anything else is 409: the attempt is no longer the agent's.
struct AgentTaskFiles {
  store::Task task;
  store::Job job;
  protocol::JobSpec spec;
  Caller owner;
};

// The tasks writing a checkpoint now: its first file opens the timeline's
// checkpoint phase, `latest` (written last) closes it. Lost with the server:
// a checkpoint under way then shows one start more, which the timeline ignores.
struct CheckpointsOpen {
  std::mutex mu;
  std::set<int64_t> tasks;  // GUARDED_BY(mu)
};

void NoteCheckpointWrite(Api& api, CheckpointsOpen& open, const store::Task& task, bool latest) {
  {
    std::lock_guard<std::mutex> l(open.mu);
    if (latest) {
      open.tasks.erase(task.id);
    } else if (!open.tasks.insert(task.id).second) {
      return;  // a later file of the checkpoint under way
    }
  }
  const std::string state = store::StateName(task.state);
  Status st = api.store->AddEvent({0, task.job_id, task.id, task.rank, api.clock->NowMs(), state, state,
                                   latest ? kCheckpointWritten : PhaseEventReason("checkpoint")});
  if (!st.ok()) spdlog::warn("files: task {}'s checkpoint not noted in its events: {}", task.id, st.ToString());
}

StatusOr<AgentTaskFiles> TaskFilesOf(Api& api, const http::Request& req, const Caller& agent) {
  AgentTaskFiles f;
  RM_ASSIGN_OR_RETURN(f.task, AgentTask(api, req, agent));
  RM_ASSIGN_OR_RETURN(int64_t attempt, IntParam(req, "attempt", -1, 0, INT32_MAX));
  if (f.task.attempt != attempt) {
    return FailedPrecondition(fmt::format("task {} is on attempt {}, not {}", f.task.id, f.task.attempt, attempt));
  }
  if (store::IsTerminal(f.task.state)) return FailedPrecondition(fmt::format("task {} has ended", f.task.id));
  RM_ASSIGN_OR_RETURN(f.job, api.store->GetJob(f.task.job_id));
  RM_ASSIGN_OR_RETURN(f.spec, protocol::JobSpecFromJson(f.job.spec_json));
  RM_ASSIGN_OR_RETURN(f.owner, OwnerCaller(api, f.job));
  return f;
}

bool Under(const std::string& key, const std::string& dir) {
  return key.size() > dir.size() && key.compare(0, dir.size(), dir) == 0 && key[dir.size()] == '/';
}

json StageEntry(const files::ObjectInfo& o, const std::string& to) {
  return {{"path", o.key}, {"size", o.size}, {"sha256", o.sha256}, {"to", to}};
}

// What a task's node stages before it starts: each input's files, and the
// job's latest checkpoint (the directory `latest` names, then `latest`).
StatusOr<json> StagePlan(Api& api, const AgentTaskFiles& f) {
  json inputs = json::array();
  size_t count = 0;
  for (size_t i = 0; i < f.spec.inputs.size(); ++i) {
    const protocol::JobInput& in = f.spec.inputs[i];
    const std::string field = fmt::format("inputs[{}].from", i);
    if (Status st = CheckInputAccess(api, f.owner, in.from); !st.ok()) return st.Annotate(field);
    std::vector<files::ObjectInfo> objects;
    if (Status st = ListInput(api, in.from, kMaxStagedFiles - count, &objects); !st.ok()) return st.Annotate(field);
    count += objects.size();
    for (const auto& o : objects) {
      inputs.push_back(StageEntry(o, o.key == in.from ? in.to : in.to + o.key.substr(in.from.size())));
    }
  }
  json checkpoint = json::array();
  const std::string dir = fmt::format("jobs/{}/checkpoints", f.job.id);
  RM_ASSIGN_OR_RETURN(auto latest, ReadLatestCheckpoint(*api.files, f.job.id));
  if (latest && !latest->name.empty()) {
    std::vector<files::ObjectInfo> objects;
    Status st = ListInput(api, dir + "/" + latest->name, kMaxStagedFiles, &objects);
    if (st.ok()) {
      for (const auto& o : objects) checkpoint.push_back(StageEntry(o, o.key.substr(dir.size() + 1)));
      checkpoint.push_back(StageEntry(latest->info, "latest"));
    } else if (st.code() != StatusCode::kNotFound) {
      return st;
    }
  }
  return json{{"job_id", f.job.id}, {"inputs", inputs}, {"checkpoint", checkpoint}, {"outputs", f.spec.outputs}};
}

// Objects under `prefix`, counted a page at a time, stopping past `limit`.
StatusOr<size_t> CountUnder(Api& api, const std::string& prefix, size_t limit) {
  size_t n = 0;
  std::string after;
  while (true) {
    RM_ASSIGN_OR_RETURN(files::ListResult page, api.files->List(prefix, after, 1000));
    n += page.objects.size();
    if (!page.next_after || n > limit) return n;
    after = *page.next_after;
  }
}

// The task and the key of an agent's read or write of its job's files; on
// an error the answer is sent and nullopt returned.
std::optional<std::pair<AgentTaskFiles, std::string>> AgentFileRequest(Api& api, const http::Request& req,
                                                                       const http::Responder& respond) {
  auto f = TaskFilesOf(api, req, CallerOf(req));
  if (!f.ok()) {
    respond(ErrorFor(req, f.status()));
    return std::nullopt;
  }
  auto key = KeyOf(req, 1);
  if (!key.ok()) {
    respond(ErrorFor(req, key.status()));
    return std::nullopt;
  }
  return std::make_pair(std::move(*f), std::move(*key));
}

}  // namespace

StatusOr<std::optional<LatestCheckpoint>> ReadLatestCheckpoint(files::BlobStore& store, int64_t job_id) {
  const std::string dir = fmt::format("jobs/{}/checkpoints", job_id);
  auto reader = store.Open(dir + "/latest", {});
  if (!reader.ok()) {
    if (reader.status().code() == StatusCode::kNotFound) return std::optional<LatestCheckpoint>();
    return reader.status();
  }
  char buf[512];
  RM_ASSIGN_OR_RETURN(size_t n, (*reader)->Read(buf, sizeof buf));
  LatestCheckpoint latest{std::string(buf, n), (*reader)->info()};
  std::string& name = latest.name;
  while (!name.empty() && (name.back() == '\n' || name.back() == ' ' || name.back() == '\r')) name.pop_back();
  if (name.find('/') != std::string::npos || !ValidateFilesKey(dir + "/" + name).ok()) name.clear();
  return std::optional<LatestCheckpoint>(std::move(latest));
}

Status CheckJobInputs(Api& api, const Caller& c, const protocol::JobSpec& spec) {
  size_t files = 0;  // to stage, all inputs together: refused now rather than at every start
  for (size_t i = 0; i < spec.inputs.size(); ++i) {
    const std::string& from = spec.inputs[i].from;
    const std::string field = fmt::format("inputs[{}].from", i);
    Status st = CheckInputAccess(api, c, from);
    if (st.ok()) {
      auto head = api.files->Head(from);
      if (head.ok()) {
        ++files;
      } else if (head.status().code() != StatusCode::kNotFound) {
        st = head.status();
      } else {  // a directory: its files
        auto n = CountUnder(api, from + "/", kMaxStagedFiles - files);
        st = !n.ok() ? n.status()
             : *n == 0 ? NotFound(fmt::format("{}: no such file or directory in the files store", from))
                       : Status::Ok();
        if (n.ok()) files += *n;
      }
    }
    if (!st.ok()) {
      // A path the submitter may not read is as missing to them as one that is not there.
      if (st.code() == StatusCode::kNotFound || st.code() == StatusCode::kInvalidArgument) {
        return InvalidArgument(fmt::format("{}: {}", field, st.message()));
      }
      return st.Annotate(field);
    }
    if (files > kMaxStagedFiles) {
      return InvalidArgument(
          fmt::format("{}: more than {} files to stage over all inputs; pack them into one archive", field, kMaxStagedFiles));
    }
  }
  return Status::Ok();
}

Status ResolveJobImage(Api& api, const Caller& c, protocol::JobSpec* spec) {
  if (spec->image.empty()) return Status::Ok();
  RM_ASSIGN_OR_RETURN(protocol::ImageRef ref, protocol::ParseImageRef(spec->image));
  if (!protocol::MayNameSiteImage(ref)) {
    if (!api.registries) return InvalidArgument("image: this server runs no images from registries");
    RM_ASSIGN_OR_RETURN(spec->image, api.registries->Pin(c.user.id, ref));
    return Status::Ok();
  }
  const std::string& name = ref.repository;
  std::string hex = ref.digest;
  if (hex.empty()) {
    auto reader = api.files->Open(fmt::format("images/{}/latest", name), {});
    if (!reader.ok()) {
      if (reader.status().code() == StatusCode::kNotFound) {
        // A bare name is the site's, never Docker Hub's by accident.
        return InvalidArgument(fmt::format("image: no image \"{0}\" among the site's (an admin pushes one with "
                                           "`ringmaster images push {0}`; for Docker Hub's write docker.io/library/{0} "
                                           "or {0}:TAG)", name));
      }
      return reader.status().Annotate("image");
    }
    char buf[128];
    RM_ASSIGN_OR_RETURN(size_t n, (*reader)->Read(buf, sizeof buf));
    hex.assign(buf, n);
    while (!hex.empty() && (hex.back() == '\n' || hex.back() == ' ')) hex.pop_back();
    if (hex.rfind("sha256:", 0) == 0) hex = hex.substr(7);
    if (hex.size() != 64 || hex.find_first_not_of("0123456789abcdef") != std::string::npos) {
      return Internal(fmt::format("image: images/{}/latest does not name a digest", name));
    }
  }
  auto head = api.files->Head(fmt::format("images/{}/{}.tar", name, hex));
  if (!head.ok()) {
    if (head.status().code() == StatusCode::kNotFound) {
      return InvalidArgument(fmt::format("image: {}@sha256:{} is not in the files service", name, hex));
    }
    return head.status().Annotate("image");
  }
  spec->image = fmt::format("{}@sha256:{}", name, hex);
  return Status::Ok();
}

void AddAgentFileRoutes(Api& api) {
  http::RouteOptions agent{api.limits.max_body_bytes, http::Pool::kAgent, true, access::kAgent};
  http::RouteOptions upload{api.limits.max_file_bytes, http::Pool::kAgent, true, access::kAgent, true};
  // The plan: what to stage before the task starts, and what to upload after.
  // Listing a large input (on S3, a HEAD per object) takes a while: on the
  // API pool, so heartbeats, reports and long-polls on the agents' pool never wait.
  http::RouteOptions plan_route{api.limits.max_body_bytes, http::Pool::kApi, true, access::kAgent};
  api.http->Route("GET", "/api/v1/agent/tasks/{id}/files", plan_route,
                  Json([&api](const http::Request& req, const Caller& c) -> StatusOr<Reply> {
                    RM_ASSIGN_OR_RETURN(AgentTaskFiles f, TaskFilesOf(api, req, c));
                    RM_ASSIGN_OR_RETURN(json plan, StagePlan(api, f));
                    return Reply{200, plan};
                  }));
  // Reads of the job's inputs and checkpoints, as the job's owner.
  api.http->Route("GET", "/api/v1/agent/tasks/{id}/files/{path...}", agent,
                  [&api](http::Request& req, http::Responder respond) {
                    auto r = AgentFileRequest(api, req, respond);
                    if (!r) return;
                    const auto& [f, key] = *r;
                    bool staged = Under(key, fmt::format("jobs/{}/checkpoints", f.job.id));
                    for (const auto& in : f.spec.inputs) staged = staged || key == in.from || Under(key, in.from);
                    if (!staged) {
                      return respond(ErrorFor(req, PermissionDenied("path: not one of the job's inputs or checkpoints")));
                    }
                    files_api::Get(api, req, std::move(respond), false, f.owner, key);
                  });
  // The registry login a task's image needs: the job owner's, else the
  // site's, else none ({}). Only to the agent of the node the task is placed
  // on, at its current attempt, for the one registry its pinned image names;
  // never logged (the access log has the path only).
  api.http->Route("GET", "/api/v1/agent/tasks/{id}/registry-login", agent,
                  Json([&api](const http::Request& req, const Caller& c) -> StatusOr<Reply> {
                    RM_ASSIGN_OR_RETURN(AgentTaskFiles f, TaskFilesOf(api, req, c));
                    if (f.spec.image.empty() || !api.registries) return Reply{200, json::object()};
                    RM_ASSIGN_OR_RETURN(protocol::ImageRef ref, protocol::ParseImageRef(f.spec.image));
                    if (ref.registry.empty()) return Reply{200, json::object()};  // the site's image
                    const RegistryImage at = RegistryImageOf(ref);
                    RM_ASSIGN_OR_RETURN(registry::Credentials login,
                                        api.registries->CredentialsFor(f.owner.user.id, at.registry, nullptr));
                    if (login.empty()) return Reply{200, json::object()};
                    return Reply{200, {{"registry", at.registry}, {"username", login.username}, {"password", login.password}}};
                  }));
  // Tasks' images (`images/<name>/<hex>.{tar,json}`), which every user may read anyway.
  api.http->Route("GET", "/api/v1/agent/images/{name}/{file}", agent, [&api](http::Request& req, http::Responder respond) {
    const std::string name = req.matches.at(0), file = req.matches.at(1);
    if (auto ref = protocol::ParseJobImageRef(name); !ref.ok() || !ref->digest.empty()) {
      return respond(ErrorFor(req, InvalidArgument("name: not an image name")));
    }
    const bool ok = (file.size() == 68 && file.compare(64, 4, ".tar") == 0) ||
                    (file.size() == 69 && file.compare(64, 5, ".json") == 0);
    if (!ok || file.find_first_not_of("0123456789abcdef") < 64) {
      return respond(ErrorFor(req, InvalidArgument("file: must be <sha256 hex>.tar or <sha256 hex>.json")));
    }
    files_api::Get(api, req, std::move(respond), false, CallerOf(req), fmt::format("images/{}/{}", name, file));
  });
  // Writes of the job's outputs and checkpoints, as (and counted against) the job's owner.
  // A checkpoint's first file and its `latest` are task events: the job's timeline.
  auto checkpointing = std::make_shared<CheckpointsOpen>();
  api.http->Route("PUT", "/api/v1/agent/tasks/{id}/files/{path...}", upload,
                  [&api, checkpointing](http::Request& req, http::Responder respond) {
                    auto r = AgentFileRequest(api, req, respond);
                    if (!r) return;
                    const auto& [f, key] = *r;
                    if (!Under(key, fmt::format("jobs/{}/outputs", f.job.id)) &&
                        !Under(key, fmt::format("jobs/{}/checkpoints", f.job.id))) {
                      return respond(ErrorFor(req, PermissionDenied(fmt::format(
                                                       "path: an agent writes only under jobs/{0}/outputs/ and jobs/{0}/checkpoints/",
                                                       f.job.id))));
                    }
                    auto dry_run = BoolParam(req, "dry_run");
                    if (dry_run.ok() && !*dry_run && Under(key, fmt::format("jobs/{}/checkpoints", f.job.id))) {
                      NoteCheckpointWrite(api, *checkpointing, f.task, key.ends_with("/checkpoints/latest"));
                    }
                    files_api::Put(api, req, std::move(respond), f.owner, key);
                  });
}

}  // namespace ringmaster::server
