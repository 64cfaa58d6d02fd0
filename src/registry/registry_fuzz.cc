// Fuzz target `registry`: what a registry (or anything posing as one) sends
// the client, on any bytes: a WWW-Authenticate challenge, a manifest or index,
// an image config, an error body. Parsing must never crash or throw; a
// manifest accepted names only sha256 digests (they go into URLs); an error
// worded for a user is one displayable line.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "common/json_limits.h"
#include "registry/client.h"
#include "registry/manifest.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ringmaster::registry;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto challenge = ParseChallenge(text);
  if (challenge.ok() && challenge->scheme.empty()) std::abort();
  auto doc = ParseManifestDocument(text, "");
  if (doc.ok()) {
    for (const IndexEntry& e : doc->entries) {
      if (!IsSha256Digest(e.descriptor.digest)) std::abort();
    }
    if (!doc->is_index && !IsSha256Digest(doc->manifest.config.digest)) std::abort();
    for (const Descriptor& d : doc->manifest.layers) {
      if (!IsSha256Digest(d.digest)) std::abort();
    }
    (void)ChoosePlatform(doc->entries, Platform{});
  }
  (void)ParseImageConfig(text);
  if (!ringmaster::IsDisplayText(DescribeRegistryError("registry.example:5000", 401, text))) std::abort();
  return 0;
}
