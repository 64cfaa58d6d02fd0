#include "agent/container/image_cache.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "agent/executor/safe_fs.h"
#include "common/files.h"
#include "common/log.h"
#include "common/crypto.h"

namespace ringmaster::agent {
namespace fs = std::filesystem;
namespace {

bool IsHex64(const std::string& s) { return s.size() == 64 && s.find_first_not_of("0123456789abcdef") == std::string::npos; }

// Downloads `path` of the agent API to `file` (replaced atomically); its SHA-256.
StatusOr<std::string> DownloadTo(const client::ApiClient* api, const std::string& path, const std::string& file,
                                  const std::function<bool()>& cancelled) {
  const std::string tmp = file + ".part";
  UniqueFd fd(open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!fd) return Internal(fmt::format("{}: {}", tmp, std::strerror(errno)));
  Sha256 sha;
  Status write_status;
  Status st = api->Download(
      path, {}, [](const auto&) {},
      [&](const char* data, size_t n) {
        if (cancelled && cancelled()) {
          write_status = Aborted("stopped");
          return false;
        }
        sha.Update(std::string_view(data, n));
        Status w = WriteAll(fd.get(), data, n, tmp);
        if (!w.ok()) {
          write_status = w;
          return false;
        }
        return true;
      },
      {std::chrono::seconds(60)});
  if (st.ok()) st = write_status;
  if (st.ok() && fsync(fd.get()) != 0) st = Internal(fmt::format("fsync {}: {}", tmp, std::strerror(errno)));
  if (st.ok() && rename(tmp.c_str(), file.c_str()) != 0) st = Internal(fmt::format("rename {}: {}", tmp, std::strerror(errno)));
  if (!st.ok()) {
    unlink(tmp.c_str());
    return st;
  }
  return sha.FinishHex();
}

std::string ImagePath(const std::string& name, const std::string& digest) {
  return fmt::format("/api/v1/agent/images/{}/{}", name, digest);
}

}  // namespace

StatusOr<ImageCache::Entry> ImageCache::Lock(const std::string& name, const std::string& digest) {
  if (!IsHex64(digest)) return InvalidArgument(fmt::format("image {}: \"{}\" is not a sha256 digest", name, digest));
  Entry e;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto& slot = locks_[digest];
    if (!slot) slot = std::make_shared<std::mutex>();
    e.mutex = slot;
  }
  e.thread_lock = std::unique_lock<std::mutex>(*e.mutex);
  // The cache must be root's alone: root unpacks and deletes in it.
  if (auto trusted = OpenTrustedDir(dir_, /*create=*/true, 0700); !trusted.ok()) {
    return trusted.status().Annotate("--image-cache " + dir_);
  }
  e.dir = dir_ + "/" + digest;
  RM_RETURN_IF_ERROR(MakeDirs(e.dir, 0700));
  // Agents of one host may share the cache (--image-cache): one pulls, the others wait.
  e.flock_fd = UniqueFd(open((e.dir + ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!e.flock_fd) return Internal(fmt::format("{}.lock: {}", e.dir, std::strerror(errno)));
  while (flock(e.flock_fd.get(), LOCK_EX) != 0) {
    if (errno != EINTR) return Internal(fmt::format("flock {}.lock: {}", e.dir, std::strerror(errno)));
  }
  return e;
}

StatusOr<TaskLaunch::Image> ImageCache::Ensure(const std::string& name, const std::string& digest, bool unpack,
                                               const std::function<bool()>& cancelled) {
  RM_ASSIGN_OR_RETURN(Entry e, Lock(name, digest));
  const std::string& dir = e.dir;
  // The tar is shared by every name with its digest; the manifest (env, ...)
  // is the name's own: another name pushed with the same rootfs may say otherwise.
  const std::string manifest = dir + "/manifest-" + Sha256Hex(name).substr(0, 32) + ".json";
  const bool unpacked = access((dir + "/rootfs/.ringmaster-unpacked").c_str(), F_OK) == 0;
  if (unpack && !unpacked && access((dir + "/rootfs.tar").c_str(), R_OK) != 0) {
    RM_RETURN_IF_ERROR(FetchTar(name, digest, dir, cancelled));
  }
  if (access(manifest.c_str(), R_OK) != 0) {
    RM_RETURN_IF_ERROR(DownloadTo(api_, ImagePath(name, digest) + ".json", manifest, cancelled).status());
  }
  TaskLaunch::Image image;
  image.name = name;
  image.digest = digest;
  if (unpack) {
    if (!unpacked) RM_RETURN_IF_ERROR(Unpack(dir));
    DropTar(dir);
    image.layers = {dir + "/rootfs"};  // a site image is one layer
  } else {
    image.tar = dir + "/rootfs.tar";  // fetched by EnsureTar when Docker needs it
  }
  RM_ASSIGN_OR_RETURN(std::string text, ReadFile(manifest));
  try {
    const auto m = nlohmann::json::parse(text);
    for (const auto& kv : m.value("env", nlohmann::json::array())) {
      const std::string s = kv.get<std::string>();
      const size_t eq = s.find('=');
      if (eq != std::string::npos && eq > 0) image.env[s.substr(0, eq)] = s.substr(eq + 1);
    }
  } catch (const std::exception& e) {
    return Internal(fmt::format("image {}: unreadable manifest: {}", name, e.what()));
  }
  return image;
}

Status ImageCache::EnsureTar(const std::string& name, const std::string& digest, const std::function<bool()>& cancelled,
                             std::shared_ptr<void>* hold) {
  RM_ASSIGN_OR_RETURN(Entry e, Lock(name, digest));
  if (access((e.dir + "/rootfs.tar").c_str(), R_OK) != 0) RM_RETURN_IF_ERROR(FetchTar(name, digest, e.dir, cancelled));
  auto fd = std::make_shared<UniqueFd>(open((e.dir + "/tar.lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!*fd) return Internal(fmt::format("{}/tar.lock: {}", e.dir, std::strerror(errno)));
  while (flock(fd->get(), LOCK_SH) != 0) {
    if (errno != EINTR) return Internal(fmt::format("flock {}/tar.lock: {}", e.dir, std::strerror(errno)));
  }
  if (hold) *hold = fd;
  return Status::Ok();
}

Status ImageCache::FetchTar(const std::string& name, const std::string& digest, const std::string& dir,
                            const std::function<bool()>& cancelled) {
  spdlog::info("agent: pulling image {}@sha256:{} from the files service", name, digest.substr(0, 12));
  RM_ASSIGN_OR_RETURN(std::string got, DownloadTo(api_, ImagePath(name, digest) + ".tar", dir + "/rootfs.tar.tmp", cancelled));
  if (got != digest) {
    unlink((dir + "/rootfs.tar.tmp").c_str());
    return Unavailable(fmt::format("image {}: arrived with SHA-256 {}, not {}", name, got, digest));
  }
  if (rename((dir + "/rootfs.tar.tmp").c_str(), (dir + "/rootfs.tar").c_str()) != 0) {
    return Internal(fmt::format("rename: {}", std::strerror(errno)));
  }
  return Status::Ok();
}

void ImageCache::DropTar(const std::string& dir) {
  const std::string tar = dir + "/rootfs.tar";
  if (access(tar.c_str(), F_OK) != 0) return;
  UniqueFd fd(open((dir + "/tar.lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!fd || flock(fd.get(), LOCK_EX | LOCK_NB) != 0) return;  // a Docker import holds it: kept for now
  if (unlink(tar.c_str()) == 0) spdlog::info("agent: image {} is unpacked: its tar is deleted", dir);
}

Status ImageCache::Unpack(const std::string& dir) {
  const std::string target = dir + "/rootfs", tmp = dir + "/rootfs.unpacking";
  std::error_code ec;
  fs::remove_all(tmp, ec);
  fs::remove_all(target, ec);
  RM_RETURN_IF_ERROR(MakeDirs(tmp, 0755));
  spdlog::info("agent: unpacking image {} for runc", dir);
  // GNU tar as root keeps owners, modes and device nodes: the image's files
  // as built. The tar is the verified one.
  pid_t pid = fork();
  if (pid == 0) {
    int devnull = open("/dev/null", O_RDWR);
    dup2(devnull, 0);
    dup2(devnull, 1);
    execlp("tar", "tar", "--numeric-owner", "-xpf", (dir + "/rootfs.tar").c_str(), "-C", tmp.c_str(), nullptr);
    _exit(127);
  }
  if (pid < 0) return Internal(fmt::format("fork: {}", std::strerror(errno)));
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    fs::remove_all(tmp, ec);
    return Internal(fmt::format("unpacking {}/rootfs.tar failed (status {})", dir, status));
  }
  RM_RETURN_IF_ERROR(WriteFileAtomic(tmp + "/.ringmaster-unpacked", "", 0644));
  if (rename(tmp.c_str(), target.c_str()) != 0) return Internal(fmt::format("rename: {}", std::strerror(errno)));
  return Status::Ok();
}

}  // namespace ringmaster::agent
