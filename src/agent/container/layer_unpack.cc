#include "agent/container/layer_unpack.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>
#include <map>
#include <vector>

#include <fmt/format.h>

#include "agent/executor/safe_fs.h"
#include "common/files.h"

namespace ringmaster::agent {
namespace {

constexpr size_t kBlock = 512;
constexpr uint64_t kMaxMetaBytes = 1 << 20;  // one pax header or GNU long name
using Sink = std::function<Status(const char* data, size_t n)>;

// ---- Decompression ----------------------------------------------------------

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual Status Feed(const char* data, size_t n, const Sink& out) = 0;
};

class PlainDecoder final : public Decoder {
 public:
  Status Feed(const char* data, size_t n, const Sink& out) override { return out(data, n); }
};

class GzipDecoder final : public Decoder {
 public:
  explicit GzipDecoder(std::string what) : what_(std::move(what)) {
    ok_ = inflateInit2(&z_, 16 + MAX_WBITS) == Z_OK;
  }
  ~GzipDecoder() override {
    if (ok_) inflateEnd(&z_);
  }
  Status Feed(const char* data, size_t n, const Sink& out) override {
    if (!ok_) return Internal(what_ + ": zlib did not start");
    z_.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data));
    z_.avail_in = static_cast<uInt>(n);
    char buf[64 * 1024];
    while (z_.avail_in > 0) {
      z_.next_out = reinterpret_cast<Bytef*>(buf);
      z_.avail_out = sizeof(buf);
      const int rc = inflate(&z_, Z_NO_FLUSH);
      const size_t got = sizeof(buf) - z_.avail_out;
      if (rc != Z_OK && rc != Z_STREAM_END && !(rc == Z_BUF_ERROR && got > 0)) {
        return InvalidArgument(fmt::format("{}: not a valid gzip stream ({})", what_, z_.msg ? z_.msg : "error"));
      }
      if (got > 0) RM_RETURN_IF_ERROR(out(buf, got));
      if (rc == Z_STREAM_END && z_.avail_in > 0) inflateReset(&z_);  // a further gzip member
    }
    // Output may still be pending inside zlib with no input left.
    for (;;) {
      z_.next_out = reinterpret_cast<Bytef*>(buf);
      z_.avail_out = sizeof(buf);
      const int rc = inflate(&z_, Z_NO_FLUSH);
      const size_t got = sizeof(buf) - z_.avail_out;
      if (got > 0) RM_RETURN_IF_ERROR(out(buf, got));
      if (got == 0 || rc != Z_OK) break;
    }
    return Status::Ok();
  }

 private:
  const std::string what_;
  z_stream z_{};
  bool ok_ = false;
};

class ZstdDecoder final : public Decoder {
 public:
  explicit ZstdDecoder(std::string what) : what_(std::move(what)), d_(ZSTD_createDStream()) {
    if (d_) ZSTD_initDStream(d_);
  }
  ~ZstdDecoder() override { ZSTD_freeDStream(d_); }
  Status Feed(const char* data, size_t n, const Sink& out) override {
    if (!d_) return Internal(what_ + ": zstd did not start");
    ZSTD_inBuffer in{data, n, 0};
    char buf[64 * 1024];
    for (;;) {
      ZSTD_outBuffer o{buf, sizeof(buf), 0};
      const size_t rc = ZSTD_decompressStream(d_, &o, &in);
      if (ZSTD_isError(rc)) {
        return InvalidArgument(fmt::format("{}: not a valid zstd stream ({})", what_, ZSTD_getErrorName(rc)));
      }
      if (o.pos > 0) RM_RETURN_IF_ERROR(out(buf, o.pos));
      if (in.pos == in.size && o.pos < o.size) break;
    }
    return Status::Ok();
  }

 private:
  const std::string what_;
  ZSTD_DStream* d_;
};

// ---- Tar fields -------------------------------------------------------------

std::string Field(const char* h, size_t off, size_t len) {
  const char* p = h + off;
  return std::string(p, strnlen(p, len));
}

// Octal, or GNU base-256 (high bit set) for values octal cannot hold.
bool Number(const char* h, size_t off, size_t len, int64_t* v) {
  const auto* p = reinterpret_cast<const unsigned char*>(h + off);
  if (p[0] & 0x80) {
    if (p[0] == 0xff) return false;  // negative
    uint64_t x = p[0] & 0x7f;
    for (size_t i = 1; i < len; ++i) {
      if (x >> 55) return false;
      x = (x << 8) | p[i];
    }
    *v = static_cast<int64_t>(x);
    return true;
  }
  size_t i = 0;
  while (i < len && (p[i] == ' ' || p[i] == 0)) ++i;
  uint64_t x = 0;
  for (; i < len && p[i] >= '0' && p[i] <= '7'; ++i) {
    if (x >> 60) return false;
    x = x * 8 + (p[i] - '0');
  }
  for (; i < len; ++i) {
    if (p[i] != ' ' && p[i] != 0) return false;
  }
  *v = static_cast<int64_t>(x);
  return true;
}

bool ChecksumOk(const char* h) {
  int64_t want = 0;
  if (!Number(h, 148, 8, &want)) return false;
  int64_t unsigned_sum = 0, signed_sum = 0;
  for (size_t i = 0; i < kBlock; ++i) {
    const bool in_field = i >= 148 && i < 156;
    unsigned_sum += in_field ? ' ' : static_cast<unsigned char>(h[i]);
    signed_sum += in_field ? ' ' : static_cast<signed char>(h[i]);
  }
  return want == unsigned_sum || want == signed_sum;
}

bool ParseDecimal(const std::string& s, int64_t* v) {
  if (s.empty() || s.size() > 18) return false;
  int64_t x = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    x = x * 10 + (c - '0');
  }
  *v = x;
  return true;
}

// ---- Entries ----------------------------------------------------------------

struct Entry {
  char type = '0';
  std::string path, link;
  int64_t mode = 0644, uid = 0, gid = 0, size = 0;
  timespec mtime{0, 0};
  std::map<std::string, std::string> xattrs;
};

// What pax ('x') and GNU long-name ('L', 'K') headers said about the next entry.
struct Pending {
  std::map<std::string, std::string> pax;
  std::string long_name, long_link;
  bool has_long_name = false, has_long_link = false;
};

}  // namespace

StatusOr<LayerCompression> CompressionOf(const std::string& media_type) {
  auto ends = [&](std::string_view s) {
    return media_type.size() >= s.size() && media_type.compare(media_type.size() - s.size(), s.size(), s) == 0;
  };
  if (media_type.empty() || ends(".tar") || ends("tar")) return LayerCompression::kNone;
  if (ends("+gzip") || ends(".gzip") || ends(".gz")) return LayerCompression::kGzip;
  if (ends("+zstd") || ends(".zstd")) return LayerCompression::kZstd;
  return InvalidArgument(fmt::format("layer media type {} is not a tar, tar+gzip or tar+zstd", media_type));
}

class LayerUnpacker::Impl {
 public:
  Impl(int root_fd, std::string what, LayerCompression compression, bool sniff, UnpackLimits limits)
      : root_(root_fd), what_(std::move(what)), compression_(compression), sniff_(sniff), limits_(limits) {}

  Status Write(const char* data, size_t n) {
    if (!failed_.ok()) return failed_;
    failed_ = WriteInner(data, n);
    return failed_;
  }

  Status Finish() {
    if (!failed_.ok()) return failed_;
    if (sniff_ && !decoder_) RM_RETURN_IF_ERROR(Write(nullptr, 0));
    if (!ended_) {
      failed_ = InvalidArgument(
          fmt::format("{}: the tar is truncated (it ends inside {})", what_,
                      remain_ > 0 || pad_ > 0 || !header_.empty() ? "an entry" : "the archive, before its end blocks"));
      return failed_;
    }
    for (const auto& [comps, ts] : dir_times_) {
      auto parent = Walk(comps, comps.size() - 1, false);
      if (!parent.ok()) continue;
      UniqueFd fd(openat(parent->get(), comps.back().c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      const timespec times[2] = {ts, ts};
      if (fd) (void)futimens(fd.get(), times);
    }
    return Status::Ok();
  }

  uint64_t bytes() const { return bytes_; }

 private:
  Status WriteInner(const char* data, size_t n) {
    if (ended_) return Status::Ok();  // what follows the end blocks is only hashed
    if (!decoder_) {
      if (sniff_) {
        sniffed_.append(data, n);
        if (sniffed_.size() < 4 && n > 0) return Status::Ok();
        const auto* m = reinterpret_cast<const unsigned char*>(sniffed_.data());
        if (sniffed_.size() >= 2 && m[0] == 0x1f && m[1] == 0x8b) compression_ = LayerCompression::kGzip;
        if (sniffed_.size() >= 4 && m[0] == 0x28 && m[1] == 0xb5 && m[2] == 0x2f && m[3] == 0xfd) {
          compression_ = LayerCompression::kZstd;
        }
      }
      switch (compression_) {
        case LayerCompression::kNone: decoder_ = std::make_unique<PlainDecoder>(); break;
        case LayerCompression::kGzip: decoder_ = std::make_unique<GzipDecoder>(what_); break;
        case LayerCompression::kZstd: decoder_ = std::make_unique<ZstdDecoder>(what_); break;
      }
      if (sniff_) {
        std::string first = std::move(sniffed_);
        return decoder_->Feed(first.data(), first.size(), [this](const char* d, size_t k) { return Tar(d, k); });
      }
    }
    return decoder_->Feed(data, n, [this](const char* d, size_t k) { return Tar(d, k); });
  }

  // The decompressed stream, a block-structured state machine.
  Status Tar(const char* p, size_t n) {
    while (n > 0 && !ended_) {
      size_t take;
      if (remain_ > 0) {
        take = static_cast<size_t>(std::min<uint64_t>(remain_, n));
        RM_RETURN_IF_ERROR(Data(p, take));
        remain_ -= take;
        if (remain_ == 0) RM_RETURN_IF_ERROR(EndOfData());
      } else if (pad_ > 0) {
        take = std::min(pad_, n);
        pad_ -= take;
      } else {
        take = std::min(kBlock - header_.size(), n);
        header_.append(p, take);
        if (header_.size() == kBlock) {
          RM_RETURN_IF_ERROR(Header(header_.data()));
          header_.clear();
        }
      }
      p += take;
      n -= take;
    }
    return Status::Ok();
  }

  Status Header(const char* h) {
    if (std::all_of(h, h + kBlock, [](char c) { return c == 0; })) {
      if (++zero_blocks_ >= 2) ended_ = true;
      return Status::Ok();
    }
    zero_blocks_ = 0;
    if (!ChecksumOk(h)) {
      return InvalidArgument(fmt::format("{}: not a tar, or a corrupt one (bad header checksum after {} entries)",
                                         what_, entries_));
    }
    if (++entries_ > limits_.max_entries) {
      return ResourceExhausted(fmt::format("{}: more than {} tar entries", what_, limits_.max_entries));
    }
    Entry e;
    e.type = h[156] == 0 ? '0' : h[156];
    bool ok = Number(h, 124, 12, &e.size) && Number(h, 100, 8, &e.mode) && Number(h, 108, 8, &e.uid) &&
              Number(h, 116, 8, &e.gid);
    int64_t mtime = 0;
    ok = ok && Number(h, 136, 12, &mtime);
    if (!ok) return InvalidArgument(fmt::format("{}: a tar header with a malformed number", what_));
    e.mtime.tv_sec = mtime;
    e.path = Field(h, 0, 100);
    if (std::memcmp(h + 257, "ustar\0", 6) == 0) {  // POSIX ustar: a prefix field (GNU's has none)
      const std::string prefix = Field(h, 345, 155);
      if (!prefix.empty()) e.path = prefix + "/" + e.path;
    }
    e.link = Field(h, 157, 100);
    if (e.type == 'x' || e.type == 'g' || e.type == 'L' || e.type == 'K') {
      if (static_cast<uint64_t>(e.size) > kMaxMetaBytes) {
        return ResourceExhausted(fmt::format("{}: a tar '{}' header of {} bytes", what_, e.type, e.size));
      }
      meta_type_ = e.type;
      meta_.clear();
      return StartData(e.size);
    }
    meta_type_ = 0;
    RM_RETURN_IF_ERROR(ApplyPending(&e));
    return Begin(std::move(e));
  }

  Status ApplyPending(Entry* e) {
    Pending p = std::move(pending_);
    pending_ = {};
    if (p.has_long_name) e->path = p.long_name;
    if (p.has_long_link) e->link = p.long_link;
    for (const auto& [k, v] : p.pax) {
      int64_t x = 0;
      if (k == "path") {
        e->path = v;
      } else if (k == "linkpath") {
        e->link = v;
      } else if (k == "size" || k == "uid" || k == "gid") {
        if (!ParseDecimal(v, &x)) return InvalidArgument(fmt::format("{}: pax {}={} is not a number", what_, k, v));
        (k == "size" ? e->size : k == "uid" ? e->uid : e->gid) = x;
      } else if (k == "mtime") {
        const size_t dot = v.find('.');
        if (!ParseDecimal(v.substr(0, dot), &x)) return InvalidArgument(fmt::format("{}: pax mtime={}", what_, v));
        e->mtime.tv_sec = x;
        e->mtime.tv_nsec = 0;
        if (dot != std::string::npos) {
          std::string frac = v.substr(dot + 1, 9);
          frac.resize(9, '0');
          if (ParseDecimal(frac, &x)) e->mtime.tv_nsec = x;
        }
      } else if (k.rfind("SCHILY.xattr.", 0) == 0) {
        e->xattrs[k.substr(13)] = v;
      }
    }
    return Status::Ok();
  }

  Status StartData(int64_t size) {
    if (size < 0) return InvalidArgument(fmt::format("{}: a tar entry of negative size", what_));
    const auto usize = static_cast<uint64_t>(size);
    if (bytes_ + usize > limits_.max_bytes) {
      return ResourceExhausted(fmt::format("{}: unpacks to more than {} bytes (a decompression bomb?)", what_,
                                           limits_.max_bytes));
    }
    bytes_ += usize;
    remain_ = usize;
    pad_ = (kBlock - usize % kBlock) % kBlock;
    return remain_ == 0 ? EndOfData() : Status::Ok();
  }

  Status Data(const char* p, size_t n) {
    if (meta_type_ != 0) {
      meta_.append(p, n);
      return Status::Ok();
    }
    if (!file_) return Status::Ok();  // data of an entry that has none on disk
    return WriteAll(file_.get(), p, n, fmt::format("{}: writing {}", what_, current_.path));
  }

  Status EndOfData() {
    if (meta_type_ == 'x') return ParsePax(meta_, &pending_.pax);
    if (meta_type_ == 'g') {
      std::map<std::string, std::string> global;  // read for validity; nothing in it applies per file here
      return ParsePax(meta_, &global);
    }
    if (meta_type_ == 'L' || meta_type_ == 'K') {
      std::string s(meta_.c_str());  // NUL-terminated in the block
      (meta_type_ == 'L' ? pending_.long_name : pending_.long_link) = s;
      (meta_type_ == 'L' ? pending_.has_long_name : pending_.has_long_link) = true;
      return Status::Ok();
    }
    if (!file_) return Status::Ok();
    UniqueFd fd = std::move(file_);
    return Finalize(fd.get(), current_);
  }

  Status ParsePax(const std::string& text, std::map<std::string, std::string>* out) {
    size_t pos = 0;
    while (pos < text.size()) {
      const size_t sp = text.find(' ', pos);
      int64_t len = 0;
      if (sp == std::string::npos || !ParseDecimal(text.substr(pos, sp - pos), &len) ||
          len < static_cast<int64_t>(sp - pos + 3) || pos + len > text.size() || text[pos + len - 1] != '\n') {
        return InvalidArgument(fmt::format("{}: a malformed pax header", what_));
      }
      const std::string rec = text.substr(sp + 1, pos + len - 1 - (sp + 1));
      const size_t eq = rec.find('=');
      if (eq == std::string::npos) return InvalidArgument(fmt::format("{}: a malformed pax record", what_));
      (*out)[rec.substr(0, eq)] = rec.substr(eq + 1);
      pos += len;
    }
    return Status::Ok();
  }

  // ---- The filesystem side --------------------------------------------------

  StatusOr<std::vector<std::string>> Components(const std::string& path) {
    if (path.size() > limits_.max_path_bytes) {
      return InvalidArgument(fmt::format("{}: a path of {} bytes (at most {})", what_, path.size(), limits_.max_path_bytes));
    }
    // Pax values are length-delimited: a NUL would cut "..\0x" to ".." in a system call.
    if (path.find('\0') != std::string::npos) {
      return InvalidArgument(fmt::format("{}: a path with a NUL byte", what_));
    }
    std::vector<std::string> out;
    size_t start = 0;
    while (start <= path.size()) {
      size_t slash = path.find('/', start);
      if (slash == std::string::npos) slash = path.size();
      std::string c = path.substr(start, slash - start);
      start = slash + 1;
      if (c.empty() || c == ".") continue;  // "/etc/x" is "etc/x", as Docker reads it
      if (c == "..") return InvalidArgument(fmt::format("{}: path {} has a \"..\" component", what_, path));
      out.push_back(std::move(c));
    }
    return out;
  }

  static std::string Join(const std::vector<std::string>& comps, size_t n) {
    std::string s;
    for (size_t i = 0; i < n; ++i) s += (i ? "/" : "") + comps[i];
    return s;
  }

  // The directory holding comps[n] (comps[0..n) walked from the root, never
  // through a symlink); missing ones made when `create`.
  StatusOr<UniqueFd> Walk(const std::vector<std::string>& comps, size_t n, bool create) {
    UniqueFd cur(fcntl(root_, F_DUPFD_CLOEXEC, 0));
    if (!cur) return Internal(fmt::format("{}: dup: {}", what_, std::strerror(errno)));
    for (size_t i = 0; i < n; ++i) {
      const char* c = comps[i].c_str();
      UniqueFd next(openat(cur.get(), c, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      if (!next && errno == ENOENT && create) {
        if (mkdirat(cur.get(), c, 0755) != 0 && errno != EEXIST) {
          return Internal(fmt::format("{}: mkdir {}: {}", what_, Join(comps, i + 1), std::strerror(errno)));
        }
        next = UniqueFd(openat(cur.get(), c, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
        // A parent the layer does not list is 0755, as Docker makes it,
        // whatever the agent's umask (077) took away.
        if (next) (void)fchmod(next.get(), 0755);
      }
      if (!next) {
        const int err = errno;
        struct stat st {};
        if (fstatat(cur.get(), c, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode)) {
          return InvalidArgument(fmt::format("{}: path {} goes through the symlink {}", what_, Join(comps, comps.size()),
                                             Join(comps, i + 1)));
        }
        if (err == ENOENT) return NotFound(Join(comps, i + 1));
        return InvalidArgument(fmt::format("{}: path {} goes through {}, which is not a directory", what_,
                                           Join(comps, comps.size()), Join(comps, i + 1)));
      }
      cur = std::move(next);
    }
    return cur;
  }

  // Clears `name` in `dir` for a new entry; false when it is a directory that
  // a directory entry keeps (tar updates it in place).
  StatusOr<bool> Clear(int dir, const std::string& name, bool keep_dir) {
    struct stat st {};
    if (fstatat(dir, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) return true;
    if (S_ISDIR(st.st_mode)) {
      if (keep_dir) return false;
      RM_RETURN_IF_ERROR(RemoveTree(dir, name));
      return true;
    }
    if (unlinkat(dir, name.c_str(), 0) != 0) {
      return Internal(fmt::format("{}: replacing {}: {}", what_, name, std::strerror(errno)));
    }
    return true;
  }

  Status Begin(Entry e) {
    RM_ASSIGN_OR_RETURN(std::vector<std::string> comps, Components(e.path));
    // Only regular files carry data; the others are header-only whatever
    // their size field says (as Go's archive/tar, which writes most layers, reads them).
    const int64_t size = e.type == '0' || e.type == '7' ? e.size : 0;
    if (comps.empty()) return StartData(size);  // the layer's root itself: its own dir's attributes stay
    const std::string name = comps.back();
    auto parent_or = Walk(comps, comps.size() - 1, true);
    if (!parent_or.ok()) return parent_or.status();
    const int parent = parent_or->get();
    const std::string shown = Join(comps, comps.size());
    // OCI whiteouts, as overlayfs spells them.
    if (name == ".wh..wh..opq") {
      if (fsetxattr(parent, "trusted.overlay.opaque", "y", 1, 0) != 0) {
        return Internal(fmt::format("{}: marking {} opaque: {}", what_, Join(comps, comps.size() - 1), std::strerror(errno)));
      }
      return StartData(size);
    }
    if (name.rfind(".wh.", 0) == 0) {
      if (name.rfind(".wh..wh.", 0) == 0) return StartData(size);  // aufs bookkeeping
      const std::string hidden = name.substr(4);
      if (hidden.empty() || hidden == "." || hidden == "..") {
        return InvalidArgument(fmt::format("{}: {} whites out no name", what_, shown));
      }
      RM_RETURN_IF_ERROR(Clear(parent, hidden, false).status());
      if (mknodat(parent, hidden.c_str(), S_IFCHR, makedev(0, 0)) != 0) {
        return Internal(fmt::format("{}: whiteout {}: {}", what_, shown, std::strerror(errno)));
      }
      return StartData(size);
    }
    switch (e.type) {
      case '0':
      case '7': {
        RM_RETURN_IF_ERROR(Clear(parent, name, false).status());
        file_ = UniqueFd(openat(parent, name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
        if (!file_) return Internal(fmt::format("{}: creating {}: {}", what_, shown, std::strerror(errno)));
        current_ = std::move(e);
        current_.path = shown;
        return StartData(size);
      }
      case '5': {
        RM_ASSIGN_OR_RETURN(bool fresh, Clear(parent, name, true));
        if (fresh && mkdirat(parent, name.c_str(), 0700) != 0) {
          return Internal(fmt::format("{}: mkdir {}: {}", what_, shown, std::strerror(errno)));
        }
        UniqueFd d(openat(parent, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
        if (!d) return Internal(fmt::format("{}: opening {}: {}", what_, shown, std::strerror(errno)));
        RM_RETURN_IF_ERROR(Finalize(d.get(), e, /*times=*/false));
        dir_times_.emplace_back(std::move(comps), e.mtime);
        return StartData(size);
      }
      case '2': {
        // Kept as written, absolute ones too: they resolve inside the
        // container. The unpacker itself never follows one (O_NOFOLLOW).
        RM_RETURN_IF_ERROR(Clear(parent, name, false).status());
        if (symlinkat(e.link.c_str(), parent, name.c_str()) != 0) {
          return Internal(fmt::format("{}: symlink {}: {}", what_, shown, std::strerror(errno)));
        }
        RM_RETURN_IF_ERROR(Attributes(parent, name, e, /*chmod=*/false));
        return StartData(size);
      }
      case '1': {
        auto target = Components(e.link);
        if (!target.ok()) return target.status();
        if (target->empty()) return InvalidArgument(fmt::format("{}: hard link {} to the layer's root", what_, shown));
        auto tparent = Walk(*target, target->size() - 1, false);
        struct stat st {};
        if (!tparent.ok() || fstatat(tparent->get(), target->back().c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 ||
            S_ISDIR(st.st_mode)) {
          if (!tparent.ok() && tparent.status().code() != StatusCode::kNotFound) return tparent.status();
          return InvalidArgument(fmt::format("{}: hard link {} to {}, which is not a file in the layer", what_, shown, e.link));
        }
        if (target->size() == comps.size() && Join(*target, target->size()) == shown) return StartData(size);
        RM_RETURN_IF_ERROR(Clear(parent, name, false).status());
        if (linkat(tparent->get(), target->back().c_str(), parent, name.c_str(), 0) != 0) {
          return Internal(fmt::format("{}: hard link {}: {}", what_, shown, std::strerror(errno)));
        }
        return StartData(size);
      }
      case '3':
      case '4':
        return InvalidArgument(fmt::format("{}: {} is a device node", what_, shown));
      case '6': {
        RM_RETURN_IF_ERROR(Clear(parent, name, false).status());
        if (mknodat(parent, name.c_str(), S_IFIFO | 0600, 0) != 0) {
          return Internal(fmt::format("{}: fifo {}: {}", what_, shown, std::strerror(errno)));
        }
        RM_RETURN_IF_ERROR(Attributes(parent, name, e, /*chmod=*/true));
        return StartData(size);
      }
      default:
        return InvalidArgument(fmt::format("{}: {} is a tar entry of type '{}', which layers do not use", what_, shown,
                                           e.type));
    }
  }

  // Owner, then mode (a chown clears setuid), xattrs and mtime of an open file or dir.
  Status Finalize(int fd, const Entry& e, bool times = true) {
    if (fchown(fd, static_cast<uid_t>(e.uid), static_cast<gid_t>(e.gid)) != 0 ||
        fchmod(fd, static_cast<mode_t>(e.mode & 07777)) != 0) {
      return Internal(fmt::format("{}: owner or mode of {}: {}", what_, e.path, std::strerror(errno)));
    }
    for (const auto& [k, v] : e.xattrs) {
      // Only what a file may carry in any image: never overlayfs's own
      // (trusted.overlay.*), which would let a layer redirect the mount.
      if (k.rfind("user.", 0) == 0 || k == "security.capability") (void)fsetxattr(fd, k.c_str(), v.data(), v.size(), 0);
    }
    const timespec ts[2] = {e.mtime, e.mtime};
    if (times && futimens(fd, ts) != 0) {
      return Internal(fmt::format("{}: mtime of {}: {}", what_, e.path, std::strerror(errno)));
    }
    return Status::Ok();
  }

  // The same for a symlink or fifo, by name (a symlink is never followed).
  Status Attributes(int parent, const std::string& name, const Entry& e, bool chmod) {
    if (fchownat(parent, name.c_str(), static_cast<uid_t>(e.uid), static_cast<gid_t>(e.gid), AT_SYMLINK_NOFOLLOW) != 0 ||
        (chmod && fchmodat(parent, name.c_str(), static_cast<mode_t>(e.mode & 07777), 0) != 0)) {
      return Internal(fmt::format("{}: owner or mode of {}: {}", what_, e.path, std::strerror(errno)));
    }
    const timespec ts[2] = {e.mtime, e.mtime};
    (void)utimensat(parent, name.c_str(), ts, AT_SYMLINK_NOFOLLOW);
    return Status::Ok();
  }

  const int root_;
  const std::string what_;
  LayerCompression compression_;
  const bool sniff_;
  const UnpackLimits limits_;
  Status failed_;
  std::string sniffed_;
  std::unique_ptr<Decoder> decoder_;
  std::string header_;  // a header block as it fills
  uint64_t remain_ = 0;  // data bytes of the current entry still to come
  size_t pad_ = 0;       // then padding to the next block
  int zero_blocks_ = 0;
  bool ended_ = false;
  uint64_t entries_ = 0, bytes_ = 0;
  char meta_type_ = 0;  // 'x', 'g', 'L', 'K' while reading such a header's data
  std::string meta_;
  Pending pending_;
  UniqueFd file_;  // the regular file being written
  Entry current_;
  std::vector<std::pair<std::vector<std::string>, timespec>> dir_times_;  // set last: children change them
};

LayerUnpacker::LayerUnpacker(int root_fd, std::string what, LayerCompression compression, bool sniff,
                             UnpackLimits limits)
    : impl_(std::make_unique<Impl>(root_fd, std::move(what), compression, sniff, limits)) {}
LayerUnpacker::~LayerUnpacker() = default;
Status LayerUnpacker::Write(const char* data, size_t n) { return impl_->Write(data, n); }
Status LayerUnpacker::Finish() { return impl_->Finish(); }
uint64_t LayerUnpacker::bytes() const { return impl_->bytes(); }

}  // namespace ringmaster::agent
