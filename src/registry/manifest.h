// Internal to the registry client: parsing the documents a registry serves
// (image manifests, indexes / manifest lists) and choosing one platform's
// manifest from an index. Pure functions; thread-safe.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "registry/client.h"

namespace ringmaster::registry {

inline constexpr std::string_view kOciIndex = "application/vnd.oci.image.index.v1+json";
inline constexpr std::string_view kOciManifest = "application/vnd.oci.image.manifest.v1+json";
inline constexpr std::string_view kDockerList = "application/vnd.docker.distribution.manifest.list.v2+json";
inline constexpr std::string_view kDockerManifest = "application/vnd.docker.distribution.manifest.v2+json";

// One entry of an index: a manifest and the platform it is for.
struct IndexEntry {
  Descriptor descriptor;
  Platform platform;
};

struct ManifestDocument {
  bool is_index = false;
  std::vector<IndexEntry> entries;  // an index's
  Manifest manifest;                // a manifest's (digest and raw left to the caller)
};

// Parses `raw` served with Content-Type `content_type` (the document's own
// mediaType wins when it has one). InvalidArgument naming what is wrong;
// FailedPrecondition for a Docker schema 1 manifest.
StatusOr<ManifestDocument> ParseManifestDocument(std::string_view raw, std::string_view content_type);

// The entry of `entries` for `want`: os and architecture equal; the variant
// equal when `want` names one (arm64's "" and "v8" are the same). Entries for
// no real platform (attestations: "unknown/unknown") never match.
// FailedPrecondition listing the platforms there are when none matches.
StatusOr<Descriptor> ChoosePlatform(const std::vector<IndexEntry>& entries, const Platform& want);

// "sha256:<64 lowercase hex>": the only digests we verify, and the only ones
// we put into a URL.
bool IsSha256Digest(std::string_view digest);

}  // namespace ringmaster::registry
