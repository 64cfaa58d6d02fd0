// ImageCache: tasks' images on this node, pulled from the files service by
// digest on first use and kept (`ringmaster images push` put them there as
// images/<name>/<sha256>.tar, the rootfs, and .json, its manifest). A rootfs
// is immutable once its digest is verified, so every task of it shares one
// copy: <dir>/<sha256>/{rootfs.tar | rootfs/}; each name's manifest (its
// env) is kept beside it as manifest-<hash of the name>.json. Docker imports
// the tar (once per dockerd); runc needs rootfs/, unpacked when a runc task
// first needs it, after which the tar is deleted (the node keeps one copy of
// the image, not two) unless a Docker task holds it (Ensure's `tar_hold`, a
// shared flock on <sha256>/tar.lock): a later Docker task fetches it again.
// Concurrent pulls of one image wait for each other, across the agents of a
// host that share the directory too (flock on <sha256>.lock). Thread-safe.
#pragma once

#include <map>
#include <mutex>
#include <string>

#include "agent/executor/executor.h"
#include "client/api_client.h"
#include "common/status.h"

namespace ringmaster::agent {

class ImageCache {
 public:
  ImageCache(const client::ApiClient* api, std::string dir) : api_(api), dir_(std::move(dir)) {}

  // The image `name` at `digest` (sha256 hex) on this node: unpacked (for
  // runc) if `unpack`, else its tar (for Docker), fetched and verified if
  // missing. Without `unpack`, `tar_hold` (when given) keeps the tar from
  // being deleted while the caller holds it. `cancelled` stops a pull.
  StatusOr<TaskLaunch::Image> Ensure(const std::string& name, const std::string& digest, bool unpack,
                                     const std::function<bool()>& cancelled = {},
                                     std::shared_ptr<void>* tar_hold = nullptr);

 private:
  Status FetchTar(const std::string& name, const std::string& digest, const std::string& dir,
                  const std::function<bool()>& cancelled);
  Status Unpack(const std::string& dir);
  // Deletes dir's tar once rootfs/ is unpacked, unless a tar_hold holds it.
  void DropTar(const std::string& dir);

  const client::ApiClient* api_;
  const std::string dir_;
  std::mutex mu_;                        // guards locks_
  std::map<std::string, std::shared_ptr<std::mutex>> locks_;  // one per digest
};

}  // namespace ringmaster::agent
