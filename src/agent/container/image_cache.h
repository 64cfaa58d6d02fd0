// ImageCache: tasks' images on this node, pulled from the files service by
// digest on first use and kept (`ringmaster images push` put them there as
// images/<name>/<sha256>.tar, the rootfs, and .json, its manifest). A rootfs
// is immutable once its digest is verified, so every task of it shares one
// copy: <dir>/<sha256>/{rootfs.tar, rootfs/}; each name's manifest (its
// env) is kept beside it as manifest-<hash of the name>.json. Docker imports
// the tar, fetched only when its dockerd lacks the image (EnsureTar); runc
// needs rootfs/, unpacked when a runc task first needs it, after which the
// tar is deleted (the node keeps one copy of the image, not two) unless a
// Docker import holds it (EnsureTar's `hold`, a shared flock on
// <sha256>/tar.lock).
// Concurrent pulls of one image wait for each other, across the agents of a
// host that share the directory too (flock on <sha256>.lock). Thread-safe.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "agent/executor/executor.h"
#include "client/api_client.h"
#include "agent/executor/safe_fs.h"
#include "common/status.h"

namespace ringmaster::agent {

class ImageCache {
 public:
  ImageCache(const client::ApiClient* api, std::string dir) : api_(api), dir_(std::move(dir)) {}

  // The image `name` at `digest` (sha256 hex) on this node: its manifest,
  // fetched if missing, and if `unpack` (runc) its rootfs, fetched, verified
  // and unpacked if missing. Without `unpack` (Docker), `tar` names where
  // EnsureTar puts the tar. `cancelled` stops a pull.
  StatusOr<TaskLaunch::Image> Ensure(const std::string& name, const std::string& digest, bool unpack,
                                     const std::function<bool()>& cancelled = {});
  // The image's tar on this node (Docker imports it), fetched and verified
  // if missing; `hold` (when given) keeps it from being deleted while the
  // caller holds it.
  Status EnsureTar(const std::string& name, const std::string& digest, const std::function<bool()>& cancelled,
                   std::shared_ptr<void>* hold);

 private:
  // One digest's entry, locked against this process's threads and other
  // agents sharing the directory; <dir>/<digest>/ exists.
  struct Entry {
    std::shared_ptr<std::mutex> mutex;
    std::unique_lock<std::mutex> thread_lock;
    UniqueFd flock_fd;
    std::string dir;
  };
  StatusOr<Entry> Lock(const std::string& name, const std::string& digest);
  Status FetchTar(const std::string& name, const std::string& digest, const std::string& dir,
                  const std::function<bool()>& cancelled);
  Status Unpack(const std::string& dir);
  // Deletes dir's tar once rootfs/ is unpacked, unless an EnsureTar hold holds it.
  void DropTar(const std::string& dir);

  const client::ApiClient* api_;
  const std::string dir_;
  std::mutex mu_;                        // guards locks_
  std::map<std::string, std::shared_ptr<std::mutex>> locks_;  // one per digest
};

}  // namespace ringmaster::agent
