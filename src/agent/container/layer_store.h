// LayerStore: the layers of registry images on this node, each unpacked once
// into a directory of its own and shared by every image and task that has it
// (runc stacks them as overlayfs lower directories, top first). A layer is
// fetched by its digest, streamed through decompression (gzip, zstd or none)
// and a safe tar reader straight into <dir>/<hex>.unpacking/, verified against
// its digest, then renamed into place: a failure leaves nothing behind. The
// reader never writes outside the layer's directory (no "..", no path through
// a symlink, no absolute hard link target), refuses device nodes, and stops at
// UnpackLimits (a decompression bomb). OCI whiteouts (.wh.NAME, .wh..wh..opq)
// become overlayfs's (a 0:0 character device, the trusted.overlay.opaque
// xattr). The store keeps at most max_bytes of unpacked layers, evicting the
// least recently used that no task holds. One fetch per layer at a time,
// between threads and between agents sharing the directory (flock).
// Thread-safe; needs root (whiteouts, owners).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/status.h"

namespace ringmaster::agent {

struct LayerDescriptor {
  std::string digest;      // "sha256:<hex>" of the blob as the registry serves it
  std::string media_type;  // decides the decompression: ...tar, ...tar+gzip / .tar.gzip, ...tar+zstd
  int64_t size = 0;        // the blob's size
};

struct UnpackLimits {
  uint64_t max_bytes = uint64_t{64} << 30;  // of one layer's files, unpacked
  uint64_t max_entries = 4'000'000;         // tar entries in one layer
  uint64_t max_path_bytes = 4096;
};

// Streams one blob into sink; the store verifies its digest itself too.
using BlobFetcher = std::function<Status(const LayerDescriptor& layer,
                                         const std::function<Status(const char* data, size_t n)>& sink)>;

// Holds layers in use: while it lives, none of them is evicted. Movable.
class LayerLease {
 public:
  LayerLease() = default;
  LayerLease(LayerLease&&) noexcept;
  LayerLease& operator=(LayerLease&&) noexcept;
  ~LayerLease();
  // The unpacked layers, top first (overlayfs lowerdir order).
  const std::vector<std::string>& dirs() const { return dirs_; }

 private:
  friend class LayerStore;
  std::vector<std::string> dirs_;
  std::vector<int> lock_fds_;  // a shared flock on each layer's lock file
};

class LayerStore {
 public:
  LayerStore(std::string dir, uint64_t max_bytes, UnpackLimits limits = {});

  // Every layer of an image (bottom first) present and held: fetched and
  // unpacked if missing. Errors name the layer: DataLoss (digest mismatch),
  // InvalidArgument (a path outside the layer, a device node, a bad tar),
  // ResourceExhausted (past the limits), or the fetcher's. `cancelled` stops it.
  StatusOr<LayerLease> Acquire(const std::vector<LayerDescriptor>& layers, const BlobFetcher& fetch,
                               const std::function<bool()>& cancelled = {});

  // Unpacked bytes held now (each layer's size as unpacked).
  uint64_t bytes() const;

 private:
  // Drops least recently used layers no lease holds until under max_bytes_.
  void Evict();

  const std::string dir_;
  const uint64_t max_bytes_;
  const UnpackLimits limits_;
  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<std::timed_mutex>> fetching_;  // one per digest
};

}  // namespace ringmaster::agent
