// An image saved to a file, as `ringmaster images push --from FILE.tar` takes
// it: a `docker save` tar (manifest.json, the config, layer tars) or an OCI
// layout tar (oci-layout, index.json, blobs/sha256/...), unpacked with tar(1)
// into a directory and checked: every blob's SHA-256 matches its name, no
// path leaves the directory. A docker save tar gets an OCI image manifest
// built for it. Not thread-safe (one push at a time).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace ringmaster::cli {

struct ImageTar {
  std::string name, tag;  // from the tar (RepoTags, org.opencontainers.image.ref.name); "" when it names none
  struct Blob {
    std::string path;  // the unpacked file
    std::string hex;   // its sha256
    uint64_t size = 0;
  };
  std::vector<Blob> blobs;  // the config, then the layers
  std::string manifest;     // the manifest's bytes, as pushed
  std::string manifest_hex;
};

// Unpacks `tar_path` into `dir` (which exists and is empty) and reads it.
// InvalidArgument with one line saying what is wrong: not a tar, no manifest,
// a blob whose digest does not match, a path with "..", an image index.
StatusOr<ImageTar> ReadImageTar(const std::string& tar_path, const std::string& dir);

// The OCI manifest built for a docker save tar's config and layers (each
// layer's media type given: tar, tar+gzip or tar+zstd, by its first bytes).
std::string DockerSaveManifest(const ImageTar::Blob& config, const std::vector<ImageTar::Blob>& layers,
                               const std::vector<std::string>& layer_media_types);
// "lab/base:v1" -> {"base", "v1"}; "base" -> {"base", "latest"}.
std::pair<std::string, std::string> NameAndTag(const std::string& repo_tag);

}  // namespace ringmaster::cli
