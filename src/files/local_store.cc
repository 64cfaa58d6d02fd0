#include "files/local_store.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>
#include <vector>

#include <fmt/format.h>

#include "common/crypto.h"
#include "common/files.h"

namespace ringmaster::files {
namespace {

constexpr size_t kHeaderBytes = 128;
constexpr std::string_view kMagic = "RMBLOB1 ";

// A full disk is InsufficientStorage (507: nothing was stored, try again
// later), not ResourceExhausted, which callers read as over a quota or limit.
Status Errno(const std::string& what, int err) {
  std::string msg = fmt::format("storage backend local: {}: {}", what, std::strerror(err));
  if (IsDiskFull(err)) return ServerDiskFull(msg);
  return Unavailable(msg);
}

std::string Header(const std::string& sha) {
  std::string h = std::string(kMagic) + sha + "\n";
  h.resize(kHeaderBytes, '\n');
  return h;
}

// The object's path below root: "a/b/c" -> "d.a/d.b/o.c".
std::string ObjectPath(const std::string& root, std::string_view key) {
  std::string out = root;
  size_t start = 0;
  while (true) {
    size_t slash = key.find('/', start);
    if (slash == std::string_view::npos) {
      out += "/o.";
      out += key.substr(start);
      return out;
    }
    out += "/d.";
    out += key.substr(start, slash - start);
    start = slash + 1;
  }
}

struct Fd {
  int fd = -1;
  explicit Fd(int f = -1) : fd(f) {}
  Fd(Fd&& o) noexcept : fd(std::exchange(o.fd, -1)) {}
  Fd& operator=(Fd&& o) noexcept {
    if (fd >= 0) ::close(fd);
    fd = std::exchange(o.fd, -1);
    return *this;
  }
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// fsyncs a directory; one a concurrent Delete removed has nothing left to sync.
Status SyncDir(const std::string& dir) {
  Fd d(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (d.fd < 0 && errno == ENOENT) return Status::Ok();
  if (d.fd < 0) return Errno("open a directory", errno);
  if (::fsync(d.fd) != 0) return Errno("fsync a directory", errno);
  return Status::Ok();
}

// Reads the header of an open object file; fills size, sha256 and mtime.
Status ReadHeader(int fd, const std::string& key, ObjectInfo* info) {
  char h[kHeaderBytes];
  ssize_t n = ::pread(fd, h, sizeof h, 0);
  if (n != static_cast<ssize_t>(kHeaderBytes) || std::string_view(h, kMagic.size()) != kMagic) {
    return Internal(fmt::format("storage backend local: {}: damaged object (bad header)", key));
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) return Errno("stat " + key, errno);
  info->key = key;
  info->sha256.assign(h + kMagic.size(), 64);
  info->size = static_cast<uint64_t>(st.st_size) - kHeaderBytes;
  info->mtime_ms = st.st_mtim.tv_sec * 1000LL + st.st_mtim.tv_nsec / 1000000;
  return Status::Ok();
}

class LocalWriter : public BlobWriter {
 public:
  LocalWriter(std::string root, std::string key, PutOptions options, std::string tmp, Fd fd)
      : root_(std::move(root)), key_(std::move(key)), options_(std::move(options)), tmp_(std::move(tmp)),
        fd_(std::move(fd)) {}
  ~LocalWriter() override { Abort(); }

  Status Write(std::string_view data) override {
    if (fd_.fd < 0) return FailedPrecondition("write after commit or abort");
    if (options_.max_bytes && written_ + data.size() > *options_.max_bytes) {
      Abort();
      return ResourceExhausted(fmt::format("{}: over the limit of {} bytes", key_, *options_.max_bytes));
    }
    Status s = WriteAll(fd_.fd, data.data(), data.size(), tmp_);
    if (!s.ok()) {
      int err = errno;
      Abort();
      if (s.code() == StatusCode::kInsufficientStorage) return Errno("write " + key_, IsDiskFull(err) ? err : ENOSPC);
      return Unavailable("storage backend local: " + s.message());
    }
    hash_.Update(data);
    written_ += data.size();
    return Status::Ok();
  }

  StatusOr<ObjectInfo> Commit() override {
    if (fd_.fd < 0) return FailedPrecondition("commit after commit or abort");
    std::string sha = hash_.FinishHex();
    if (!options_.expected_sha256.empty() && sha != options_.expected_sha256) {
      Abort();
      return InvalidArgument(fmt::format("{}: SHA-256 mismatch: the bytes hash to {}, expected {}", key_, sha,
                                         options_.expected_sha256));
    }
    std::string header = Header(sha);
    if (::pwrite(fd_.fd, header.data(), header.size(), 0) != static_cast<ssize_t>(header.size()) ||
        ::fsync(fd_.fd) != 0) {
      int err = errno;
      Abort();
      return Errno("write " + key_, err);
    }
    ObjectInfo info;
    RM_RETURN_IF_ERROR(ReadHeader(fd_.fd, key_, &info));
    std::string target = ObjectPath(root_, key_);
    std::string dir = target.substr(0, target.rfind('/'));
    // A concurrent Delete may remove a parent that became empty between our
    // mkdir and rename: make it again.
    for (int attempt = 0;; ++attempt) {
      if (Status s = MakeParents(dir); !s.ok()) {
        if (s.message().find("No such file") != std::string::npos && attempt < 5) continue;  // raced a Delete
        Abort();
        return s;
      }
      if (::rename(tmp_.c_str(), target.c_str()) == 0) break;
      int err = errno;
      if (err == EISDIR || err == ENOTDIR) {
        Abort();
        return FailedPrecondition(fmt::format("storage backend local: {}: a directory is in the way", key_));
      }
      if (err != ENOENT || attempt == 5) {
        Abort();
        return Errno("rename into " + key_, err);
      }
    }
    fd_ = Fd();
    tmp_.clear();
    (void)SyncDir(dir);  // the object is in place: a failed directory fsync only weakens durability
    return info;
  }

  void Abort() override {
    if (fd_.fd >= 0) {
      fd_ = Fd();
      ::unlink(tmp_.c_str());
    }
  }

  uint64_t bytes_written() const override { return written_; }

 private:
  // mkdir -p below root, with one fsync for the whole new chain: of the
  // directory it hangs from. Journaling file systems (ext4, xfs) commit the
  // chain's mkdirs in order with it, and the deepest directory is fsynced
  // after the rename; an fsync per level made deep keys a way to slow
  // everyone's uploads.
  Status MakeParents(const std::string& dir) {
    std::vector<std::string> missing;  // deepest first
    std::string cur = dir;
    bool made = false;  // whether `cur` was made here
    while (cur.size() > root_.size()) {
      if (::mkdir(cur.c_str(), 0700) == 0) {
        made = true;
        break;
      }
      if (errno == EEXIST) {
        if (missing.empty()) return Status::Ok();
        break;
      }
      if (errno != ENOENT) return Errno("mkdir " + cur.substr(root_.size()), errno);
      missing.push_back(cur);
      cur.resize(cur.rfind('/'));
    }
    // `cur` exists now; the chain hangs from it, or from its parent if it is new.
    const std::string anchor = made ? cur.substr(0, cur.rfind('/')) : cur;
    for (auto it = missing.rbegin(); it != missing.rend(); ++it) {
      if (::mkdir(it->c_str(), 0700) != 0 && errno != EEXIST) return Errno("mkdir " + it->substr(root_.size()), errno);
    }
    return SyncDir(anchor);
  }

  std::string root_, key_;
  PutOptions options_;
  std::string tmp_;
  Fd fd_;
  Sha256 hash_;
  uint64_t written_ = 0;
};

class LocalReader : public BlobReader {
 public:
  LocalReader(Fd fd, ObjectInfo info, uint64_t pos, uint64_t end)
      : fd_(std::move(fd)), info_(std::move(info)), pos_(pos), end_(end) {}
  const ObjectInfo& info() const override { return info_; }
  StatusOr<size_t> Read(char* buf, size_t n) override {
    size_t want = static_cast<size_t>(std::min<uint64_t>(n, end_ - pos_));
    if (want == 0) return size_t{0};
    ssize_t got;
    do {
      got = ::pread(fd_.fd, buf, want, static_cast<off_t>(pos_ + kHeaderBytes));
    } while (got < 0 && errno == EINTR);
    if (got < 0) return Errno("read " + info_.key, errno);
    if (got == 0) return Internal("storage backend local: " + info_.key + ": shorter than its size");
    pos_ += static_cast<uint64_t>(got);
    return static_cast<size_t>(got);
  }

 private:
  Fd fd_;
  ObjectInfo info_;
  uint64_t pos_, end_;
};

// One directory's entries as (sort name, on-disk name, is_dir), in key order:
// a directory "x" sorts as "x/", so keys come out in byte order.
struct Entry {
  std::string sort_name, disk_name;
  bool dir;
};

StatusOr<std::vector<Entry>> ReadEntries(const std::string& path) {
  std::vector<Entry> out;
  DIR* d = ::opendir(path.c_str());
  if (!d) {
    if (errno == ENOENT) return out;  // removed by a concurrent Delete
    return Errno("list " + path, errno);
  }
  while (dirent* e = ::readdir(d)) {
    std::string name = e->d_name;
    if (name.size() < 3 || name[1] != '.') continue;
    if (name[0] == 'd') out.push_back({name.substr(2) + "/", name, true});
    if (name[0] == 'o') out.push_back({name.substr(2), name, false});
  }
  ::closedir(d);
  std::sort(out.begin(), out.end(), [](const Entry& a, const Entry& b) { return a.sort_name < b.sort_name; });
  return out;
}

class LocalStore : public BlobStore {
 public:
  explicit LocalStore(std::string root) : root_(std::move(root)) {}
  std::string Describe() const override { return "local (" + root_ + ")"; }

  StatusOr<std::unique_ptr<BlobWriter>> Create(const std::string& key, const PutOptions& options) override {
    RM_RETURN_IF_ERROR(ValidateFilesKey(key));
    std::string tmp = root_ + "/.tmp/" + RandomHex(12);
    Fd fd(::open(tmp.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
    if (fd.fd < 0) return Errno("create a temp file", errno);
    std::string placeholder(kHeaderBytes, '\0');
    if (Status s = WriteAll(fd.fd, placeholder.data(), placeholder.size(), tmp); !s.ok()) {
      int err = errno;
      ::unlink(tmp.c_str());
      return Errno("write a temp file", err);
    }
    return std::unique_ptr<BlobWriter>(new LocalWriter(root_, key, options, tmp, std::move(fd)));
  }

  StatusOr<std::unique_ptr<BlobReader>> Open(const std::string& key, const ByteRange& range) override {
    RM_RETURN_IF_ERROR(ValidateFilesKey(key));
    Fd fd(::open(ObjectPath(root_, key).c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
    if (fd.fd < 0) {
      if (errno == ENOENT || errno == ENOTDIR) return NotFound(key + ": no such file");
      return Errno("open " + key, errno);
    }
    ObjectInfo info;
    RM_RETURN_IF_ERROR(ReadHeader(fd.fd, key, &info));
    if (range.offset > info.size || (range.offset == info.size && info.size > 0)) {
      return InvalidArgument(fmt::format("range not satisfiable: offset {} of a {}-byte file", range.offset, info.size));
    }
    uint64_t end = range.length ? std::min(info.size, range.offset + *range.length) : info.size;
    return std::unique_ptr<BlobReader>(new LocalReader(std::move(fd), std::move(info), range.offset, end));
  }

  StatusOr<ObjectInfo> Head(const std::string& key) override {
    RM_ASSIGN_OR_RETURN(auto reader, Open(key, {}));
    return reader->info();
  }

  StatusOr<ListResult> List(const std::string& prefix, const std::string& after, size_t limit) override {
    if (limit == 0 || limit > 1000) return InvalidArgument("limit: must be 1..1000");
    ListResult out;
    bool more = false;
    RM_RETURN_IF_ERROR(Walk(root_, "", prefix, after, limit, &out, &more));
    if (more) out.next_after = out.objects.back().key;
    return out;
  }

  Status Delete(const std::string& key) override {
    RM_RETURN_IF_ERROR(ValidateFilesKey(key));
    std::string path = ObjectPath(root_, key);
    if (::unlink(path.c_str()) != 0) {
      if (errno == ENOENT || errno == ENOTDIR) return NotFound(key + ": no such file");
      return Errno("delete " + key, errno);
    }
    // Remove parents that became empty, up to the root.
    std::string dir = path.substr(0, path.rfind('/'));
    SyncDir(dir).ok();
    while (dir.size() > root_.size() && ::rmdir(dir.c_str()) == 0) dir.resize(dir.rfind('/'));
    return Status::Ok();
  }

 private:
  // Appends objects under `dir` (whose keys start with `base`) that match;
  // sets *more once one past `limit` is seen.
  Status Walk(const std::string& dir, const std::string& base, const std::string& prefix, const std::string& after,
              size_t limit, ListResult* out, bool* more) {
    RM_ASSIGN_OR_RETURN(std::vector<Entry> entries, ReadEntries(dir));
    for (const Entry& e : entries) {
      std::string full = base + e.sort_name;  // a directory's ends in '/'
      if (e.dir) {
        bool prefix_ok = full.starts_with(prefix) || prefix.starts_with(full);
        bool after_ok = after < full || after.starts_with(full);
        if (!prefix_ok || !after_ok) continue;
        RM_RETURN_IF_ERROR(Walk(dir + "/" + e.disk_name, full, prefix, after, limit, out, more));
        if (*more) return Status::Ok();
        continue;
      }
      if (!full.starts_with(prefix) || full <= after) continue;
      struct stat st;
      if (::stat((dir + "/" + e.disk_name).c_str(), &st) != 0) continue;  // deleted meanwhile
      if (out->objects.size() == limit) {
        *more = true;
        return Status::Ok();
      }
      uint64_t size = st.st_size >= static_cast<off_t>(kHeaderBytes) ? st.st_size - kHeaderBytes : 0;
      out->objects.push_back({full, size, "", st.st_mtim.tv_sec * 1000LL + st.st_mtim.tv_nsec / 1000000});
    }
    return Status::Ok();
  }

  std::string root_;
};

}  // namespace

StatusOr<std::unique_ptr<BlobStore>> NewLocalBlobStore(const std::string& root_in) {
  std::string root = root_in;
  while (root.size() > 1 && root.back() == '/') root.pop_back();
  RM_RETURN_IF_ERROR(MakeDirs(root, 0700));
  std::string tmp = root + "/.tmp";
  RM_RETURN_IF_ERROR(MakeDirs(tmp, 0700));
  // Temp files are a crashed writer's: nothing else writes here.
  if (DIR* d = ::opendir(tmp.c_str())) {
    while (dirent* e = ::readdir(d)) {
      if (e->d_name[0] != '.') ::unlink((tmp + "/" + e->d_name).c_str());
    }
    ::closedir(d);
  }
  return std::unique_ptr<BlobStore>(new LocalStore(root));
}

}  // namespace ringmaster::files
