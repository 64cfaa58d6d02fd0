// Manifest, index and image config parsing; platform choice.
#include "registry/manifest.h"

#include <fmt/format.h>

#include "common/crypto.h"
#include "common/json_limits.h"

namespace ringmaster::registry {
namespace {

using nlohmann::json;

// The JSON documents of a registry are shallow; a deep one is hostile.
constexpr JsonLimits kDocLimits{.max_bytes = 64 << 20, .max_depth = 32};

std::string StringField(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : "";
}

StatusOr<std::vector<std::string>> StringList(const json& j, const char* key, std::string_view what) {
  std::vector<std::string> out;
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return out;
  if (!it->is_array()) return InvalidArgument(fmt::format("{}: '{}' is not a list", what, key));
  for (const auto& v : *it) {
    if (!v.is_string()) return InvalidArgument(fmt::format("{}: '{}' has an item that is not a string", what, key));
    out.push_back(v.get<std::string>());
  }
  return out;
}

StatusOr<Descriptor> ParseDescriptor(const json& j, std::string_view what) {
  if (!j.is_object()) return InvalidArgument(fmt::format("{} is not an object", what));
  Descriptor d;
  d.media_type = StringField(j, "mediaType");
  d.digest = StringField(j, "digest");
  if (!IsSha256Digest(d.digest)) {
    return InvalidArgument(fmt::format("{} has digest '{}', not sha256:<64 hex>", what, Printable(d.digest, 100)));
  }
  auto size = j.find("size");
  if (size == j.end() || !size->is_number_integer() || size->get<int64_t>() < 0) {
    return InvalidArgument(fmt::format("{} has no size", what));
  }
  d.size = size->get<int64_t>();
  return d;
}

// arm64's first variant is v8, which indexes may or may not write.
std::string NormalVariant(const std::string& arch, const std::string& variant) {
  if (arch == "arm64" && variant.empty()) return "v8";
  return variant;
}

}  // namespace

std::string Platform::ToString() const {
  std::string s = os + "/" + architecture;
  if (!variant.empty()) s += "/" + variant;
  return s;
}

bool IsSha256Digest(std::string_view digest) {
  return digest.size() == 71 && digest.substr(0, 7) == "sha256:" && IsSha256Hex(digest.substr(7));
}

StatusOr<ManifestDocument> ParseManifestDocument(std::string_view raw, std::string_view content_type) {
  RM_ASSIGN_OR_RETURN(json doc, ParseJson(raw, kDocLimits, "manifest"));
  if (!doc.is_object()) return InvalidArgument("manifest: not a JSON object");
  std::string media_type = StringField(doc, "mediaType");
  if (media_type.empty()) media_type = std::string(content_type.substr(0, content_type.find(';')));
  auto schema = doc.find("schemaVersion");
  if (schema != doc.end() && schema->is_number_integer() && schema->get<int>() == 1) {
    return FailedPrecondition(
        "the image has a Docker schema 1 manifest, which is deprecated and not supported; push it again "
        "with a current docker or skopeo");
  }
  if (media_type.find("vnd.docker.distribution.manifest.v1") != std::string::npos) {
    return FailedPrecondition("the image has a Docker schema 1 manifest (" + Printable(media_type, 100) +
                              "), which is deprecated and not supported; push it again with a current docker or skopeo");
  }
  // OCI documents may omit mediaType: their shape tells.
  if (media_type != kOciIndex && media_type != kDockerList && media_type != kOciManifest &&
      media_type != kDockerManifest) {
    if (doc.contains("manifests")) {
      media_type = std::string(kOciIndex);
    } else if (doc.contains("layers") && doc.contains("config")) {
      media_type = std::string(kOciManifest);
    } else {
      return InvalidArgument(fmt::format("manifest: unknown media type '{}'", Printable(media_type, 100)));
    }
  }
  ManifestDocument out;
  if (media_type == kOciIndex || media_type == kDockerList) {
    out.is_index = true;
    auto m = doc.find("manifests");
    if (m == doc.end() || !m->is_array()) return InvalidArgument("index: 'manifests' is not a list");
    for (size_t i = 0; i < m->size(); ++i) {
      const std::string what = fmt::format("index: manifests[{}]", i);
      RM_ASSIGN_OR_RETURN(Descriptor d, ParseDescriptor((*m)[i], what));
      IndexEntry e{.descriptor = std::move(d), .platform = {.os = "", .architecture = "", .variant = ""}};
      auto p = (*m)[i].find("platform");
      if (p != (*m)[i].end() && p->is_object()) {
        e.platform.os = StringField(*p, "os");
        e.platform.architecture = StringField(*p, "architecture");
        e.platform.variant = StringField(*p, "variant");
      }
      out.entries.push_back(std::move(e));
    }
    return out;
  }
  out.manifest.media_type = media_type;
  auto config = doc.find("config");
  if (config == doc.end()) return InvalidArgument("manifest: no config");
  RM_ASSIGN_OR_RETURN(out.manifest.config, ParseDescriptor(*config, "manifest: config"));
  auto layers = doc.find("layers");
  if (layers == doc.end() || !layers->is_array()) return InvalidArgument("manifest: 'layers' is not a list");
  for (size_t i = 0; i < layers->size(); ++i) {
    RM_ASSIGN_OR_RETURN(Descriptor d, ParseDescriptor((*layers)[i], fmt::format("manifest: layers[{}]", i)));
    out.manifest.layers.push_back(std::move(d));
  }
  return out;
}

StatusOr<Descriptor> ChoosePlatform(const std::vector<IndexEntry>& entries, const Platform& want) {
  std::vector<std::string> have;
  for (const IndexEntry& e : entries) {
    const Platform& p = e.platform;
    if (p.os.empty() || p.architecture.empty() || p.os == "unknown" || p.architecture == "unknown") continue;
    have.push_back(p.ToString());
    if (p.os != want.os || p.architecture != want.architecture) continue;
    if (!want.variant.empty() &&
        NormalVariant(p.architecture, p.variant) != NormalVariant(want.architecture, want.variant)) {
      continue;
    }
    return e.descriptor;
  }
  return FailedPrecondition(fmt::format("no manifest for {} in the index; it has {}", want.ToString(),
                                        have.empty() ? std::string("no platform") : fmt::format("{}", fmt::join(have, ", "))));
}

StatusOr<ImageConfig> ParseImageConfig(std::string_view text) {
  RM_ASSIGN_OR_RETURN(json doc, ParseJson(text, kDocLimits, "image config"));
  if (!doc.is_object()) return InvalidArgument("image config: not a JSON object");
  ImageConfig c;
  c.os = StringField(doc, "os");
  c.architecture = StringField(doc, "architecture");
  c.variant = StringField(doc, "variant");
  if (c.os.empty() || c.architecture.empty()) return InvalidArgument("image config: no os or architecture");
  auto cfg = doc.find("config");
  if (cfg != doc.end() && !cfg->is_null()) {
    if (!cfg->is_object()) return InvalidArgument("image config: 'config' is not an object");
    RM_ASSIGN_OR_RETURN(c.env, StringList(*cfg, "Env", "image config"));
    RM_ASSIGN_OR_RETURN(c.entrypoint, StringList(*cfg, "Entrypoint", "image config"));
    RM_ASSIGN_OR_RETURN(c.cmd, StringList(*cfg, "Cmd", "image config"));
    c.working_dir = StringField(*cfg, "WorkingDir");
    c.user = StringField(*cfg, "User");
  }
  auto rootfs = doc.find("rootfs");
  if (rootfs == doc.end() || !rootfs->is_object()) return InvalidArgument("image config: no rootfs");
  RM_ASSIGN_OR_RETURN(c.diff_ids, StringList(*rootfs, "diff_ids", "image config: rootfs"));
  for (const std::string& id : c.diff_ids) {
    if (!IsSha256Digest(id)) {
      return InvalidArgument(fmt::format("image config: diff_id '{}' is not sha256:<64 hex>", Printable(id, 100)));
    }
  }
  return c;
}

}  // namespace ringmaster::registry
