#include "server/server.h"

#include <httplib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <regex>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "common/crypto.h"
#include "common/files.h"
#include "common/units.h"

namespace ringmaster::server {

using nlohmann::json;
using store::IsTerminal;
using store::Role;
using store::StateName;

namespace {

constexpr size_t kMaxBody = 16 << 20;
constexpr size_t kMaxSpec = 1 << 20;
constexpr auto kFollowPoll = std::chrono::milliseconds(200);
constexpr int64_t kKeepaliveMs = 5000;

int HttpStatus(StatusCode c) {
  switch (c) {
    case StatusCode::kOk: return 200;
    case StatusCode::kInvalidArgument: return 400;
    case StatusCode::kUnauthenticated: return 401;
    case StatusCode::kPermissionDenied: return 403;
    case StatusCode::kNotFound: return 404;
    case StatusCode::kAlreadyExists:
    case StatusCode::kFailedPrecondition:
    case StatusCode::kAborted: return 409;
    case StatusCode::kResourceExhausted: return 429;
    case StatusCode::kUnavailable: return 503;
    case StatusCode::kDeadlineExceeded: return 504;
    case StatusCode::kInternal: return 500;
  }
  return 500;
}

std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

void WriteError(httplib::Response& res, const Status& st) {
  res.status = HttpStatus(st.code());
  res.set_content(Dump({{"error", {{"code", StatusCodeName(st.code()), }, {"message", st.message()}}}}),
                  "application/json");
}

struct Reply {
  int status = 200;
  json body;
};

enum class Access { kUser, kAdmin };

StatusOr<json> ParseBody(const httplib::Request& req) {
  if (req.body.empty()) return json::object();
  try {
    return json::parse(req.body);
  } catch (const std::exception& e) {
    return InvalidArgument(std::string("body: not valid JSON: ") + e.what());
  }
}

StatusOr<int64_t> IntParam(const httplib::Request& req, const std::string& name, int64_t def) {
  if (!req.has_param(name.c_str())) return def;
  try {
    size_t pos;
    std::string v = req.get_param_value(name.c_str());
    int64_t n = std::stoll(v, &pos);
    if (pos != v.size()) throw std::invalid_argument(v);
    return n;
  } catch (...) {
    return InvalidArgument(fmt::format("{}: \"{}\" is not an integer", name, req.get_param_value(name.c_str())));
  }
}

bool BoolParam(const httplib::Request& req, const std::string& name) {
  if (!req.has_param(name.c_str())) return false;
  std::string v = req.get_param_value(name.c_str());
  return v.empty() || v == "1" || v == "true" || v == "yes";
}

// A path id (matched by \d+); nullopt when it overflows int64.
std::optional<int64_t> ParseId(const std::string& text) {
  try {
    return std::stoll(text);
  } catch (...) {
    return std::nullopt;
  }
}

json UserJson(const store::User& u) {
  return {{"id", u.id}, {"name", u.name}, {"role", store::RoleName(u.role)}, {"created_at", FormatTimeUtc(u.created_ms)}};
}

}  // namespace

Server::Server(ServerOptions options) : options_(std::move(options)) {}

Server::~Server() { Stop(); }

std::string Server::url() const { return fmt::format("http://{}:{}", options_.host, port_); }

Status Server::Bootstrap() {
  RM_RETURN_IF_ERROR(MakeDirs(options_.data_dir, 0700));
  RM_ASSIGN_OR_RETURN(store_, store::OpenSqliteMetaStore(options_.data_dir + "/meta.db"));
  logs_ = std::make_unique<LogStore>(options_.data_dir + "/logs");
  metrics_ = std::make_unique<LogStore>(options_.data_dir + "/metrics");
  if (options_.jobs.files_dir.empty()) options_.jobs.files_dir = options_.data_dir + "/files";
  RM_ASSIGN_OR_RETURN(int64_t users, store_->CountUsers());
  if (users == 0) {
    const int64_t now = RealClock::Get()->NowMs();
    std::string token = NewApiToken();
    RM_RETURN_IF_ERROR(store_->InTransaction([&]() -> Status {
      RM_ASSIGN_OR_RETURN(int64_t uid, store_->CreateUser({0, "admin", Role::kAdmin, "", now}));
      return store_->CreateToken({0, uid, "bootstrap", Sha256Hex(token), now}).status();
    }));
    RM_RETURN_IF_ERROR(WriteFileAtomic(admin_token_path(), token + "\n", 0600));
    spdlog::info("created user admin; its token is in {}", admin_token_path());
  }
  return Status::Ok();
}

Status Server::Start() {
  RM_RETURN_IF_ERROR(Bootstrap());
  jobs_ = std::make_unique<JobService>(store_.get(), RealClock::Get(), options_.jobs);
  http_ = std::make_unique<httplib::Server>();
  http_->new_task_queue = [] { return new httplib::ThreadPool(64); };
  http_->set_payload_max_length(kMaxBody);
  http_->set_read_timeout(std::chrono::seconds(30));
  http_->set_write_timeout(std::chrono::seconds(30));
  Routes();
  if (options_.port == 0) {
    port_ = http_->bind_to_any_port(options_.host.c_str());
  } else {
    port_ = http_->bind_to_port(options_.host.c_str(), options_.port) ? options_.port : -1;
  }
  if (port_ <= 0) {
    return Unavailable(fmt::format("cannot listen on {}:{} (is another server using it?)", options_.host, options_.port));
  }
  http_thread_ = std::thread([this] { http_->listen_after_bind(); });
  jobs_->Start();
  json info = {{"url", url()}, {"pid", getpid()}};
  RM_RETURN_IF_ERROR(WriteFileAtomic(options_.data_dir + "/server.json", info.dump() + "\n", 0644));
  spdlog::info("ringmaster server listening on {} (data in {})", url(), options_.data_dir);
  return Status::Ok();
}

void Server::Stop() {
  if (jobs_) jobs_->Stop();
  if (http_) http_->stop();
  if (http_thread_.joinable()) http_thread_.join();
}

void Server::Routes() {
  auto authenticate = [this](const httplib::Request& req) -> StatusOr<store::User> {
    std::string auth = req.get_header_value("Authorization");
    const std::string prefix = "Bearer ";
    if (auth.rfind(prefix, 0) != 0) {
      return Unauthenticated("missing credentials: send the header \"Authorization: Bearer <token>\"");
    }
    auto token = store_->GetTokenByHash(Sha256Hex(auth.substr(prefix.size())));
    if (!token.ok()) return Unauthenticated("invalid or revoked token");
    return store_->GetUser(token->user_id);
  };

  using Fn = std::function<StatusOr<Reply>(const httplib::Request&, const store::User&)>;
  auto route = [this, authenticate](const std::string& method, const std::string& pattern, Access access, Fn fn) {
    auto handler = [authenticate, access, fn](const httplib::Request& req, httplib::Response& res) {
      auto user = authenticate(req);
      if (!user.ok()) return WriteError(res, user.status());
      if (access == Access::kAdmin && user->role != Role::kAdmin) {
        return WriteError(res, PermissionDenied("this call needs an admin token"));
      }
      StatusOr<Reply> reply = [&]() -> StatusOr<Reply> {
        try {
          return fn(req, *user);
        } catch (const std::exception& e) {
          return Internal(e.what());
        }
      }();
      if (!reply.ok()) return WriteError(res, reply.status());
      res.status = reply->status;
      res.set_content(Dump(reply->body), "application/json");
    };
    if (method == "GET") http_->Get(pattern, handler);
    if (method == "POST") http_->Post(pattern, handler);
    if (method == "DELETE") http_->Delete(pattern, handler);
  };

  // A job the caller may see: its owner's or, for admins, anyone's. Others
  // get NotFound, so job ids of other users are not even confirmed to exist.
  auto visible_job = [this](const std::string& id_text, const store::User& user) -> StatusOr<store::Job> {
    auto id = ParseId(id_text);
    if (!id) return NotFound(fmt::format("job {} not found", id_text));
    auto job = store_->GetJob(*id);
    if (!job.ok() || (job->user_id != user.id && user.role != Role::kAdmin)) {
      return NotFound(fmt::format("job {} not found", *id));
    }
    return job;
  };

  auto user_name = [this](int64_t id) {
    auto u = store_->GetUser(id);
    return u.ok() ? u->name : std::to_string(id);
  };

  auto job_json = [user_name](const store::Job& j) {
    json out = {{"id", j.id},
                {"name", j.name},
                {"kind", j.kind},
                {"user", user_name(j.user_id)},
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
    return out;
  };

  http_->Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(R"({"status":"ok"})", "application/json");
  });

  route("GET", "/api/v1/whoami", Access::kUser,
        [](const httplib::Request&, const store::User& u) -> StatusOr<Reply> { return Reply{200, UserJson(u)}; });

  // ---- jobs
  route("POST", "/api/v1/jobs", Access::kUser, [this](const httplib::Request& req, const store::User& u) -> StatusOr<Reply> {
    if (req.body.size() > kMaxSpec) return InvalidArgument("spec: larger than 1 MiB");
    RM_ASSIGN_OR_RETURN(JobSpec spec, ParseJobSpec(req.body));
    RM_ASSIGN_OR_RETURN(int64_t id, jobs_->Submit(u, spec));
    return Reply{201, {{"id", id}}};
  });

  route("GET", "/api/v1/jobs", Access::kUser, [this, job_json](const httplib::Request& req, const store::User& u) -> StatusOr<Reply> {
    RM_ASSIGN_OR_RETURN(int64_t limit, IntParam(req, "limit", 100));
    if (limit < 1 || limit > 10000) return InvalidArgument("limit: must be between 1 and 10000");
    bool all = BoolParam(req, "all");
    if (all && u.role != Role::kAdmin) return PermissionDenied("all: only admins may list every user's jobs");
    RM_ASSIGN_OR_RETURN(auto jobs, store_->ListJobs(all ? 0 : u.id, static_cast<int>(limit)));
    json out = json::array();
    for (const auto& j : jobs) out.push_back(job_json(j));
    return Reply{200, {{"jobs", out}}};
  });

  route("GET", R"(/api/v1/jobs/(\d+))", Access::kUser,
        [this, visible_job, job_json](const httplib::Request& req, const store::User& u) -> StatusOr<Reply> {
          RM_ASSIGN_OR_RETURN(store::Job job, visible_job(req.matches[1], u));
          json out = job_json(job);
          out["spec"] = json::parse(job.spec_json);
          RM_ASSIGN_OR_RETURN(auto nodes, store_->ListNodes());
          std::map<int64_t, std::string> names;
          for (const auto& n : nodes) names[n.id] = n.name;
          RM_ASSIGN_OR_RETURN(auto tasks, store_->ListTasks(job.id));
          json tj = json::array();
          for (const auto& t : tasks) {
            json x = {{"id", t.id},
                      {"rank", t.rank},
                      {"state", StateName(t.state)},
                      {"reason", t.reason},
                      {"node", t.node_id ? names[t.node_id] : ""},
                      {"attempt", t.attempt},
                      {"port", t.port},
                      {"started_at", FormatTimeUtc(t.started_ms)},
                      {"finished_at", FormatTimeUtc(t.finished_ms)}};
            x["exit_code"] = t.exit_code ? json(*t.exit_code) : json(nullptr);
            tj.push_back(x);
          }
          out["tasks"] = tj;
          RM_ASSIGN_OR_RETURN(auto events, store_->ListEvents(job.id));
          json ej = json::array();
          for (const auto& e : events) {
            json x = {{"time", FormatTimeUtc(e.ts_ms)}, {"from", e.from_state}, {"to", e.to_state}, {"reason", e.reason}};
            if (e.task_id) x["rank"] = e.rank;
            ej.push_back(x);
          }
          out["events"] = ej;
          return Reply{200, out};
        });

  route("POST", R"(/api/v1/jobs/(\d+)/cancel)", Access::kUser,
        [this, visible_job](const httplib::Request& req, const store::User& u) -> StatusOr<Reply> {
          RM_ASSIGN_OR_RETURN(store::Job job, visible_job(req.matches[1], u));
          RM_RETURN_IF_ERROR(jobs_->Cancel(job.id, u.name));
          return Reply{202, {{"id", job.id}, {"cancelling", true}}};
        });

  route("DELETE", R"(/api/v1/jobs/(\d+))", Access::kUser,
        [this, visible_job](const httplib::Request& req, const store::User& u) -> StatusOr<Reply> {
          RM_ASSIGN_OR_RETURN(store::Job job, visible_job(req.matches[1], u));
          if (!IsTerminal(job.state)) {
            return FailedPrecondition(fmt::format("job {} is {}: cancel it first", job.id, StateName(job.state)));
          }
          RM_RETURN_IF_ERROR(store_->DeleteJob(job.id));
          logs_->DeleteJob(job.id);
          metrics_->DeleteJob(job.id);
          return Reply{200, {{"id", job.id}, {"deleted", true}}};
        });

  // ---- metrics: what a task appended to $RINGMASTER_METRICS_FILE, one JSON
  // object per line, for one rank (default 0) across its attempts.
  route("GET", R"(/api/v1/jobs/(\d+)/metrics)", Access::kUser,
        [this, visible_job](const httplib::Request& req, const store::User& u) -> StatusOr<Reply> {
          RM_ASSIGN_OR_RETURN(store::Job job, visible_job(req.matches[1], u));
          RM_ASSIGN_OR_RETURN(int64_t rank, IntParam(req, "rank", 0));
          RM_ASSIGN_OR_RETURN(int64_t limit, IntParam(req, "limit", 0));
          if (rank < 0) return InvalidArgument("rank: must be >= 0");
          if (limit < 0) return InvalidArgument("limit: must be >= 0");
          json series = json::array();
          for (const LogFile& f : metrics_->List(job.id)) {
            if (f.rank != rank) continue;
            std::ifstream in(f.path, std::ios::binary);
            std::string line;
            // Only whole lines: the last one may still be arriving.
            while (std::getline(in, line) && !in.eof()) {
              json rec = json::parse(line, nullptr, /*allow_exceptions=*/false);
              if (!rec.is_object()) continue;  // a task's stray line is skipped, not an error
              rec["attempt"] = f.attempt;
              series.push_back(std::move(rec));
            }
          }
          if (limit > 0 && series.size() > static_cast<size_t>(limit)) {
            series.erase(series.begin(), series.end() - limit);
          }
          json latest = json::object();
          for (const json& rec : series) latest.update(rec);  // the newest value of every field
          return Reply{200, {{"job_id", job.id}, {"rank", rank}, {"latest", latest}, {"series", series}}};
        });

  // ---- logs: text, or with follow=1 a stream of NDJSON records until the job ends
  http_->Get(R"(/api/v1/jobs/(\d+)/logs)", [this, authenticate, visible_job](const httplib::Request& req,
                                                                             httplib::Response& res) {
    auto user = authenticate(req);
    if (!user.ok()) return WriteError(res, user.status());
    auto job = visible_job(req.matches[1], *user);
    if (!job.ok()) return WriteError(res, job.status());
    auto rank = IntParam(req, "rank", -1);
    if (!rank.ok()) return WriteError(res, rank.status());
    const int64_t job_id = job->id;
    const int want_rank = static_cast<int>(*rank);

    if (!BoolParam(req, "follow")) {
      std::string out;
      for (const LogFile& f : logs_->List(job_id)) {
        if (want_rank >= 0 && f.rank != want_rank) continue;
        std::ifstream in(f.path, std::ios::binary);
        std::string line;
        if (f.attempt > 1) out += fmt::format("[{}] --- attempt {} ---\n", f.rank, f.attempt);
        while (std::getline(in, line)) out += fmt::format("[{}] {}\n", f.rank, line);
      }
      res.set_content(out, "text/plain; charset=utf-8");
      return;
    }

    struct Cursor {
      int64_t offset = 0;
      std::string partial;
    };
    struct Follow {
      std::map<std::string, Cursor> cursors;
      int64_t last_write_ms = 0;
    };
    auto state = std::make_shared<Follow>();
    res.set_chunked_content_provider(
        "application/x-ndjson", [this, job_id, want_rank, state](size_t, httplib::DataSink& sink) {
          auto job_now = store_->GetJob(job_id);
          const bool ended = !job_now.ok() || IsTerminal(job_now->state);
          bool wrote = false;
          auto emit = [&](const json& rec) {
            std::string line = Dump(rec) + "\n";
            sink.write(line.data(), line.size());
            wrote = true;
          };
          for (const LogFile& f : logs_->List(job_id)) {
            if (want_rank >= 0 && f.rank != want_rank) continue;
            Cursor& c = state->cursors[f.path];
            std::ifstream in(f.path, std::ios::binary);
            in.seekg(c.offset);
            std::string chunk(256 << 10, '\0');
            in.read(chunk.data(), static_cast<std::streamsize>(chunk.size()));
            chunk.resize(static_cast<size_t>(in.gcount()));
            c.offset += static_cast<int64_t>(chunk.size());
            c.partial += chunk;
            size_t start = 0, nl;
            while ((nl = c.partial.find('\n', start)) != std::string::npos) {
              emit({{"rank", f.rank}, {"attempt", f.attempt}, {"line", c.partial.substr(start, nl - start)}});
              start = nl + 1;
            }
            c.partial.erase(0, start);
            if (ended && chunk.empty() && !c.partial.empty()) {
              emit({{"rank", f.rank}, {"attempt", f.attempt}, {"line", c.partial}});
              c.partial.clear();
            }
          }
          const int64_t now = RealClock::Get()->NowMs();
          if (wrote) {
            state->last_write_ms = now;
            return true;
          }
          if (ended) {
            json end = {{"end", true}};
            if (job_now.ok()) {
              end["state"] = StateName(job_now->state);
              end["reason"] = job_now->reason;
            }
            emit(end);
            sink.done();
            return true;
          }
          if (now - state->last_write_ms >= kKeepaliveMs) {
            emit({{"keepalive", true}});
            state->last_write_ms = now;
          }
          std::this_thread::sleep_for(kFollowPoll);
          return true;
        });
  });

  // ---- nodes
  route("GET", "/api/v1/nodes", Access::kUser, [this](const httplib::Request&, const store::User&) -> StatusOr<Reply> {
    RM_ASSIGN_OR_RETURN(auto nodes, store_->ListNodes());
    RM_ASSIGN_OR_RETURN(auto placed, store_->ListPlacedTasks());
    const int64_t now = RealClock::Get()->NowMs();
    json out = json::array();
    for (const auto& n : nodes) {
      int64_t cpu = 0, mem = 0;
      int gpus = 0, tasks = 0;
      for (const auto& t : placed) {
        if (t.node_id != n.id) continue;
        cpu += t.cpu_milli;
        mem += t.memory_bytes;
        gpus += t.gpus;
        ++tasks;
      }
      bool ready = jobs_->NodeReady(n);
      out.push_back({{"id", n.id},
                     {"name", n.name},
                     {"state", ready ? "ready" : "unreachable"},
                     {"last_heartbeat_at", FormatTimeUtc(n.last_heartbeat_ms)},
                     {"last_heartbeat_age_ms", now - n.last_heartbeat_ms},
                     {"cpu", FormatCpu(n.cpu_milli)},
                     {"memory_bytes", n.memory_bytes},
                     {"gpus", json::parse(n.gpus_json)},
                     {"allocated", {{"cpu", FormatCpu(cpu)}, {"memory_bytes", mem}, {"gpus", gpus}, {"tasks", tasks}}},
                     {"usage", {{"cpu_util", n.cpu_util}, {"memory_used_bytes", n.memory_used_bytes}}},
                     {"agent_version", n.agent_version},
                     {"address", n.address},
                     {"labels", json::parse(n.labels_json, nullptr, false)},
                     {"ports", n.port_hi >= n.port_lo ? fmt::format("{}-{}", n.port_lo, n.port_hi) : ""}});
    }
    return Reply{200, {{"nodes", out}}};
  });

  // ---- users and tokens
  route("POST", "/api/v1/users", Access::kAdmin, [this](const httplib::Request& req, const store::User&) -> StatusOr<Reply> {
    RM_ASSIGN_OR_RETURN(json body, ParseBody(req));
    if (!body.is_object() || !body.contains("name") || !body["name"].is_string()) {
      return InvalidArgument("name: required, a string");
    }
    store::User u;
    u.name = body["name"];
    static const std::regex kName(R"(^[a-z_][a-z0-9_.-]{0,31}$)");
    if (!std::regex_match(u.name, kName)) {
      return InvalidArgument("name: \"" + u.name + "\" is not a valid user name (lowercase letters, digits, _ . -)");
    }
    std::string role = body.value("role", "user");
    auto r = store::ParseRole(role);
    if (!r) return InvalidArgument("role: \"" + role + "\" is not a role (expected admin or user)");
    u.role = *r;
    if (body.contains("password")) {
      if (!body["password"].is_string() || body["password"].get<std::string>().size() < 8) {
        return InvalidArgument("password: must be a string of at least 8 characters");
      }
      RM_ASSIGN_OR_RETURN(u.password_hash, HashPassword(body["password"]));
    }
    u.created_ms = RealClock::Get()->NowMs();
    RM_ASSIGN_OR_RETURN(u.id, store_->CreateUser(u));
    return Reply{201, UserJson(u)};
  });

  route("GET", "/api/v1/users", Access::kAdmin, [this](const httplib::Request&, const store::User&) -> StatusOr<Reply> {
    RM_ASSIGN_OR_RETURN(auto users, store_->ListUsers());
    json out = json::array();
    for (const auto& u : users) out.push_back(UserJson(u));
    return Reply{200, {{"users", out}}};
  });

  auto create_token = [this](const store::User& owner, const std::string& name) -> StatusOr<Reply> {
    std::string token = NewApiToken();
    RM_ASSIGN_OR_RETURN(int64_t id, store_->CreateToken({0, owner.id, name, Sha256Hex(token), RealClock::Get()->NowMs()}));
    return Reply{201, {{"id", id}, {"user", owner.name}, {"name", name}, {"token", token}}};
  };

  // With a bearer token: a new token for yourself (admins: for any user).
  // With HTTP Basic (user:password): log in, i.e. a new token for that user.
  http_->Post("/api/v1/tokens", [this, authenticate, create_token](const httplib::Request& req, httplib::Response& res) {
    StatusOr<Reply> reply = [&]() -> StatusOr<Reply> {
      RM_ASSIGN_OR_RETURN(json body, ParseBody(req));
      std::string name = body.is_object() ? body.value("name", "cli") : "cli";
      std::string auth = req.get_header_value("Authorization");
      if (auth.rfind("Basic ", 0) == 0) {
        std::string decoded = Base64Decode(auth.substr(6));
        auto colon = decoded.find(':');
        auto user = store_->GetUserByName(decoded.substr(0, colon));
        if (colon == std::string::npos || !user.ok() || user->password_hash.empty() ||
            !VerifyPassword(user->password_hash, decoded.substr(colon + 1))) {
          return Unauthenticated("wrong user name or password");
        }
        return create_token(*user, name);
      }
      RM_ASSIGN_OR_RETURN(store::User caller, authenticate(req));
      store::User owner = caller;
      if (body.is_object() && body.contains("user")) {
        if (!body["user"].is_string()) return InvalidArgument("user: must be a user name");
        if (caller.role != Role::kAdmin && body["user"] != caller.name) {
          return PermissionDenied("user: only admins may create tokens for other users");
        }
        auto target = store_->GetUserByName(body["user"]);
        if (!target.ok()) return NotFound("user: \"" + body["user"].get<std::string>() + "\" does not exist");
        owner = *target;
      }
      return create_token(owner, name);
    }();
    if (!reply.ok()) return WriteError(res, reply.status());
    res.status = reply->status;
    res.set_content(Dump(reply->body), "application/json");
  });

  route("GET", "/api/v1/tokens", Access::kUser, [this](const httplib::Request&, const store::User& u) -> StatusOr<Reply> {
    RM_ASSIGN_OR_RETURN(auto tokens, store_->ListTokens(u.id));
    json out = json::array();
    for (const auto& t : tokens) out.push_back({{"id", t.id}, {"name", t.name}, {"created_at", FormatTimeUtc(t.created_ms)}});
    return Reply{200, {{"tokens", out}}};
  });

  route("DELETE", R"(/api/v1/tokens/(\d+))", Access::kUser,
        [this](const httplib::Request& req, const store::User& u) -> StatusOr<Reply> {
          auto id = ParseId(req.matches[1]);
          if (!id) return NotFound("token not found");
          RM_RETURN_IF_ERROR(store_->DeleteToken(u.id, *id));
          return Reply{200, {{"id", *id}, {"deleted", true}}};
        });

  // ---- agent protocol (admin tokens only)
  route("POST", "/api/v1/agent/register", Access::kAdmin, [this](const httplib::Request& req, const store::User&) -> StatusOr<Reply> {
    RM_ASSIGN_OR_RETURN(json b, ParseBody(req));
    store::Node n;
    try {
      n.name = b.at("name");
      n.cpu_milli = b.at("cpu_milli");
      n.memory_bytes = b.at("memory_bytes");
      json gpus = b.value("gpus", json::array());
      n.gpu_count = static_cast<int>(gpus.size());
      n.gpus_json = gpus.dump();
      if (!gpus.empty()) n.gpu_model = gpus[0].value("model", "");
      n.agent_version = b.value("agent_version", "");
      n.address = b.value("address", "");
      n.port_lo = b.value("port_lo", 0);
      n.port_hi = b.value("port_hi", -1);
      json labels = b.value("labels", json::object());
      if (!labels.is_object()) return InvalidArgument("labels: must be an object of strings");
      for (const auto& [k, v] : labels.items()) {
        if (k.empty() || !v.is_string()) return InvalidArgument(fmt::format("labels.{}: must be a non-empty name with a string value", k));
      }
      n.labels_json = labels.dump();
    } catch (const std::exception& e) {
      return InvalidArgument(std::string("register: ") + e.what());
    }
    if (n.name.empty()) return InvalidArgument("name: must not be empty");
    if (n.port_hi >= n.port_lo && (n.port_lo < 1 || n.port_hi > 65535)) {
      return InvalidArgument(fmt::format("port_lo, port_hi: [{}, {}] is not a range of TCP ports", n.port_lo, n.port_hi));
    }
    RM_ASSIGN_OR_RETURN(int64_t id, jobs_->RegisterNode(n));
    return Reply{200, {{"node_id", id}}};
  });

  route("POST", R"(/api/v1/agent/nodes/(\d+)/heartbeat)", Access::kAdmin,
        [this](const httplib::Request& req, const store::User&) -> StatusOr<Reply> {
          RM_ASSIGN_OR_RETURN(json b, ParseBody(req));
          RM_RETURN_IF_ERROR(jobs_->Heartbeat(ParseId(req.matches[1]).value_or(0), b.value("cpu_util", 0.0),
                                              b.value("memory_used_bytes", int64_t{0})));
          return Reply{200, json::object()};
        });

  route("GET", R"(/api/v1/agent/nodes/(\d+)/assignments)", Access::kAdmin,
        [this](const httplib::Request& req, const store::User&) -> StatusOr<Reply> {
          RM_ASSIGN_OR_RETURN(int64_t index, IntParam(req, "index", 0));
          RM_ASSIGN_OR_RETURN(int64_t wait, IntParam(req, "wait", 0));
          wait = std::clamp<int64_t>(wait, 0, 25);
          RM_ASSIGN_OR_RETURN(json out, jobs_->Assignments(ParseId(req.matches[1]).value_or(0), static_cast<uint64_t>(index),
                                                           std::chrono::seconds(wait)));
          return Reply{200, out};
        });

  route("POST", R"(/api/v1/agent/tasks/(\d+)/status)", Access::kAdmin,
        [this](const httplib::Request& req, const store::User&) -> StatusOr<Reply> {
          RM_ASSIGN_OR_RETURN(json b, ParseBody(req));
          TaskReport r;
          r.node_id = b.value("node_id", int64_t{0});
          r.attempt = b.value("attempt", 0);
          r.state = b.value("state", "");
          r.exit_code = b.value("exit_code", -1);
          r.signal = b.value("signal", 0);
          r.message = b.value("message", "");
          RM_RETURN_IF_ERROR(jobs_->ReportTask(ParseId(req.matches[1]).value_or(0), r));
          return Reply{200, json::object()};
        });

  // Logs and metrics arrive the same way: bytes appended at an offset, for the task's current attempt.
  auto append_for_task = [this](LogStore* to) {
    return [this, to](const httplib::Request& req, const store::User&) -> StatusOr<Reply> {
      RM_ASSIGN_OR_RETURN(int64_t attempt, IntParam(req, "attempt", 0));
      RM_ASSIGN_OR_RETURN(int64_t offset, IntParam(req, "offset", 0));
      RM_ASSIGN_OR_RETURN(store::Task task, store_->GetTask(ParseId(req.matches[1]).value_or(0)));
      if (task.attempt != attempt) {
        return FailedPrecondition(fmt::format("task {} is on attempt {}, not {}", task.id, task.attempt, attempt));
      }
      RM_ASSIGN_OR_RETURN(int64_t size, to->Append(task.job_id, task.rank, static_cast<int>(attempt), offset, req.body));
      return Reply{200, {{"size", size}}};
    };
  };
  route("POST", R"(/api/v1/agent/tasks/(\d+)/logs)", Access::kAdmin, append_for_task(logs_.get()));
  route("POST", R"(/api/v1/agent/tasks/(\d+)/metrics)", Access::kAdmin, append_for_task(metrics_.get()));
}

}  // namespace ringmaster::server
