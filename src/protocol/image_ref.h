// Image references, `[registry/]path[:tag][@sha256:<hex>]`, read the way
// Docker reads them: the one parser behind a job's `image:`, the image routes
// and `ringmaster images push`, and the agent's requests to dockerd. Errors
// name the part that is wrong. Pure functions; thread-safe.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "common/status.h"

namespace ringmaster::protocol {

struct ImageRef {
  std::string registry;    // "registry.example.com:5000", "localhost"; "" = none written
  std::string repository;  // '/'-separated path: "torch", "ringmaster/torch"
  std::string tag;         // as written; "" = none (Tag() says latest)
  std::string digest;      // the sha256 in lower-case hex; "" = not pinned

  std::string Tag() const { return tag.empty() ? "latest" : tag; }
  std::string Name() const;      // registry/repository
  std::string ToString() const;  // the reference again, with only what was written
  bool operator==(const ImageRef&) const = default;
};

constexpr size_t kMaxImageNameBytes = 255;  // Docker's limit on registry/repository
constexpr size_t kMaxImageTagBytes = 128;
constexpr size_t kMaxJobImageNameBytes = 63;

// A reference as Docker reads it. The first path component is a registry host
// when it holds a '.' or a ':' or is "localhost" and more follows it. A path
// component is lower-case letters, digits, '.', '_' and '-', starting with a
// letter or digit (dockerd refuses the finer cases itself: "a..b", "a-");
// a tag is letters, digits, '_', '.' and '-', not starting with '.' or '-'.
// InvalidArgument naming the part that is wrong (`path component "A" has an
// upper-case letter`); the caller names the reference and what it was for.
StatusOr<ImageRef> ParseImageRef(std::string_view text);

// An image of the files service (images/<name>/<hex>.tar), as a job spec names
// it: `torch` or `torch@sha256:<64 hex>`. No registry, no '/', no tag, a name
// of at most 63 bytes.
StatusOr<ImageRef> ParseJobImageRef(std::string_view text);

// Whether a job's reference names one of the site's images: no registry, no
// '/', no tag. Such a bare name is never Docker Hub's (no pull from the
// Internet by accident): `docker.io/library/NAME` or `NAME:TAG` names that.
bool MayNameSiteImage(const ImageRef& ref);

}  // namespace ringmaster::protocol
