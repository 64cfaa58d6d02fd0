// Users' own images in the files service (`ringmaster images push --from
// FILE.tar`): blobs under users/<u>/images/blobs/sha256/<hex>, shared by the
// user's images, and tags as users/<u>/images/<name>/tags/<tag> holding
// "sha256:<hex>" (the manifest's digest). Both the read-only registry
// (api_registry_v2.cc) and the pinning at submit read them here. Thread-safe.
#pragma once

#include <string>

#include "common/status.h"
#include "files/blob_store.h"

namespace ringmaster::server::user_images {

inline constexpr size_t kMaxManifestBytes = 4 << 20;

std::string BlobKey(const std::string& user, const std::string& hex);
std::string TagKey(const std::string& user, const std::string& name, const std::string& tag);

// InvalidArgument unless `name` is one repository component ([a-z0-9._-],
// not starting with '.') and `reference` a tag ([A-Za-z0-9_.-], 1-128) or
// "sha256:<64 hex>".
Status ValidateName(const std::string& name);
Status ValidateReference(const std::string& reference);

// The manifest digest ("sha256:<hex>") users/<user>/images/<name> serves for
// `reference` (a tag or a digest): NotFound when there is no such tag, or
// no such manifest among the user's blobs.
StatusOr<std::string> Resolve(files::BlobStore& files, const std::string& user, const std::string& name,
                              const std::string& reference);

// A whole small file of the store (a manifest, a tag): ResourceExhausted past `max`.
StatusOr<std::string> ReadSmall(files::BlobStore& files, const std::string& key, size_t max);

inline constexpr size_t kMaxLayers = 256;
// The manifest `digest` of `user`'s images is whole: its bytes hash to the
// digest, and its config and every layer (at most kMaxLayers) are blobs of
// the same user. A user can store a blob only under its own SHA-256, so this
// is proof that they hold every byte of the image: a manifest that names
// another user's layers (to be given them from a node's cache) is refused.
Status CheckWhole(files::BlobStore& files, const std::string& user, const std::string& digest);

}  // namespace ringmaster::server::user_images
