#include "agent/task_files.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <random>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "agent/executor/safe_fs.h"
#include "common/crypto.h"
#include "common/files.h"
#include "common/strings.h"
#include "common/files_key.h"
#include "common/units.h"

namespace ringmaster::agent {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

constexpr int kMaxDepth = 32;
// Files past this size with under an eighth of it on disk are not uploaded.
constexpr int64_t kSparseFloor = 64 << 20;
// A cache entry used within this long is never evicted: a stager may be
// about to link it.
constexpr int64_t kEvictAfterSeconds = 600;

std::string Errno() { return std::strerror(errno); }


std::string TrimName(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ' || s.back() == '\r')) s.pop_back();
  return s;
}

// A name `latest` may hold: one plain directory name.
bool CheckpointName(const std::string& s) {
  return !s.empty() && s.size() <= 255 && s != "." && s != ".." && s.find('/') == std::string::npos &&
         s.find('\0') == std::string::npos && s[0] != '.';
}

// The directory `parts` under `root`, each missing one made for uid:gid. An
// existing one must already be uid's: nothing found is ever handed over.
StatusOr<UniqueFd> MakeDirChain(int root, const std::vector<std::string>& parts, uid_t uid, gid_t gid) {
  UniqueFd cur(fcntl(root, F_DUPFD_CLOEXEC, 0));
  if (!cur) return Internal("dup: " + Errno());
  for (const std::string& p : parts) {
    if (p.empty() || p == "." || p == ".." || p.find('\0') != std::string::npos) {
      return InvalidArgument(fmt::format("\"{}\" is not a directory name", p));
    }
    if (mkdirat(cur.get(), p.c_str(), 0755) == 0) {
      if (fchownat(cur.get(), p.c_str(), uid, gid, AT_SYMLINK_NOFOLLOW) != 0) return Internal(fmt::format("chown {}: {}", p, Errno()));
    } else if (errno != EEXIST) {
      return Internal(fmt::format("mkdir {}: {}", p, Errno()));
    }
    RM_ASSIGN_OR_RETURN(UniqueFd next, OpenOwnedDir(cur.get(), p, uid));
    cur = std::move(next);
  }
  return cur;
}

Status CopyFd(int from, int to) {
  std::string buf(1 << 20, '\0');
  while (true) {
    ssize_t n = read(from, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Internal("read: " + Errno());
    if (n == 0) return Status::Ok();
    for (ssize_t off = 0; off < n;) {
      ssize_t w = write(to, buf.data() + off, static_cast<size_t>(n - off));
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) return Internal("write: " + Errno());
      off += w;
    }
  }
}

}  // namespace

TaskFiles::TaskFiles(const client::ApiClient* api, TaskFilesOptions options) : api_(api), options_(std::move(options)) {}

Status TaskFiles::Init() { return MakeDirs(options_.cache_dir, 0700); }

std::string TaskFiles::TaskUrl(int64_t task_id, int attempt, const std::string& key) const {
  return fmt::format("/api/v1/agent/tasks/{}/files{}{}?attempt={}", task_id, key.empty() ? "" : "/",
                     PercentEncode(key, true), attempt);
}

StatusOr<StagePlan> TaskFiles::Plan(int64_t task_id, int attempt) const {
  RM_ASSIGN_OR_RETURN(json j, api_->Get(TaskUrl(task_id, attempt, ""), {std::chrono::seconds(300)}));
  StagePlan plan;
  try {
    plan.job_id = j.at("job_id").get<int64_t>();
    auto entries = [](const json& list, std::vector<StageEntry>* out) {
      for (const auto& e : list) {
        out->push_back({e.at("path").get<std::string>(), e.at("size").get<uint64_t>(), e.value("sha256", ""),
                        e.at("to").get<std::string>()});
        const StageEntry& last = out->back();
        // Whatever the server says, a file lands inside the work dir: a
        // relative path without ".", ".." or empty segments, NULs or control
        // characters (the rules of a files key).
        if (Status st = ValidateFilesKey(last.to); !st.ok()) throw std::runtime_error("a bad staging path: " + st.message());
        if (Status st = ValidateFilesKey(last.path); !st.ok()) throw std::runtime_error("a bad files path: " + st.message());
        if (!last.sha256.empty() && !IsSha256Hex(last.sha256)) throw std::runtime_error("a bad sha256");
      }
    };
    entries(j.at("inputs"), &plan.inputs);
    entries(j.at("checkpoint"), &plan.checkpoint);
    plan.outputs = j.at("outputs").get<std::vector<std::string>>();
    for (const std::string& o : plan.outputs) {
      if (Status st = ValidateFilesKey(o); !st.ok()) throw std::runtime_error("a bad output path: " + st.message());
    }
  } catch (const std::exception& e) {
    return InvalidArgument(fmt::format("a malformed staging plan: {}", e.what()));
  }
  return plan;
}

std::string TaskFiles::UserCache(uid_t uid) const { return fmt::format("{}/{}", options_.cache_dir, uid); }

Status TaskFiles::FetchOne(int64_t task_id, int attempt, const std::string& cache, StageEntry* e) const {
  if (!e->sha256.empty()) {
    struct stat st {};
    if (stat((cache + "/" + e->sha256).c_str(), &st) == 0 && static_cast<uint64_t>(st.st_size) == e->size) {
      utimensat(AT_FDCWD, (cache + "/" + e->sha256).c_str(), nullptr, 0);  // used now: evicted last
      return Status::Ok();
    }
  }
  std::random_device rd;
  const std::string tmp = fmt::format("{}/.tmp-{:016x}", cache, (uint64_t{rd()} << 32) | rd());
  UniqueFd fd(open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!fd) return Internal(fmt::format("{}: {}", tmp, Errno()));
  Sha256 sha;
  uint64_t got = 0;
  Status write_status;
  Status st = api_->Download(
      TaskUrl(task_id, attempt, e->path), {}, [](const auto&) {},
      [&](const char* data, size_t n) {
        sha.Update(std::string_view(data, n));
        got += n;
        for (size_t off = 0; off < n;) {
          ssize_t w = write(fd.get(), data + off, n - off);
          if (w < 0 && errno == EINTR) continue;
          if (w < 0) {
            write_status = Internal(fmt::format("{}: {}", tmp, Errno()));
            return false;
          }
          off += static_cast<size_t>(w);
        }
        return true;
      },
      {std::chrono::seconds(60)});
  if (st.ok()) st = write_status;
  const std::string digest = sha.FinishHex();
  if (st.ok() && got != e->size) {
    st = Unavailable(fmt::format("{}: {} bytes arrived, not {}", e->path, got, e->size));
  }
  if (st.ok() && !e->sha256.empty() && digest != e->sha256) {
    st = Unavailable(fmt::format("{}: arrived with SHA-256 {}, not {}", e->path, digest, e->sha256));
  }
  if (st.ok() && fchmod(fd.get(), 0444) != 0) st = Internal("chmod: " + Errno());
  if (st.ok() && fsync(fd.get()) != 0) st = Internal("fsync: " + Errno());
  if (!st.ok()) {
    unlink(tmp.c_str());
    return st.Annotate("fetching " + e->path);
  }
  // Other tasks may be fetching the same file and placing it: the first copy stays.
  RM_RETURN_IF_ERROR(PublishOnce(tmp, cache + "/" + digest).Annotate("fetching " + e->path));
  e->sha256 = digest;
  e->size = got;
  return Status::Ok();
}

Status TaskFiles::Fetch(int64_t task_id, int attempt, uid_t uid, StagePlan* plan,
                        const std::function<bool()>& cancelled) const {
  const std::string cache = UserCache(uid);
  RM_RETURN_IF_ERROR(MakeDirs(cache, 0700));
  for (auto* list : {&plan->inputs, &plan->checkpoint}) {
    for (StageEntry& e : *list) {
      if (cancelled && cancelled()) return Aborted("stopped while staging");
      RM_RETURN_IF_ERROR(FetchOne(task_id, attempt, cache, &e));
    }
  }
  return Status::Ok();
}

void TaskFiles::Evict() const {
  struct Entry {
    std::string path;
    int64_t mtime;
    int64_t size;
  };
  std::vector<Entry> entries;
  int64_t total = 0;
  std::error_code ec;
  for (const auto& user : fs::directory_iterator(options_.cache_dir, ec)) {
    std::error_code ec2;
    for (const auto& d : fs::directory_iterator(user.path(), ec2)) {
      struct stat st {};
      if (lstat(d.path().c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
      entries.push_back({d.path().string(), st.st_mtim.tv_sec, st.st_size});
      total += st.st_size;
    }
  }
  if (total <= options_.cache_bytes) return;
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) { return a.mtime < b.mtime; });
  const int64_t now = time(nullptr);
  for (const Entry& e : entries) {
    if (total <= options_.cache_bytes || now - e.mtime < kEvictAfterSeconds) break;
    // Tasks that hold a hard link keep their copy; the cache forgets it.
    if (unlink(e.path.c_str()) == 0) total -= e.size;
  }
}

Status TaskFiles::Place(const StagePlan& plan, int work_fd, uid_t uid, gid_t gid) const {
  UniqueFd cache(open(UserCache(uid).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!cache) return Internal(fmt::format("{}: {}", UserCache(uid), Errno()));
  auto place = [&](const StageEntry& e, const std::string& to) -> Status {
    std::vector<std::string> parts = PathParts(to);
    if (parts.empty()) return InvalidArgument("an empty staging path");
    const std::string base = parts.back();
    parts.pop_back();
    RM_ASSIGN_OR_RETURN(UniqueFd dir, MakeDirChain(work_fd, parts, uid, gid));
    if (linkat(cache.get(), e.sha256.c_str(), dir.get(), base.c_str(), 0) == 0) return Status::Ok();
    if (errno == EEXIST) return AlreadyExists(fmt::format("{}: two files staged there", to));
    if (errno != EXDEV && errno != EPERM && errno != EMLINK) return Internal(fmt::format("link {}: {}", to, Errno()));
    // Another filesystem: a copy, the task's own.
    UniqueFd in(openat(cache.get(), e.sha256.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
    if (!in) return Internal(fmt::format("cache {}: {}", e.sha256, Errno()));
    UniqueFd out(openat(dir.get(), base.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644));
    if (!out) return Internal(fmt::format("create {}: {}", to, Errno()));
    if (fchown(out.get(), uid, gid) != 0) return Internal(fmt::format("chown {}: {}", to, Errno()));
    return CopyFd(in.get(), out.get()).Annotate(to);
  };
  for (const StageEntry& e : plan.inputs) RM_RETURN_IF_ERROR(place(e, e.to).Annotate("staging inputs"));
  for (const StageEntry& e : plan.checkpoint) {
    RM_RETURN_IF_ERROR(place(e, "checkpoints/" + e.to).Annotate("staging the checkpoint"));
  }
  Evict();  // after placing: what this plan needs is linked already
  return Status::Ok();
}

namespace {

// The sandbox's work dir, opened without following anything its user made.
StatusOr<UniqueFd> OpenWork(const TaskSandbox& box) {
  RM_ASSIGN_OR_RETURN(UniqueFd parent, OpenTrustedDir(fs::path(box.dir).parent_path().string()));
  RM_ASSIGN_OR_RETURN(UniqueFd sandbox, OpenOwnedDir(parent.get(), fs::path(box.dir).filename().string(), box.uid));
  return OpenOwnedDir(sandbox.get(), "work", box.uid);
}

}  // namespace

Status TaskFiles::UploadFd(int64_t task_id, int attempt, int fd, const std::string& key) const {
  struct stat st {};
  if (fstat(fd, &st) != 0) return Internal("stat: " + Errno());
  // A file that is mostly holes (truncate -s 2G) costs the node nothing and
  // would cost the store its whole size: refused, naming it, rather than
  // inflated (docs/files.md).
  const int64_t allocated = static_cast<int64_t>(st.st_blocks) * 512;
  if (st.st_size > kSparseFloor && allocated < st.st_size / 8) {
    return FailedPrecondition(fmt::format("{}: a sparse file ({} bytes, {} of them on disk): files over {} that are "
                                          "mostly holes are not uploaded; write it out or compress it",
                                          key, st.st_size, allocated, FormatBytes(kSparseFloor)));
  }
  if (st.st_size > (1 << 20)) {
    // Asked first: a refusal (quota, size) sent while a large body is still
    // being written reaches the writer as a broken connection, not as 413.
    auto ask = api_->Upload(TaskUrl(task_id, attempt, key) + "&dry_run=1", 0,
                            {{"X-Ringmaster-Size", std::to_string(st.st_size)}},
                            [](uint64_t, char*, size_t) -> long { return 0; }, {std::chrono::seconds(60)});
    if (!ask.ok()) return ask.status().Annotate("uploading " + key);
  }
  auto res = api_->Upload(
      TaskUrl(task_id, attempt, key), static_cast<uint64_t>(st.st_size), {},
      [fd](uint64_t offset, char* buf, size_t n) -> long {
        ssize_t r = pread(fd, buf, n, static_cast<off_t>(offset));
        return r;  // 0 before the end: the file shrank, the upload fails
      },
      {std::chrono::seconds(60)});
  return res.ok() ? Status::Ok() : res.status().Annotate("uploading " + key);
}

Status TaskFiles::UploadFile(int64_t task_id, int attempt, int dir_fd, const std::string& name, uid_t uid,
                             const std::string& key, UploadCount* count) const {
  // Only the task's own files: a staged input (root's hard link into the
  // cache) is in the store already, and a hard link the task made to a file
  // of root's (say /etc/shadow) is not the task's to publish.
  auto fd = OpenOwnedRegularFile(dir_fd, name, uid);
  if (!fd.ok()) return Status::Ok();
  if (++count->files > options_.max_files) {
    return ResourceExhausted(fmt::format("more than {} files to upload; pack them into one archive", options_.max_files));
  }
  Status up = UploadFd(task_id, attempt, fd->get(), key);
  if (up.code() == StatusCode::kInvalidArgument) {  // a name the store refuses: skip it, upload the rest
    spdlog::warn("agent: task {}: not uploading {}: {}", task_id, key, up.message());
    ++count->skipped;
    return Status::Ok();
  }
  return up;
}

Status TaskFiles::UploadTree(int64_t task_id, int attempt, int dir_fd, uid_t uid, const std::string& key_prefix,
                             int depth, UploadCount* count) const {
  if (depth > kMaxDepth) return ResourceExhausted(fmt::format("{}: deeper than {} directories", key_prefix, kMaxDepth));
  const auto too_many = [&] {
    return ResourceExhausted(fmt::format("more than {} entries to upload; pack them into one archive", options_.max_files));
  };
  std::vector<std::string> names;
  {
    int copy = fcntl(dir_fd, F_DUPFD_CLOEXEC, 0);
    if (copy < 0) return Internal("dup: " + Errno());
    DIR* d = fdopendir(copy);
    if (!d) {
      close(copy);
      return Internal("opendir: " + Errno());
    }
    rewinddir(d);  // the copy shares the descriptor's position
    // Every entry counts, files or not: a directory of a million FIFOs
    // costs the agent no more memory than the cap.
    while (dirent* e = readdir(d)) {
      if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
      if (++count->entries > 4 * options_.max_files) {
        closedir(d);
        return too_many();
      }
      names.emplace_back(e->d_name);
    }
    closedir(d);
  }
  std::sort(names.begin(), names.end());
  for (const std::string& name : names) {
    struct stat st {};
    if (fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
      if (count->strict) return Unavailable(fmt::format("{}{} vanished while being uploaded", key_prefix, name));
      continue;
    }
    if (name[0] == '.' && name.rfind(".tmp", 0) == 0) continue;  // a writer's temporary
    const std::string key = key_prefix + name;
    if (S_ISDIR(st.st_mode)) {
      auto sub = OpenOwnedDir(dir_fd, name, uid);
      if (!sub.ok()) continue;
      RM_RETURN_IF_ERROR(UploadTree(task_id, attempt, sub->get(), uid, key + "/", depth + 1, count));
    } else if (S_ISREG(st.st_mode)) {
      RM_RETURN_IF_ERROR(UploadFile(task_id, attempt, dir_fd, name, uid, key, count));
    }
    // Symlinks, FIFOs, sockets, devices: not the task's files to upload.
  }
  return Status::Ok();
}

Status TaskFiles::SyncCheckpoint(int64_t task_id, int attempt, int64_t job_id, const TaskSandbox& box,
                                 std::string* synced) const {
  RM_ASSIGN_OR_RETURN(UniqueFd work, OpenWork(box));
  auto dir = OpenOwnedDir(work.get(), "checkpoints", box.uid);
  if (!dir.ok()) return dir.status().code() == StatusCode::kNotFound ? Status::Ok() : dir.status();
  auto latest_fd = OpenOwnedRegularFile(dir->get(), "latest", box.uid);
  if (!latest_fd.ok()) {
    // A staged `latest` is root's hard link: nothing new was written.
    return latest_fd.status().code() == StatusCode::kNotFound || latest_fd.status().code() == StatusCode::kPermissionDenied
               ? Status::Ok()
               : latest_fd.status();
  }
  char buf[512];
  ssize_t n = pread(latest_fd->get(), buf, sizeof buf, 0);
  if (n <= 0) return Status::Ok();  // being written
  const std::string content(buf, static_cast<size_t>(n));
  const std::string name = TrimName(content);
  // A `latest` rewritten with the same name (a trainer that reuses one
  // directory) is a new checkpoint too: its version is the name and the
  // file's identity and time.
  struct stat lst {};
  fstat(latest_fd->get(), &lst);
  const std::string version = fmt::format("{} {}.{}.{}", name, lst.st_ino, lst.st_mtim.tv_sec, lst.st_mtim.tv_nsec);
  if (version == *synced || name == *synced) return Status::Ok();
  if (!CheckpointName(name)) return InvalidArgument(fmt::format("checkpoints/latest names \"{}\", not a directory in checkpoints/", name));
  RM_ASSIGN_OR_RETURN(UniqueFd ckpt, OpenOwnedDir(dir->get(), name, box.uid));
  UploadCount count;
  count.strict = true;  // a file that vanishes means the checkpoint changed: no `latest` for it
  const std::string prefix = fmt::format("jobs/{}/checkpoints/", job_id);
  RM_RETURN_IF_ERROR(UploadTree(task_id, attempt, ckpt.get(), box.uid, prefix + name + "/", 0, &count));
  // Still the checkpoint `latest` names? Otherwise the next look uploads the newer one.
  {
    auto again = OpenOwnedRegularFile(dir->get(), "latest", box.uid);
    struct stat now {};
    if (!again.ok() || fstat(again->get(), &now) != 0 || now.st_ino != lst.st_ino ||
        now.st_mtim.tv_sec != lst.st_mtim.tv_sec || now.st_mtim.tv_nsec != lst.st_mtim.tv_nsec) {
      return Status::Ok();
    }
  }
  // `latest` last, from the bytes read: a reader of the store sees a complete checkpoint.
  auto res = api_->Upload(
      TaskUrl(task_id, attempt, prefix + "latest"), content.size(), {},
      [&content](uint64_t offset, char* out, size_t want) -> long {
        const size_t k = std::min(want, content.size() - static_cast<size_t>(offset));
        memcpy(out, content.data() + offset, k);
        return static_cast<long>(k);
      },
      {std::chrono::seconds(60)});
  if (!res.ok()) return res.status().Annotate("uploading " + prefix + "latest");
  spdlog::info("agent: task {}: checkpoint {} uploaded ({} files)", task_id, name, count.files);
  *synced = version;
  return Status::Ok();
}

Status TaskFiles::UploadOutputs(int64_t task_id, int attempt, int64_t job_id, const TaskSandbox& box,
                                const std::vector<std::string>& outputs, UploadCount* count) const {
  RM_ASSIGN_OR_RETURN(UniqueFd work, OpenWork(box));
  const std::string prefix = fmt::format("jobs/{}/outputs/", job_id);
  for (const std::string& out : outputs) {
    std::vector<std::string> parts = PathParts(out);
    if (parts.empty() || std::any_of(parts.begin(), parts.end(), [](const std::string& p) { return p == "." || p == ".."; })) {
      continue;
    }
    // outputs/x lands at jobs/<id>/outputs/x; anything else keeps its path.
    std::string dest = out == "outputs" ? "" : out.rfind("outputs/", 0) == 0 ? out.substr(8) : out;
    UniqueFd cur(fcntl(work.get(), F_DUPFD_CLOEXEC, 0));
    bool missing = false;
    for (size_t i = 0; i + 1 < parts.size() && !missing; ++i) {
      auto next = OpenOwnedDir(cur.get(), parts[i], box.uid);
      if (!next.ok()) missing = true;
      else cur = std::move(*next);
    }
    if (missing) continue;
    const std::string& base = parts.back();
    struct stat st {};
    if (fstatat(cur.get(), base.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    if (S_ISDIR(st.st_mode)) {
      auto sub = OpenOwnedDir(cur.get(), base, box.uid);
      if (!sub.ok()) continue;
      RM_RETURN_IF_ERROR(UploadTree(task_id, attempt, sub->get(), box.uid, prefix + (dest.empty() ? "" : dest + "/"), 0, count));
    } else if (S_ISREG(st.st_mode)) {
      RM_RETURN_IF_ERROR(UploadFile(task_id, attempt, cur.get(), base, box.uid, prefix + (dest.empty() ? base : dest), count));
    }
  }
  return Status::Ok();
}

}  // namespace ringmaster::agent
