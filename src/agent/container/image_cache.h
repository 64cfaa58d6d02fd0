// ImageCache: tasks' images on this node, pulled from the files service by
// digest on first use and kept (`ringmaster images push` put them there as
// images/<name>/<sha256>.tar, the rootfs, and .json, its manifest). A rootfs
// is immutable once its digest is verified, so every task of it shares one
// copy: <dir>/<sha256>/{rootfs.tar, rootfs/}; each name's manifest (its env)
// is kept beside it as manifest-<hash of the name>.json. The tar is kept
// for Docker (imported once); rootfs/ is unpacked for runc only when a runc
// task first needs it. Concurrent pulls of one image wait for each other.
// Thread-safe.
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

  // The image `name` at `digest` (sha256 hex) on this node: fetched (and
  // verified) if missing, unpacked if `unpack`. `cancelled` stops a pull.
  StatusOr<TaskLaunch::Image> Ensure(const std::string& name, const std::string& digest, bool unpack,
                                     const std::function<bool()>& cancelled = {});

 private:
  Status FetchTar(const std::string& name, const std::string& digest, const std::string& dir,
                  const std::function<bool()>& cancelled);
  Status Unpack(const std::string& dir);

  const client::ApiClient* api_;
  const std::string dir_;
  std::mutex mu_;                        // guards locks_
  std::map<std::string, std::shared_ptr<std::mutex>> locks_;  // one per digest
};

}  // namespace ringmaster::agent
