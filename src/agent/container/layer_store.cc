#include "agent/container/layer_store.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>
#include <tuple>

#include <fmt/format.h>

#include "agent/container/layer_unpack.h"
#include "agent/executor/safe_fs.h"
#include "common/crypto.h"
#include "common/files.h"
#include "common/log.h"

namespace ringmaster::agent {
namespace {

StatusOr<std::string> HexOf(const std::string& digest) {
  const std::string_view prefix = "sha256:";
  if (digest.rfind(prefix, 0) != 0 || !IsSha256Hex(std::string_view(digest).substr(prefix.size()))) {
    return InvalidArgument(fmt::format("layer digest \"{}\" is not sha256:<64 lowercase hex>", digest));
  }
  return digest.substr(prefix.size());
}

// Waits for the lock, asking `cancelled` every 200 ms: a task stopped while
// another agent fetches the same layer (from a slow registry) stops waiting.
Status Flock(int fd, int op, const std::string& what, const std::function<bool()>& cancelled = {}) {
  while (flock(fd, op | LOCK_NB) != 0) {
    if (errno == EINTR) continue;
    if (errno != EWOULDBLOCK) return Internal(fmt::format("flock {}: {}", what, std::strerror(errno)));
    if (cancelled && cancelled()) return Aborted(fmt::format("{}: cancelled while another pull held it", what));
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  return Status::Ok();
}

}  // namespace

LayerLease::LayerLease(LayerLease&& o) noexcept : dirs_(std::move(o.dirs_)), lock_fds_(std::move(o.lock_fds_)) {
  o.lock_fds_.clear();
}

LayerLease& LayerLease::operator=(LayerLease&& o) noexcept {
  if (this != &o) {
    for (int fd : lock_fds_) close(fd);
    dirs_ = std::move(o.dirs_);
    lock_fds_ = std::move(o.lock_fds_);
    o.lock_fds_.clear();
  }
  return *this;
}

LayerLease::~LayerLease() {
  for (int fd : lock_fds_) close(fd);  // closing drops the shared flock
}

LayerStore::LayerStore(std::string dir, uint64_t max_bytes, UnpackLimits limits)
    : dir_(std::move(dir)), max_bytes_(max_bytes), limits_(limits) {}

namespace {

// A layer is present when both its directory and its .size are: the .size is
// written last, after the rename, so a crash in between leaves it absent.
bool Present(const std::string& base) {
  struct stat d {}, s {};
  return lstat(base.c_str(), &d) == 0 && S_ISDIR(d.st_mode) && lstat((base + ".size").c_str(), &s) == 0 &&
         S_ISREG(s.st_mode);
}

// Removes what a crashed fetch or eviction left of layer `hex`; the .size
// goes first, so an interrupted removal leaves the layer absent, not half there.
Status Scrub(int store_fd, const std::string& hex) {
  if (unlinkat(store_fd, (hex + ".size").c_str(), 0) != 0 && errno != ENOENT) {
    return FileError(hex + ".size", errno);
  }
  for (const std::string& name : {hex + ".unpacking", hex}) {
    struct stat st {};
    if (fstatat(store_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) RM_RETURN_IF_ERROR(RemoveTree(store_fd, name));
  }
  return Status::Ok();
}

// Streams the blob through the unpacker into <hex>.unpacking, checks its
// digest and size, and renames it into place. REQUIRES: the exclusive flock.
Status Fetch(int store_fd, const std::string& dir, const std::string& hex, const LayerDescriptor& layer,
             const UnpackLimits& limits, const BlobFetcher& fetch, const std::function<bool()>& cancelled) {
  const std::string what = "layer " + layer.digest;
  RM_ASSIGN_OR_RETURN(LayerCompression compression, CompressionOf(layer.media_type));
  // The disk the cache is on holds other users' inputs and checkpoints too: a
  // layer may use what is free less a reserve, whatever its own limit says.
  UnpackLimits bounded = limits;
  if (struct statvfs fs {}; fstatvfs(store_fd, &fs) == 0) {
    constexpr uint64_t kReserve = uint64_t{1} << 30;
    const uint64_t free_bytes = static_cast<uint64_t>(fs.f_bavail) * fs.f_frsize;
    const uint64_t free_inodes = fs.f_files > 0 ? static_cast<uint64_t>(fs.f_favail) : UINT64_MAX;
    if (free_bytes < kReserve + static_cast<uint64_t>(std::max<int64_t>(layer.size, 0)) || free_inodes < 10'000) {
      return ResourceExhausted(fmt::format("{}: the layer cache's disk has {} bytes and {} inodes free, too few for a "
                                           "layer of {} bytes (1 GiB stays free)", what, free_bytes, free_inodes,
                                           layer.size));
    }
    bounded.max_bytes = std::min(bounded.max_bytes, free_bytes - kReserve);
    if (free_inodes != UINT64_MAX) bounded.max_entries = std::min<uint64_t>(bounded.max_entries, free_inodes / 2);
  }
  const std::string tmp = hex + ".unpacking";
  if (mkdirat(store_fd, tmp.c_str(), 0755) != 0) return FileError(dir + "/" + tmp, errno);
  UniqueFd root(openat(store_fd, tmp.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!root) return FileError(dir + "/" + tmp, errno);
  (void)fchmod(root.get(), 0755);  // not the agent's umask
  LayerUnpacker unpacker(root.get(), what, compression, layer.media_type.empty(), bounded);
  Sha256 sha;
  uint64_t received = 0;
  Status sink_status;
  Status fetched = fetch(layer, [&](const char* data, size_t n) -> Status {
    if (cancelled && cancelled()) sink_status = Aborted(what + ": cancelled");
    received += n;
    if (sink_status.ok() && layer.size > 0 && received > static_cast<uint64_t>(layer.size)) {
      sink_status = DataLoss(fmt::format("{}: the registry sent more than its {} bytes", what, layer.size));
    }
    if (!sink_status.ok()) return sink_status;
    sha.Update(std::string_view(data, n));
    sink_status = unpacker.Write(data, n);
    return sink_status;
  });
  if (!sink_status.ok()) return sink_status;
  if (!fetched.ok()) return fetched.Annotate(what);
  const std::string got = sha.FinishHex();
  if (got != hex) return DataLoss(fmt::format("{}: the blob fetched has SHA-256 {}", what, got));
  if (layer.size > 0 && received != static_cast<uint64_t>(layer.size)) {
    return DataLoss(fmt::format("{}: {} bytes fetched, not {}", what, received, layer.size));
  }
  RM_RETURN_IF_ERROR(unpacker.Finish());
  if (syncfs(root.get()) != 0) return FileError(dir + "/" + tmp, errno);
  if (renameat(store_fd, tmp.c_str(), store_fd, hex.c_str()) != 0) return FileError(dir + "/" + hex, errno);
  RM_RETURN_IF_ERROR(WriteFileAtomic(dir + "/" + hex + ".size", std::to_string(unpacker.bytes()), 0644));
  spdlog::info("agent: {} unpacked ({} bytes from {} fetched)", what, unpacker.bytes(), received);
  return Status::Ok();
}

}  // namespace

StatusOr<LayerLease> LayerStore::Acquire(const std::vector<LayerDescriptor>& layers, const BlobFetcher& fetch,
                                         const std::function<bool()>& cancelled) {
  RM_RETURN_IF_ERROR(MakeDirs(dir_, 0700));
  UniqueFd store(open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!store) return FileError(dir_, errno);
  LayerLease lease;
  bool fetched_any = false;
  for (const LayerDescriptor& layer : layers) {
    RM_ASSIGN_OR_RETURN(std::string hex, HexOf(layer.digest));
    std::shared_ptr<std::timed_mutex> one;
    {
      std::lock_guard<std::mutex> l(mu_);
      auto& slot = fetching_[hex];
      if (!slot) slot = std::make_shared<std::timed_mutex>();
      one = slot;
    }
    // Threads of this agent, one at a time; a stopped task stops waiting.
    std::unique_lock<std::timed_mutex> fetching(*one, std::defer_lock);
    while (!fetching.try_lock_for(std::chrono::milliseconds(200))) {
      if (cancelled && cancelled()) return Aborted(fmt::format("layer {}: cancelled while another pull held it", layer.digest));
    }
    const std::string base = dir_ + "/" + hex, lock_path = base + ".lock";
    // Lock files stay for good: removing one while another agent opens it
    // would let two agents lock different files for one layer.
    UniqueFd lock(open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600));
    if (!lock) return FileError(lock_path, errno);
    for (;;) {
      RM_RETURN_IF_ERROR(Flock(lock.get(), LOCK_SH, lock_path, cancelled));
      if (Present(base)) break;
      // Missing: fetch it under the exclusive lock (other agents wait), then
      // hold it shared. The lock is dropped between the two, so an eviction
      // may slip in: look again.
      RM_RETURN_IF_ERROR(Flock(lock.get(), LOCK_EX, lock_path, cancelled));
      if (!Present(base)) {
        if (cancelled && cancelled()) return Aborted(fmt::format("layer {}: cancelled", layer.digest));
        RM_RETURN_IF_ERROR(Scrub(store.get(), hex));
        Status s = Fetch(store.get(), dir_, hex, layer, limits_, fetch, cancelled);
        if (!s.ok()) {
          Status scrubbed = Scrub(store.get(), hex);
          if (!scrubbed.ok()) spdlog::warn("agent: cleaning up after layer {}: {}", layer.digest, scrubbed.message());
          return s;
        }
        fetched_any = true;
      }
    }
    // Last use, for eviction.
    (void)utimensat(AT_FDCWD, (base + ".size").c_str(), nullptr, 0);
    lease.dirs_.push_back(base);
    lease.lock_fds_.push_back(lock.release());
  }
  std::reverse(lease.dirs_.begin(), lease.dirs_.end());  // top first
  if (fetched_any) Evict();
  return lease;
}

namespace {

struct Cached {
  timespec used;
  std::string hex;
  uint64_t bytes;
};

std::vector<Cached> List(const std::string& dir) {
  std::vector<Cached> out;
  DIR* d = opendir(dir.c_str());
  if (!d) return out;
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name.size() != 64 + 5 || name.compare(64, 5, ".size") != 0 || !IsSha256Hex(name.substr(0, 64))) continue;
    struct stat st {};
    auto text = ReadFile(dir + "/" + name);
    if (stat((dir + "/" + name).c_str(), &st) != 0 || !text.ok()) continue;
    out.push_back({st.st_mtim, name.substr(0, 64), std::strtoull(text->c_str(), nullptr, 10)});
  }
  closedir(d);
  return out;
}

}  // namespace

uint64_t LayerStore::bytes() const {
  uint64_t total = 0;
  for (const Cached& c : List(dir_)) total += c.bytes;
  return total;
}

void LayerStore::Evict() {
  std::vector<Cached> all = List(dir_);
  uint64_t total = 0;
  for (const Cached& c : all) total += c.bytes;
  if (total <= max_bytes_) return;
  std::sort(all.begin(), all.end(), [](const Cached& a, const Cached& b) {
    return std::tie(a.used.tv_sec, a.used.tv_nsec, a.hex) < std::tie(b.used.tv_sec, b.used.tv_nsec, b.hex);
  });
  UniqueFd store(open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!store) return;
  for (const Cached& c : all) {
    if (total <= max_bytes_) break;
    // Held by a lease (here or in another agent), or being fetched: skip it.
    // The layers the caller has just acquired are held, so they stay.
    UniqueFd lock(openat(store.get(), (c.hex + ".lock").c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW));
    if (!lock || flock(lock.get(), LOCK_EX | LOCK_NB) != 0) continue;
    if (!Present(dir_ + "/" + c.hex)) continue;
    Status s = Scrub(store.get(), c.hex);
    if (!s.ok()) {
      spdlog::warn("agent: evicting layer sha256:{}: {}", c.hex, s.message());
      continue;
    }
    total -= std::min(total, c.bytes);
    spdlog::info("agent: evicted layer sha256:{} ({} bytes), least recently used", c.hex, c.bytes);
  }
}

}  // namespace ringmaster::agent
