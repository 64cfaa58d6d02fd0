// Logs and metrics of a job's tasks. Logs are served as streams, never as one
// buffer: plain text (`[rank] line`), or with follow=1 NDJSON records until
// the job ends. A follower holds no thread while it waits for output: it
// checks the files on a timer. Followers per user are capped.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <deque>
#include <tuple>

#include <fmt/format.h>

#include "server/api.h"
#include "protocol/job_spec.h"
#include "protocol/metrics_line.h"

namespace ringmaster::server {
namespace {

using nlohmann::json;

constexpr size_t kReadChunk = 256 << 10;       // bytes read per pull
constexpr size_t kMaxRecordLine = 64 << 10;    // longer lines go out in pieces ("partial": true)
constexpr auto kFollowPoll = std::chrono::milliseconds(200);
constexpr int64_t kKeepaliveMs = 5000;
constexpr int kMetricsReaders = 4;                     // metrics reads at once, all users
constexpr int kMetricsReadersPerUser = 2;              // ... of which one user's
constexpr int64_t kMetricsReadBytes = 64 << 20;        // of a rank's files, newest attempts first
constexpr size_t kMetricsSeriesBytes = 4 << 20;        // source text of the records in `series`
constexpr size_t kMetricsLatestKeys = 1024;            // names in `latest`

// Reads up to `n` bytes of `path` at `offset` ("" at the end or when missing),
// allocating only for what is there.
std::string ReadAt(const std::string& path, int64_t offset, size_t n) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  struct stat st {};
  if (fstat(fd, &st) != 0 || st.st_size <= offset) {
    close(fd);
    return "";
  }
  n = std::min<size_t>(n, static_cast<size_t>(st.st_size - offset));
  std::string buf(n, '\0');
  ssize_t got = pread(fd, buf.data(), n, offset);
  close(fd);
  buf.resize(got > 0 ? static_cast<size_t>(got) : 0);
  return buf;
}

// A log file's bytes: from the server's disk, or from its archived copy;
// also when the archiver moved it between the listing and this read (it
// deletes the server's copy once archived), so a reader right after a job's
// end never finds nothing.
std::string ReadLog(Api& api, const LogFile& f, int64_t offset, size_t n) {
  if (!f.path.empty()) {
    std::string got = ReadAt(f.path, offset, n);
    if (!got.empty() || f.key.empty() || ::access(f.path.c_str(), F_OK) == 0) return got;
  }
  auto reader = api.files->Open(f.key, {static_cast<uint64_t>(offset), n});
  if (!reader.ok()) return "";  // gone, or nothing past `offset`
  std::string buf(n, '\0');
  size_t got = 0;
  while (got < n) {
    auto r = (*reader)->Read(buf.data() + got, n - got);
    if (!r.ok() || *r == 0) break;
    got += *r;
  }
  buf.resize(got);
  return buf;
}

// An archived job's logs (LogArchiver): the one copy once the server's is gone.
std::vector<LogFile> ArchivedLogs(Api& api, int64_t job_id) {
  std::vector<LogFile> out;
  const std::string prefix = fmt::format("jobs/{}/logs/rank-", job_id);
  std::string after;
  while (true) {
    auto page = api.files->List(prefix, after, 1000);
    if (!page.ok()) return out;
    for (const auto& o : page->objects) {
      LogFile f;
      int used = 0;
      const std::string name = o.key.substr(prefix.size() - 5);
      if (sscanf(name.c_str(), "rank-%d.attempt-%d.log%n", &f.rank, &f.attempt, &used) == 2 &&
          used == static_cast<int>(name.size())) {
        f.key = o.key;
        out.push_back(std::move(f));
      }
    }
    if (!page->next_after) break;
    after = *page->next_after;
  }
  std::sort(out.begin(), out.end(),
            [](const LogFile& a, const LogFile& b) { return std::tie(a.rank, a.attempt) < std::tie(b.rank, b.attempt); });
  return out;
}

std::vector<LogFile> RankFiles(Api& api, LogStore* store, int64_t job_id, int rank) {
  std::vector<LogFile> out;
  std::vector<LogFile> all = store->List(job_id);
  if (store == api.logs) {
    for (LogFile& f : all) f.key = fmt::format("jobs/{}/logs/rank-{}.attempt-{}.log", job_id, f.rank, f.attempt);
    if (all.empty()) all = ArchivedLogs(api, job_id);
  }
  for (LogFile& f : all) {
    if (rank < 0 || f.rank == rank) out.push_back(std::move(f));
  }
  return out;
}

// Whether the token a stream was opened with still works: a stream outlives
// no revocation and no disabled user (checked every few seconds).
bool StillAllowed(Api& api, int64_t user_id, int64_t token_id) {
  auto user = api.store->GetUser(user_id);
  if (!user.ok() || user->disabled) return false;
  return token_id == 0 || api.store->GetToken(token_id).ok();
}

// GET logs: every file's lines prefixed by their rank, read a piece at a time.
class TextSource final : public http::BodySource, public std::enable_shared_from_this<TextSource> {
 public:
  TextSource(Api& api, std::vector<LogFile> files, int64_t user_id, int64_t token_id)
      : api_(api), files_(std::move(files)), user_id_(user_id), token_id_(token_id), last_check_ms_(api.clock->NowMs()) {}

  void Pull(std::function<void(std::string, bool)> next) override {
    api_.http->Post(http::Pool::kApi, [self = shared_from_this(), next = std::move(next)] { self->Step(next); });
  }

 private:
  void Step(const std::function<void(std::string, bool)>& next) {
    std::string out;
    if (const int64_t t = api_.clock->NowMs(); t - last_check_ms_ >= kKeepaliveMs) {
      last_check_ms_ = t;
      if (!StillAllowed(api_, user_id_, token_id_)) {
        return next("\n[ringmaster: stopped: the token was revoked or its user disabled]\n", true);
      }
    }
    while (file_ < files_.size() && out.size() < kReadChunk) {
      const LogFile& f = files_[file_];
      if (offset_ == 0 && f.attempt > 1) out += fmt::format("[{}] --- attempt {} ---\n", f.rank, f.attempt);
      std::string chunk = ReadLog(api_, f, offset_, kReadChunk);
      if (chunk.empty()) {
        if (!line_start_) out += "\n";
        line_start_ = true;
        ++file_;
        offset_ = 0;
        continue;
      }
      offset_ += static_cast<int64_t>(chunk.size());
      for (char c : chunk) {
        if (line_start_) out += fmt::format("[{}] ", f.rank);
        out.push_back(c);
        line_start_ = c == '\n';
      }
    }
    const bool last = file_ >= files_.size();
    next(std::move(out), last);
  }

  Api& api_;
  const std::vector<LogFile> files_;
  const int64_t user_id_, token_id_;
  int64_t last_check_ms_;
  size_t file_ = 0;
  int64_t offset_ = 0;
  bool line_start_ = true;
};

// GET logs?follow=1: NDJSON records as lines appear, a keepalive after 5 s of
// silence, an end record when the job has ended and every byte is out.
class FollowSource final : public http::BodySource, public std::enable_shared_from_this<FollowSource> {
 public:
  FollowSource(Api& api, int64_t job_id, int rank, int64_t user_id, int64_t token_id)
      : api_(api),
        job_id_(job_id),
        rank_(rank),
        user_id_(user_id),
        token_id_(token_id),
        last_write_ms_(api.clock->NowMs()) {}
  ~FollowSource() override { api_.followers.Remove(user_id_); }

  void Pull(std::function<void(std::string, bool)> next) override {
    if (cancelled_) return;
    api_.http->Post(http::Pool::kApi,
                    [self = shared_from_this(), next = std::move(next)]() mutable { self->Step(std::move(next)); });
  }

  void Cancel() override { cancelled_ = true; }

 private:
  struct Cursor {
    int64_t offset = 0;
    std::string partial;
  };

  void Emit(std::string* out, const json& rec) { *out += Dump(rec) + "\n"; }

  void Step(std::function<void(std::string, bool)> next) {
    if (cancelled_) return;
    // A stream outlives no revocation: its token and user are checked again every few seconds.
    if (const int64_t t = api_.clock->NowMs(); t - last_check_ms_ >= kKeepaliveMs) {
      last_check_ms_ = t;
      if (!StillAllowed(api_, user_id_, token_id_)) {
        std::string out;
        Emit(&out, {{"end", true}, {"error", "the token was revoked or its user disabled"}});
        return next(std::move(out), true);
      }
    }
    auto job = api_.store->GetJob(job_id_);
    const bool ended = !job.ok() || store::IsTerminal(job->state);
    std::string out;
    size_t budget = kReadChunk;
    bool drained = true;
    for (const LogFile& f : RankFiles(api_, api_.logs, job_id_, rank_)) {
      // By rank and attempt, not path: the server's copy and the archive hold the same bytes.
      Cursor& c = cursors_[fmt::format("{}.{}", f.rank, f.attempt)];
      std::string chunk = ReadLog(api_, f, c.offset, budget);
      c.offset += static_cast<int64_t>(chunk.size());
      budget -= std::min(budget, chunk.size());
      if (budget == 0) drained = false;
      c.partial += chunk;
      size_t start = 0, nl;
      while ((nl = c.partial.find('\n', start)) != std::string::npos) {
        Emit(&out, {{"rank", f.rank}, {"attempt", f.attempt}, {"line", c.partial.substr(start, nl - start)}});
        start = nl + 1;
      }
      c.partial.erase(0, start);
      // A line without its end yet never grows without bound: long ones go out in pieces.
      while (c.partial.size() >= kMaxRecordLine) {
        Emit(&out, {{"rank", f.rank}, {"attempt", f.attempt}, {"line", c.partial.substr(0, kMaxRecordLine)},
                    {"partial", true}});
        c.partial.erase(0, kMaxRecordLine);
      }
      if (ended && drained && !c.partial.empty()) {
        Emit(&out, {{"rank", f.rank}, {"attempt", f.attempt}, {"line", c.partial}});
        c.partial.clear();
      }
      if (budget == 0) break;
    }
    const int64_t now = api_.clock->NowMs();
    if (!out.empty()) {
      last_write_ms_ = now;
      return next(std::move(out), false);
    }
    if (ended && drained) {
      json end = {{"end", true}};
      if (job.ok()) {
        end["state"] = store::StateName(job->state);
        end["reason"] = job->reason;
      }
      Emit(&out, end);
      return next(std::move(out), true);
    }
    if (now - last_write_ms_ >= kKeepaliveMs) {
      last_write_ms_ = now;
      Emit(&out, {{"keepalive", true}});
      return next(std::move(out), false);
    }
    // Nothing yet: look again later. No thread waits meanwhile.
    api_.http->After(kFollowPoll,
                     [self = shared_from_this(), next = std::move(next)]() mutable { self->Pull(std::move(next)); });
  }

  Api& api_;
  const int64_t job_id_;
  const int rank_;
  const int64_t user_id_;
  const int64_t token_id_;
  std::atomic<bool> cancelled_{false};
  // Touched by one Step at a time: the server pulls again only after a piece is written.
  std::map<std::string, Cursor> cursors_;
  int64_t last_write_ms_;
  int64_t last_check_ms_ = 0;
};

// Reads `path` line by line, a chunk at a time; lines longer than the metrics
// limit are skipped without ever being held whole.
template <typename F>
void ForEachLine(const std::string& path, F on_line) {
  int64_t offset = 0;
  std::string line;
  bool skipping = false;
  while (true) {
    std::string chunk = ReadAt(path, offset, kReadChunk);
    if (chunk.empty()) break;
    offset += static_cast<int64_t>(chunk.size());
    for (char c : chunk) {
      if (c == '\n') {
        if (!skipping) on_line(line);
        line.clear();
        skipping = false;
      } else if (!skipping) {
        line.push_back(c);
        if (line.size() > protocol::kMaxMetricsLineBytes) {
          skipping = true;
          line.clear();
        }
      }
    }
  }
  // A last line without its newline may still be being written: left for later.
}

}  // namespace

void AddLogRoutes(Api& api) {
  http::RouteOptions read{api.limits.max_body_bytes, http::Pool::kApi, true, access::kRead};

  api.http->Route("GET", "/api/v1/jobs/{id}/logs", read, [&api](http::Request& req, http::Responder respond) {
    const Caller& c = CallerOf(req);
    auto job = VisibleJob(api, PathId(req), c);
    if (!job.ok()) return respond(ErrorFor(req, job.status()));
    auto rank = IntParam(req, "rank", -1, 0, protocol::kMaxReplicas - 1);
    if (!rank.ok()) return respond(ErrorFor(req, rank.status()));
    auto follow = BoolParam(req, "follow");
    if (!follow.ok()) return respond(ErrorFor(req, follow.status()));
    http::Response r;
    if (!*follow) {
      auto src = std::make_shared<TextSource>(api, RankFiles(api, api.logs, job->id, static_cast<int>(*rank)), c.user.id,
                                              c.token.id);
      r.content_type = "text/plain; charset=utf-8";
      r.stream = src;
      return respond(std::move(r));
    }
    if (!api.followers.TryAdd(c.user.id, api.limits.max_followers_per_user)) {
      return respond(ErrorFor(req, ResourceExhausted(fmt::format(
                                       "user {} already follows {} log streams, the limit: close some first",
                                       c.user.name, api.limits.max_followers_per_user))));
    }
    auto src = std::make_shared<FollowSource>(api, job->id, static_cast<int>(*rank), c.user.id, c.token.id);
    r.content_type = "application/x-ndjson";
    r.stream = src;
    respond(std::move(r));
  });

  // What a task appended to $RINGMASTER_METRICS_FILE: JSON objects, one per
  // line, for one rank (default 0) across its attempts.
  api.http->Route("GET", "/api/v1/jobs/{id}/metrics", read, Json([&api](const http::Request& req, const Caller& c) -> StatusOr<Reply> {
    RM_ASSIGN_OR_RETURN(store::Job job, VisibleJob(api, PathId(req), c));
    RM_ASSIGN_OR_RETURN(int64_t rank, IntParam(req, "rank", 0, 0, protocol::kMaxReplicas - 1));
    RM_ASSIGN_OR_RETURN(int64_t limit, IntParam(req, "limit", 1000, 0, 100000));  // 0 = only `latest`
    // A bounded amount of work and memory whatever the files hold: a few
    // reads at once, the newest attempts' files up to kMetricsReadBytes, a
    // series of at most kMetricsSeriesBytes of source text, and a `latest` of
    // at most kMetricsLatestKeys names.
    struct Slot {
      std::atomic<int>& n;
      explicit Slot(std::atomic<int>& c) : n(c) { ++n; }
      ~Slot() { --n; }
    };
    static std::atomic<int> reading{0};
    Slot slot(reading);
    if (reading > kMetricsReaders) return Unavailable("too many metrics reads in progress: try again shortly");
    // ... and no user takes them all.
    if (!api.metrics_readers.TryAdd(c.user.id, kMetricsReadersPerUser)) {
      return ResourceExhausted(
          fmt::format("{} metrics reads of yours are in progress already: let them finish first", kMetricsReadersPerUser));
    }
    struct Release {
      Api& api;
      int64_t user;
      ~Release() { api.metrics_readers.Remove(user); }
    } release{api, c.user.id};
    std::vector<LogFile> files = RankFiles(api, api.metrics, job.id, static_cast<int>(rank));
    int64_t total = 0;
    size_t first = files.size();
    while (first > 0) {
      struct stat st {};
      const int64_t size = stat(files[first - 1].path.c_str(), &st) == 0 ? st.st_size : 0;
      if (total + size > kMetricsReadBytes && first < files.size()) break;
      total += size;
      --first;
    }
    std::deque<std::pair<json, size_t>> series;  // record, its line's bytes
    size_t series_bytes = 0;
    json latest = json::object();
    for (size_t i = first; i < files.size(); ++i) {
      const LogFile& f = files[i];
      ForEachLine(f.path, [&](const std::string& line) {
        auto rec = protocol::ParseMetricsLine(line);
        if (!rec) return;  // not a metrics record: skipped, never an error
        for (auto& [k, v] : rec->items()) {
          if (latest.contains(k) || latest.size() < kMetricsLatestKeys) latest[k] = v;
        }
        if (limit == 0) return;
        (*rec)["attempt"] = f.attempt;
        series.emplace_back(std::move(*rec), line.size());
        series_bytes += line.size();
        while (series.size() > static_cast<size_t>(limit) || series_bytes > kMetricsSeriesBytes) {
          series_bytes -= series.front().second;
          series.pop_front();
        }
      });
    }
    json out = json::array();
    for (auto& r : series) out.push_back(std::move(r.first));
    return Reply{200, {{"job_id", job.id}, {"rank", rank}, {"latest", latest}, {"series", out}}};
  }));
}

}  // namespace ringmaster::server
