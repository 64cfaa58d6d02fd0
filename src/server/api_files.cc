// Users' files over the BlobStore (docs/api.md, "Files"): streamed uploads
// with an optional SHA-256 the bytes must match, streamed downloads with byte
// ranges, HEAD, DELETE and paginated listing, in three namespaces:
//   users/<name>/...   that user's (admins may read);
//   datasets/...       everyone reads, admins write;
//   images/<name>/...  tasks' images (`ringmaster images push`): the same;
//   jobs/<id>/{inputs,outputs,checkpoints,logs}/...   the job owner's (admins may read).
// Reads of what a caller may not see answer 404 (others' files are not even
// confirmed to exist); writes there answer 403. Files under users/<name>/ and
// jobs/<id>/ count against their owner's byte quota (datasets/ count against
// nobody's; server/file_quota.h says what a file costs and which quota
// applies); an upload that would exceed it answers 413 and stores nothing.
// An upload whose token is revoked (or user disabled) while it streams is
// not stored: the caller is checked again before the commit.
// The agents' side of jobs' files is api_agent_files.cc, on what
// files_access.h exports from here.
#include <algorithm>
#include <set>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "common/files_key.h"
#include "common/json_limits.h"
#include "common/crypto.h"
#include "server/api.h"
#include "server/file_quota.h"
#include "server/files_access.h"

namespace ringmaster::server {
namespace files_api {

using nlohmann::json;

constexpr size_t kPiece = 256 << 10;           // bytes read from the store per pull
// Smaller files go out in one keep-alive answer; a client that never reads it
// pins this much per connection, so it stays small.
constexpr uint64_t kWholeBelow = 64 << 10;
constexpr const char* kShaHeader = "x-ringmaster-sha256";

bool AllDigits(std::string_view s) {
  return !s.empty() && s.size() <= 18 && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// A job id as the API writes it: digits, no leading zero (jobs/01/ is not jobs/1/).
bool JobId(std::string_view s) { return AllDigits(s) && (s.size() == 1 || s[0] != '0'); }

std::vector<std::string_view> Segments(std::string_view key) {
  std::vector<std::string_view> out;
  size_t start = 0;
  while (true) {
    size_t slash = key.find('/', start);
    out.push_back(key.substr(start, slash == std::string_view::npos ? std::string_view::npos : slash - start));
    if (slash == std::string_view::npos) return out;
    start = slash + 1;
  }
}

// Whether the caller may do `op` on `key` (already a valid key).
Status CheckAccess(Api& api, const Caller& c, const std::string& key, Op op) {
  const auto seg = Segments(key);
  const std::string missing = key + ": no such file";
  if (seg[0] == "users" && seg.size() >= 3) {
    if (seg[1] == c.user.name) return Status::Ok();
    if (op == Op::kRead) return c.admin() ? Status::Ok() : NotFound(missing);
    return PermissionDenied(fmt::format("path: users/{}/ is not yours; write under users/{}/",
                                        Printable(seg[1]), c.user.name));
  }
  if ((seg[0] == "datasets" || seg[0] == "images") && seg.size() >= 2) {
    if (op == Op::kRead || c.admin()) return Status::Ok();
    return PermissionDenied(fmt::format("path: {}/ is writable by admins only", seg[0]));
  }
  static const std::set<std::string_view> kJobDirs = {"inputs", "outputs", "checkpoints", "logs"};
  if (seg[0] == "jobs" && seg.size() >= 4 && JobId(seg[1]) && kJobDirs.count(seg[2])) {
    const int64_t id = std::stoll(std::string(seg[1]));
    auto job = api.store->GetJob(id);
    if (!job.ok() && job.status().code() != StatusCode::kNotFound) return job.status();
    const bool mine = job.ok() && job->user_id == c.user.id;
    if (op == Op::kRead) return mine || (job.ok() && c.admin()) ? Status::Ok() : NotFound(missing);
    // The archived logs are the server's record of what tasks printed.
    if (mine && seg[2] == "logs") return PermissionDenied(fmt::format("path: jobs/{}/logs/ is written by the server only", id));
    if (mine) return Status::Ok();
    return PermissionDenied(fmt::format("path: jobs/{}/ is not one of your jobs", id));
  }
  return InvalidArgument(fmt::format(
      "path: must start with users/{}/, datasets/, images/ or jobs/<job id>/{{inputs,outputs,checkpoints,logs}}/", c.user.name));
}

// Whether a non-admin may list `prefix`: only inside what they may read.
Status CheckListAccess(Api& api, const Caller& c, const std::string& prefix) {
  if (c.admin()) return Status::Ok();
  const std::string mine = "users/" + c.user.name + "/";
  if (prefix.rfind(mine, 0) == 0 || prefix.rfind("datasets/", 0) == 0 || prefix.rfind("images/", 0) == 0) {
    return Status::Ok();
  }
  const auto seg = Segments(prefix);
  if (seg.size() >= 3 && seg[0] == "jobs" && JobId(seg[1])) {
    auto job = VisibleJob(api, std::stoll(std::string(seg[1])), c);
    if (!job.ok()) return job.status();
    return Status::Ok();
  }
  return InvalidArgument(
      fmt::format("prefix: list under users/{}/, datasets/, images/ or jobs/<job id>/ (got \"{}\")", c.user.name, Printable(prefix)));
}

StatusOr<std::string> KeyOf(const http::Request& req, size_t match) {
  const std::string& key = req.matches.at(match);
  RM_RETURN_IF_ERROR(ValidateFilesKey(key));
  return key;
}

json InfoJson(const files::ObjectInfo& o) {
  json j = {{"path", o.key}, {"size", o.size}, {"mtime", FormatTimeUtc(o.mtime_ms)}};
  if (!o.sha256.empty()) j["sha256"] = o.sha256;
  return j;
}

// "bytes=A-B", "bytes=A-" or "bytes=-N" against a file of `size` bytes.
StatusOr<files::ByteRange> ParseRange(const std::string& header, uint64_t size) {
  files::ByteRange r;
  if (header.rfind("bytes=", 0) != 0 || header.find(',') != std::string::npos) {
    return InvalidArgument("Range: expected bytes=FIRST-LAST, bytes=FIRST- or bytes=-SUFFIX (one range)");
  }
  std::string spec = header.substr(6);
  size_t dash = spec.find('-');
  if (dash == std::string::npos) return InvalidArgument("Range: no '-'");
  std::string a = spec.substr(0, dash), b = spec.substr(dash + 1);
  auto num = [](const std::string& s) -> std::optional<uint64_t> {
    if (!AllDigits(s)) return std::nullopt;
    return std::stoull(s);
  };
  if (a.empty()) {
    auto n = num(b);
    if (!n || *n == 0) return InvalidArgument("Range: a suffix range needs a length above 0");
    r.offset = size > *n ? size - *n : 0;
    return r;
  }
  auto first = num(a);
  if (!first) return InvalidArgument("Range: the first byte is not a number");
  r.offset = *first;
  if (!b.empty()) {
    auto last = num(b);
    if (!last || *last < *first) return InvalidArgument("Range: the last byte is before the first");
    r.length = *last - *first + 1;
  }
  return r;
}

// A download, read a piece at a time on the API pool as the client drains it.
class BlobSource final : public http::BodySource, public std::enable_shared_from_this<BlobSource> {
 public:
  BlobSource(Api& api, std::unique_ptr<files::BlobReader> reader) : api_(api), reader_(std::move(reader)) {}
  void Pull(std::function<void(std::string, bool)> next) override {
    api_.http->Post(http::Pool::kApi, [self = shared_from_this(), next = std::move(next)] {
      std::string buf(kPiece, '\0');
      auto n = self->reader_->Read(buf.data(), buf.size());
      if (!n.ok()) {
        // The status line is gone: end the body short. The client sees fewer
        // bytes than X-Ringmaster-Size (and a SHA-256 that does not match).
        spdlog::warn("download of {} ended early: {}", self->reader_->info().key, n.status().ToString());
        return next("", true);
      }
      buf.resize(*n);
      next(std::move(buf), *n == 0);
    });
  }

 private:
  Api& api_;
  std::unique_ptr<files::BlobReader> reader_;
};

// PUT: the body goes into a BlobWriter piece by piece as it arrives.
// The quota's 413, naming what it would take.
http::Response OverQuota(Api& api, const store::User& u, int64_t would_use) {
  return http::ErrorResponse(413, "ResourceExhausted",
                             fmt::format("quota: {}'s files would use {} bytes of a {}-byte quota; delete some "
                                         "(ringmaster files du, files rm) or ask an admin for more",
                                         u.name, would_use, Quota(api, u)));
}

}  // namespace files_api

int64_t Quota(Api& api, const store::User& u) { return EffectiveFileQuota(u, api.limits.default_file_quota); }

int64_t Charge(Api& api, const std::string& key, uint64_t size) {
  return FileCharge(key, size, api.limits.file_object_cost);
}

namespace files_api {

// What `key` is charged now (0 when there is none).
StatusOr<int64_t> ChargeNow(Api& api, const std::string& key) {
  auto info = api.files->Head(key);
  if (info.ok()) return Charge(api, key, info->size);
  if (info.status().code() == StatusCode::kNotFound) return int64_t{0};
  return info.status();
}

class Upload : public std::enable_shared_from_this<Upload> {
 public:
  // `owner`: whose quota the file counts against (0: nobody's); `quota_bound`:
  // the writer's limit is the room left in it.
  Upload(Api& api, const http::Request& req, std::string key, std::unique_ptr<files::BlobWriter> writer,
         http::Responder respond, int64_t owner, bool quota_bound)
      : api_(api), req_(req), key_(std::move(key)), writer_(std::move(writer)), respond_(std::move(respond)),
        owner_(owner), quota_bound_(quota_bound) {}

  void Start() { Next(); }

 private:
  void Next() {
    auto self = shared_from_this();
    req_.body_reader->Read([self](Status st, std::string_view data, bool last) { self->OnPiece(st, data, last); });
  }

  void OnPiece(const Status& st, std::string_view data, bool last) {
    if (!st.ok()) {
      writer_->Abort();
      if (st.code() == StatusCode::kResourceExhausted) {
        return respond_(http::ErrorResponse(413, "InvalidArgument", st.message()));
      }
      return respond_(ErrorFor(req_, st));
    }
    if (!data.empty()) {
      if (Status w = writer_->Write(data); !w.ok()) {
        writer_->Abort();
        if (w.code() == StatusCode::kResourceExhausted && quota_bound_) {
          auto u = api_.store->GetUser(owner_);
          if (u.ok()) return respond_(OverQuota(api_, *u, u->file_bytes + Charge(api_, key_, writer_->bytes_written() + data.size())));
        }
        if (w.code() == StatusCode::kResourceExhausted) {
          return respond_(http::ErrorResponse(413, "InvalidArgument", w.message()));
        }
        return respond_(ErrorFor(req_, w));
      }
    }
    if (!last) return Next();
    // The quota is checked again and the usage updated with the commit, one
    // upload of this user at a time: concurrent uploads cannot both slip in.
    // The token may have been revoked, or its user disabled, while the body
    // streamed: such an upload is not stored.
    if (Status still = api_.auth->Recheck(CallerOf(req_)); !still.ok()) {
      writer_->Abort();
      return respond_(ErrorFor(req_, still));
    }
    std::unique_lock<std::mutex> lock;
    int64_t old_charge = 0;
    if (owner_ != 0) {
      lock = std::unique_lock<std::mutex>(api_.FileUsageLock(owner_));
      auto charge_now = ChargeNow(api_, key_);
      auto user = api_.store->GetUser(owner_);
      if (!charge_now.ok() || !user.ok()) {
        writer_->Abort();
        return respond_(ErrorFor(req_, !charge_now.ok() ? charge_now.status() : user.status()));
      }
      old_charge = *charge_now;
      const int64_t charge = Charge(api_, key_, writer_->bytes_written());
      const int64_t would_use = user->file_bytes - old_charge + charge;
      if (Quota(api_, *user) > 0 && would_use > Quota(api_, *user) && charge > old_charge) {
        writer_->Abort();
        return respond_(OverQuota(api_, *user, would_use));
      }
    }
    auto info = writer_->Commit();
    if (info.ok()) NoteCheckpoint(info->key, info->mtime_ms);
    if (info.ok() && owner_ != 0) {
      Status st = api_.store->AddUserFileBytes(owner_, Charge(api_, info->key, info->size) - old_charge);
      if (!st.ok()) spdlog::error("files: usage of user {} not updated for {}: {}", owner_, info->key, st.ToString());
    }
    if (!info.ok()) {
      if (info.status().code() == StatusCode::kInvalidArgument) {  // the checksum did not match
        return respond_(http::ErrorResponse(400, "InvalidArgument", "X-Ringmaster-SHA256: " + info.status().message()));
      }
      return respond_(ErrorFor(req_, info.status()));
    }
    respond_(JsonResponse(201, InfoJson(*info)));
  }

  // A new jobs/<id>/checkpoints/latest: when the job last checkpointed, for preemption.
  void NoteCheckpoint(const std::string& key, int64_t mtime_ms) {
    const auto seg = Segments(key);
    if (seg.size() == 4 && seg[0] == "jobs" && JobId(seg[1]) && seg[2] == "checkpoints" && seg[3] == "latest") {
      const int64_t job = std::stoll(std::string(seg[1]));
      api_.jobs->NoteCheckpoint(job, mtime_ms);
      if (api_.on_checkpoint) api_.on_checkpoint(job);
    }
  }

  Api& api_;
  http::Request req_;  // the handler's request dies when it returns; this copy keeps the body reader
  const std::string key_;
  std::unique_ptr<files::BlobWriter> writer_;
  http::Responder respond_;
  int64_t owner_;
  bool quota_bound_;
};

// Whose quota a file counts against: the user for users/<name>/, the job's
// owner for jobs/<id>/ (both are the writer: nobody else may write there),
// nobody for datasets/ and images/.
int64_t Owner(const Caller& c, const std::string& key) {
  return key.rfind("datasets/", 0) == 0 || key.rfind("images/", 0) == 0 ? 0 : c.user.id;
}

// An upload of `key` by `c` (a user, or the job owner an agent writes for).
void Put(Api& api, http::Request& req, http::Responder respond, const Caller& c, const StatusOr<std::string>& key) {
  if (!key.ok()) return respond(ErrorFor(req, key.status()));
  if (Status st = CheckAccess(api, c, *key, Op::kWrite); !st.ok()) return respond(ErrorFor(req, st));
  files::PutOptions options;
  options.expected_sha256 = req.Header(kShaHeader);
  if (!options.expected_sha256.empty() && !IsSha256Hex(options.expected_sha256)) {
    return respond(ErrorFor(req, InvalidArgument("X-Ringmaster-SHA256: expected 64 lowercase hex digits")));
  }
  // An image blob is stored only under its own SHA-256 (server/user_images.h):
  // the name is then proof of holding the bytes.
  if (const size_t at = key->find("/images/blobs/sha256/"); key->rfind("users/", 0) == 0 && at != std::string::npos) {
    const std::string hex = key->substr(at + 21);
    if (options.expected_sha256 != hex) {
      return respond(ErrorFor(req, InvalidArgument("X-Ringmaster-SHA256: an image blob is stored under its own "
                                                   "SHA-256; send it (" + hex.substr(0, 16) + "...)")));
    }
  }
  options.max_bytes = api.limits.max_file_bytes;
  // ?dry_run=1 with X-Ringmaster-Size: N: would an upload of N bytes be taken?
  // (Clients ask first: an answer sent before a large body is read reaches
  // few clients, which are busy writing.)
  auto dry_run = BoolParam(req, "dry_run");
  if (!dry_run.ok()) return respond(ErrorFor(req, dry_run.status()));
  std::string length = req.Header("content-length");
  if (*dry_run) {
    length = req.Header("x-ringmaster-size");
    if (!AllDigits(length)) return respond(ErrorFor(req, InvalidArgument("X-Ringmaster-Size: the upload's size in bytes")));
    if (std::stoull(length) > *options.max_bytes) {
      return respond(http::ErrorResponse(413, "InvalidArgument",
                                         fmt::format("body: {} bytes, more than a file may have ({})", length, *options.max_bytes)));
    }
  }
  const int64_t owner = Owner(c, *key);
  bool quota_bound = false;
  if (owner != 0 && Quota(api, c.user) > 0) {
    // Refuse early what cannot fit: the room left for its bytes, counting
    // what this file replaces and what the object itself costs.
    auto old_charge = ChargeNow(api, *key);
    if (!old_charge.ok()) return respond(ErrorFor(req, old_charge.status()));
    const int64_t room = std::max<int64_t>(0, Quota(api, c.user) - c.user.file_bytes + *old_charge - Charge(api, *key, 0));
    if (static_cast<uint64_t>(room) < *options.max_bytes) {
      options.max_bytes = static_cast<uint64_t>(room);
      quota_bound = true;
    }
    if (!length.empty() && AllDigits(length) && std::stoull(length) > static_cast<uint64_t>(room)) {
      return respond(OverQuota(api, c.user, c.user.file_bytes - *old_charge + Charge(api, *key, std::stoull(length))));
    }
  }
  if (*dry_run) return respond(JsonResponse(200, {{"path", *key}, {"size", std::stoull(length)}, {"would_store", true}}));
  auto writer = api.files->Create(*key, options);
  if (!writer.ok()) return respond(ErrorFor(req, writer.status()));
  std::make_shared<Upload>(api, req, *key, std::move(*writer), std::move(respond), owner, quota_bound)->Start();
}

void Get(Api& api, http::Request& req, http::Responder respond, bool head_only, const Caller& c,
         const StatusOr<std::string>& key) {
  if (!key.ok()) return respond(ErrorFor(req, key.status()));
  if (Status st = CheckAccess(api, c, *key, Op::kRead); !st.ok()) return respond(ErrorFor(req, st));
  const std::string range_header = head_only ? "" : req.Header("range");
  // The headers describe the version the body comes from: the one the reader
  // opened, never a separate look that a concurrent replace could outdate.
  std::unique_ptr<files::BlobReader> reader;
  files::ByteRange range;
  for (int attempt = 0;; ++attempt) {
    uint64_t size_seen = 0;
    if (!range_header.empty()) {
      auto head = api.files->Head(*key);  // only a suffix range needs the size first
      if (!head.ok()) return respond(ErrorFor(req, head.status()));
      size_seen = head->size;
      auto r = ParseRange(range_header, size_seen);
      if (!r.ok()) return respond(ErrorFor(req, r.status()));
      range = *r;
    }
    auto opened = api.files->Open(*key, range);
    if (!opened.ok() && opened.status().code() == StatusCode::kInvalidArgument) {  // starts past the end
      http::Response e = http::ErrorResponse(416, "InvalidArgument",
                                             fmt::format("Range: starts at {}, past the end of the file", range.offset));
      auto head = api.files->Head(*key);
      if (head.ok()) e.headers.emplace_back("Content-Range", fmt::format("bytes */{}", head->size));
      return respond(std::move(e));
    }
    if (!opened.ok()) return respond(ErrorFor(req, opened.status()));
    reader = std::move(*opened);
    // A suffix range computed against a version replaced meanwhile: again.
    if (range_header.empty() || range_header.rfind("bytes=-", 0) != 0 || reader->info().size == size_seen || attempt == 2) break;
  }
  const files::ObjectInfo& info = reader->info();
  http::Response res;
  res.content_type = "application/octet-stream";
  res.headers = {{"X-Ringmaster-Size", std::to_string(info.size)},
                 {"X-Ringmaster-SHA256", info.sha256},
                 {"X-Ringmaster-Mtime", FormatTimeUtc(info.mtime_ms)},
                 {"Accept-Ranges", "bytes"}};
  if (head_only) return respond(std::move(res));
  if (!range_header.empty()) {
    if (info.size == 0 || range.offset >= info.size) {
      http::Response e = http::ErrorResponse(416, "InvalidArgument",
                                             fmt::format("Range: starts at {}, past the end of a {}-byte file",
                                                         range.offset, info.size));
      e.headers.emplace_back("Content-Range", fmt::format("bytes */{}", info.size));
      return respond(std::move(e));
    }
    const uint64_t last = range.length ? std::min(info.size, range.offset + *range.length) - 1 : info.size - 1;
    res.status = 206;
    res.headers.emplace_back("Content-Range", fmt::format("bytes {}-{}/{}", range.offset, last, info.size));
  }
  const uint64_t to_send = res.status == 206 ? (range.length ? std::min(*range.length, info.size - range.offset)
                                                             : info.size - range.offset)
                                             : info.size;
  if (to_send <= kWholeBelow) {
    std::string body;
    char buf[16 << 10];
    while (true) {
      auto n = reader->Read(buf, sizeof buf);
      if (!n.ok()) return respond(ErrorFor(req, n.status()));
      if (*n == 0) break;
      body.append(buf, *n);
    }
    res.body = std::move(body);
    return respond(std::move(res));
  }
  res.stream = std::make_shared<BlobSource>(api, std::move(reader));
  respond(std::move(res));
}

}  // namespace files_api

using namespace files_api;

namespace {

// Bytes under `prefix`, every page of it.
StatusOr<int64_t> BytesUnder(Api& api, const std::string& prefix) {
  int64_t bytes = 0;
  std::string after;
  while (true) {
    RM_ASSIGN_OR_RETURN(files::ListResult page, api.files->List(prefix, after, 1000));
    for (const auto& o : page.objects) bytes += Charge(api, o.key, o.size);
    if (!page.next_after) return bytes;
    after = *page.next_after;
  }
}

}  // namespace

StatusOr<nlohmann::json> ReconcileFileUsage(Api& api) {
  json out = json::array();
  RM_ASSIGN_OR_RETURN(auto users, api.store->ListUsers());
  for (const store::User& u : users) {
    // The user's uploads wait meanwhile: the count and the store agree when it is set.
    std::lock_guard<std::mutex> lock(api.FileUsageLock(u.id));
    RM_ASSIGN_OR_RETURN(store::User now, api.store->GetUser(u.id));
    RM_ASSIGN_OR_RETURN(int64_t bytes, BytesUnder(api, "users/" + u.name + "/"));
    store::JobFilter theirs;
    theirs.user_id = u.id;
    theirs.limit = -1;
    RM_ASSIGN_OR_RETURN(auto jobs, api.store->ListJobs(theirs));
    for (const store::Job& j : jobs.jobs) {
      RM_ASSIGN_OR_RETURN(int64_t in_job, BytesUnder(api, fmt::format("jobs/{}/", j.id)));
      bytes += in_job;
    }
    if (bytes != now.file_bytes) {
      RM_RETURN_IF_ERROR(api.store->SetUserFileBytes(u.id, bytes));
      spdlog::warn("files: usage of user {} was {} bytes, the store holds {}: corrected", u.name, now.file_bytes, bytes);
    }
    out.push_back({{"user", u.name}, {"before", now.file_bytes}, {"after", bytes}});
  }
  return out;
}

Status DeleteJobFiles(Api& api, const store::Job& job) {
  const std::string prefix = fmt::format("jobs/{}/", job.id);
  std::lock_guard<std::mutex> lock(api.FileUsageLock(job.user_id));
  int64_t freed = 0;
  while (true) {
    RM_ASSIGN_OR_RETURN(files::ListResult page, api.files->List(prefix, "", 1000));
    for (const auto& o : page.objects) {
      Status st = api.files->Delete(o.key);
      if (!st.ok() && st.code() != StatusCode::kNotFound) return st;
      if (st.ok()) freed += Charge(api, o.key, o.size);
    }
    if (!page.next_after) break;
  }
  return freed ? api.store->AddUserFileBytes(job.user_id, -freed) : Status::Ok();
}

void AddFileRoutes(Api& api) {
  http::RouteOptions read{api.limits.max_body_bytes, http::Pool::kApi, true, access::kRead};
  http::RouteOptions write{api.limits.max_body_bytes, http::Pool::kApi, true, access::kSubmit};
  http::RouteOptions upload{api.limits.max_file_bytes, http::Pool::kApi, true, access::kSubmit, true};

  api.http->Route("PUT", "/api/v1/files/{path...}", upload,
                  [&api](http::Request& req, http::Responder respond) {
                    Put(api, req, std::move(respond), CallerOf(req), KeyOf(req));
                  });
  api.http->Route("GET", "/api/v1/files/{path...}", read, [&api](http::Request& req, http::Responder respond) {
    Get(api, req, std::move(respond), false, CallerOf(req), KeyOf(req));
  });
  api.http->Route("HEAD", "/api/v1/files/{path...}", read, [&api](http::Request& req, http::Responder respond) {
    Get(api, req, std::move(respond), true, CallerOf(req), KeyOf(req));
  });
  api.http->Route("DELETE", "/api/v1/files/{path...}", write,
                  Json([&api](const http::Request& req, const Caller& c) -> StatusOr<Reply> {
                    RM_ASSIGN_OR_RETURN(std::string key, KeyOf(req));
                    RM_RETURN_IF_ERROR(CheckAccess(api, c, key, Op::kWrite));
                    const int64_t owner = Owner(c, key);
                    if (owner == 0) {
                      RM_RETURN_IF_ERROR(api.files->Delete(key));
                    } else {
                      std::lock_guard<std::mutex> lock(api.FileUsageLock(owner));
                      RM_ASSIGN_OR_RETURN(files::ObjectInfo info, api.files->Head(key));
                      RM_RETURN_IF_ERROR(api.files->Delete(key));
                      RM_RETURN_IF_ERROR(api.store->AddUserFileBytes(owner, -Charge(api, key, info.size)));
                    }
                    return Reply{200, {{"path", key}, {"deleted", true}}};
                  }));
  http::RouteOptions admin{api.limits.max_body_bytes, http::Pool::kApi, true, access::kAdmin};
  // Recounts every user's usage from what the store holds (after a crash
  // between an object's commit and its count, or a store changed by hand).
  api.http->Route("POST", "/api/v1/files/reconcile", admin,
                  Json([&api](const http::Request& req, const Caller& c) -> StatusOr<Reply> {
                    RM_ASSIGN_OR_RETURN(json users, ReconcileFileUsage(api));
                    api.auth->Audit(req, c.user.name, "files.reconcile", "all users", "ok", "");
                    return Reply{200, {{"users", users}}};
                  }));
  api.http->Route("PUT", "/api/v1/users/{name}/quota", admin,
                  Json([&api](const http::Request& req, const Caller& c) -> StatusOr<Reply> {
                    RM_ASSIGN_OR_RETURN(json b, BodyObject(req));
                    if (!b.contains("file_bytes") || !b["file_bytes"].is_number_integer() || b["file_bytes"].get<int64_t>() < 0) {
                      return InvalidArgument("file_bytes: must be an integer >= 0 (0 = no quota, not even the site's default)");
                    }
                    auto user = api.store->GetUserByName(req.matches.at(0));
                    if (!user.ok()) return NotFound(fmt::format("user {} not found", Printable(req.matches.at(0))));
                    const int64_t bytes = b["file_bytes"].get<int64_t>();
                    RM_RETURN_IF_ERROR(api.store->SetUserFileQuota(user->id, bytes == 0 ? kUnlimitedQuota : bytes));
                    api.auth->Audit(req, c.user.name, "user.quota", "user " + user->name, "ok", fmt::format("files {} bytes", bytes));
                    return Reply{200, {{"user", user->name}, {"file_quota_bytes", bytes}, {"file_bytes", user->file_bytes}}};
                  }));
  api.http->Route("GET", "/api/v1/files", read, Json([&api](const http::Request& req, const Caller& c) -> StatusOr<Reply> {
    RM_ASSIGN_OR_RETURN(auto prefix, req.Param("prefix"));
    RM_ASSIGN_OR_RETURN(auto after, req.Param("after"));
    RM_ASSIGN_OR_RETURN(int64_t limit, IntParam(req, "limit", 1000, 1, 1000));
    const std::string p = prefix.value_or("");
    if (p.size() > kMaxFilesKeyBytes || !IsValidUtf8(p)) return InvalidArgument("prefix: not a valid path prefix");
    RM_RETURN_IF_ERROR(CheckListAccess(api, c, p));
    RM_ASSIGN_OR_RETURN(files::ListResult page, api.files->List(p, after.value_or(""), static_cast<size_t>(limit)));
    json out = json::array();
    for (const auto& o : page.objects) out.push_back(InfoJson(o));
    json body = {{"files", out}};
    if (page.next_after) body["next_after"] = *page.next_after;
    return Reply{200, body};
  }));
}

}  // namespace ringmaster::server
