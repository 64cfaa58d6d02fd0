#include "server/api.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "common/json_limits.h"

namespace ringmaster::server {

using nlohmann::json;

bool FollowerCount::TryAdd(int64_t user_id, int limit) {
  std::lock_guard<std::mutex> l(mu_);
  int& n = count_[user_id];
  if (limit > 0 && n >= limit) return false;
  ++n;
  return true;
}

void FollowerCount::Remove(int64_t user_id) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = count_.find(user_id);
  if (it != count_.end() && --it->second <= 0) count_.erase(it);
}

std::optional<JobViews::View> JobViews::Find(int64_t job_id, uint64_t version) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = views_.find(job_id);
  if (it == views_.end() || it->second.version != version) return std::nullopt;
  return it->second;
}

void JobViews::Put(int64_t job_id, View view) {
  std::lock_guard<std::mutex> l(mu_);
  if (views_.size() >= kMax) views_.clear();
  views_[job_id] = std::move(view);
}

uint64_t JobEnds::Add(int64_t job_id, std::function<void()> fn) {
  std::lock_guard<std::mutex> l(mu_);
  const uint64_t id = next_++;
  waiters_.emplace(id, std::make_pair(job_id, std::move(fn)));
  return id;
}

void JobEnds::Remove(uint64_t waiter) {
  std::lock_guard<std::mutex> l(mu_);
  waiters_.erase(waiter);
}

void JobEnds::Fire(int64_t job_id) {
  std::vector<std::function<void()>> fire;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (auto it = waiters_.begin(); it != waiters_.end();) {
      if (it->second.first != job_id) {
        ++it;
        continue;
      }
      fire.push_back(std::move(it->second.second));
      it = waiters_.erase(it);
    }
  }
  for (auto& fn : fire) fn();
}

std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

http::Response JsonResponse(int status, const json& body) {
  http::Response r;
  r.status = status;
  r.body = Dump(body);
  return r;
}

http::Response ErrorFor(const http::Request& req, const Status& st) {
  if (st.code() == StatusCode::kInternal) {
    spdlog::error("request {} ({} {} by {}): {}", req.id, req.method, req.path,
                  req.principal.name.empty() ? "-" : req.principal.name, st.message());
    return http::ErrorResponse(500, "Internal",
                               fmt::format("internal error (request {}); the server log has the cause", req.id));
  }
  return http::ErrorResponse(http::HttpStatusFor(st.code()), StatusCodeName(st.code()), st.message());
}

http::Handler Json(JsonFn fn) {
  return [fn = std::move(fn)](http::Request& req, http::Responder respond) {
    StatusOr<Reply> reply = [&]() -> StatusOr<Reply> {
      try {
        return fn(req, CallerOf(req));
      } catch (const std::exception& e) {
        return Internal(std::string("handler threw: ") + e.what());
      }
    }();
    if (!reply.ok()) return respond(ErrorFor(req, reply.status()));
    http::Response r = JsonResponse(reply->status, reply->body);
    r.headers = std::move(reply->headers);
    respond(std::move(r));
  };
}

StatusOr<json> BodyObject(const http::Request& req) {
  if (req.body.empty()) return json::object();
  RM_ASSIGN_OR_RETURN(json body, ParseJson(req.body, JsonLimits{req.body.size(), 16}, "body"));
  if (!body.is_object()) return InvalidArgument("body: must be a JSON object");
  return body;
}

StatusOr<int64_t> IntParam(const http::Request& req, const std::string& name, int64_t def, int64_t lo, int64_t hi) {
  RM_ASSIGN_OR_RETURN(auto v, req.Param(name));
  if (!v) return def;
  int64_t n = 0;
  size_t pos = 0;
  bool ok = !v->empty() && v->size() <= 20;
  if (ok) {
    try {
      n = std::stoll(*v, &pos);
      ok = pos == v->size();
    } catch (...) {
      ok = false;
    }
  }
  if (!ok) return InvalidArgument(fmt::format("{}: \"{}\" is not an integer", name, v->substr(0, 40)));
  if (n < lo || n > hi) return InvalidArgument(fmt::format("{}: must be between {} and {}, got {}", name, lo, hi, n));
  return n;
}

StatusOr<bool> BoolParam(const http::Request& req, const std::string& name) {
  RM_ASSIGN_OR_RETURN(auto v, req.Param(name));
  if (!v) return false;
  if (v->empty() || *v == "1" || *v == "true" || *v == "yes") return true;
  if (*v == "0" || *v == "false" || *v == "no") return false;
  return InvalidArgument(fmt::format("{}: \"{}\" is not a boolean (use 1 or 0)", name, v->substr(0, 40)));
}

int64_t PathId(const http::Request& req, size_t i) {
  // The router admits only 1-18 digits for {id}: this cannot overflow.
  return i < req.matches.size() ? std::stoll(req.matches[i]) : 0;
}

StatusOr<std::string> StringField(const json& body, const std::string& name, const std::string& def) {
  auto it = body.find(name);
  if (it == body.end() || it->is_null()) return def;
  if (!it->is_string()) return InvalidArgument(fmt::format("{}: must be a string", name));
  return it->get<std::string>();
}

StatusOr<store::Job> VisibleJob(Api& api, int64_t id, const Caller& caller) {
  auto job = api.store->GetJob(id);
  if (!job.ok() && job.status().code() != StatusCode::kNotFound) return job.status();
  if (!job.ok() || (job->user_id != caller.user.id && !caller.admin())) {
    return NotFound(fmt::format("job {} not found", id));
  }
  return job;
}

}  // namespace ringmaster::server
