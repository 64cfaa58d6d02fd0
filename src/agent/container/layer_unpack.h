// LayerUnpacker: one image layer's blob, pushed in as it arrives, decompressed
// (gzip, zstd or none) and read as a tar (ustar, GNU and pax headers) into a
// directory opened by the caller. Every path is walked component by component
// from that directory's fd with O_NOFOLLOW, so nothing is written outside it;
// ".." and device nodes are refused, OCI whiteouts become overlayfs's.
// One thread at a time per unpacker.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "agent/container/layer_store.h"
#include "common/status.h"

namespace ringmaster::agent {

enum class LayerCompression { kNone, kGzip, kZstd };

// The compression a layer media type names: ...tar, ...tar+gzip (Docker's
// ...tar.gzip), ...tar+zstd. An empty type is told by the blob's magic bytes
// (kNone here; the unpacker sniffs).
StatusOr<LayerCompression> CompressionOf(const std::string& media_type);

class LayerUnpacker {
 public:
  // `root_fd`: the layer's (empty) directory, borrowed. `what` starts every
  // error message ("layer sha256:...").
  LayerUnpacker(int root_fd, std::string what, LayerCompression compression, bool sniff, UnpackLimits limits);
  ~LayerUnpacker();
  LayerUnpacker(const LayerUnpacker&) = delete;
  LayerUnpacker& operator=(const LayerUnpacker&) = delete;

  // The next bytes of the blob, as stored. After an error, every call fails.
  Status Write(const char* data, size_t n);
  // The blob ended: the tar must have ended too. Sets directories' mtimes.
  Status Finish();
  // Bytes of regular files written so far.
  uint64_t bytes() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ringmaster::agent
