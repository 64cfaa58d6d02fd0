#include "server/user_images.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/crypto.h"

namespace ringmaster::server::user_images {

std::string BlobKey(const std::string& user, const std::string& hex) {
  return fmt::format("users/{}/images/blobs/sha256/{}", user, hex);
}

std::string TagKey(const std::string& user, const std::string& name, const std::string& tag) {
  return fmt::format("users/{}/images/{}/tags/{}", user, name, tag);
}

Status ValidateName(const std::string& name) {
  if (name.empty() || name.size() > 128 || name[0] == '.' || name == "blobs" ||
      name.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789._-") != std::string::npos) {
    return InvalidArgument("name: one component of [a-z0-9._-], not starting with '.' (and not \"blobs\")");
  }
  return Status::Ok();
}

Status ValidateReference(const std::string& reference) {
  if (reference.rfind("sha256:", 0) == 0) {
    if (IsSha256Hex(reference.substr(7))) return Status::Ok();
    return InvalidArgument("reference: sha256: must be followed by 64 lowercase hex digits");
  }
  if (reference.empty() || reference.size() > 128 || reference[0] == '.' || reference[0] == '-' ||
      reference.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-") !=
          std::string::npos) {
    return InvalidArgument("reference: a tag of [A-Za-z0-9_.-] (1 to 128) or sha256:<hex>");
  }
  return Status::Ok();
}

StatusOr<std::string> ReadSmall(files::BlobStore& files, const std::string& key, size_t max) {
  RM_ASSIGN_OR_RETURN(auto reader, files.Open(key, {}));
  std::string out;
  char buf[64 << 10];
  while (true) {
    RM_ASSIGN_OR_RETURN(size_t n, reader->Read(buf, sizeof buf));
    if (n == 0) break;
    out.append(buf, n);
    if (out.size() > max) return ResourceExhausted(fmt::format("{}: larger than {} bytes", key, max));
  }
  return out;
}

StatusOr<std::string> Resolve(files::BlobStore& files, const std::string& user, const std::string& name,
                              const std::string& reference) {
  RM_RETURN_IF_ERROR(ValidateName(name));
  RM_RETURN_IF_ERROR(ValidateReference(reference));
  std::string digest = reference;
  if (reference.rfind("sha256:", 0) != 0) {
    auto tag = ReadSmall(files, TagKey(user, name, reference), 256);
    if (!tag.ok()) {
      if (tag.status().code() == StatusCode::kNotFound) return NotFound(fmt::format("{}/{}:{}: no such tag", user, name, reference));
      return tag.status();
    }
    digest = *tag;
    while (!digest.empty() && (digest.back() == '\n' || digest.back() == ' ')) digest.pop_back();
    if (digest.rfind("sha256:", 0) != 0 || !IsSha256Hex(digest.substr(7))) {
      return Internal(fmt::format("{}: does not hold a sha256 digest", TagKey(user, name, reference)));
    }
  }
  auto head = files.Head(BlobKey(user, digest.substr(7)));
  if (!head.ok()) {
    if (head.status().code() == StatusCode::kNotFound) return NotFound(fmt::format("{}/{}@{}: no such manifest", user, name, digest));
    return head.status();
  }
  return digest;
}


Status CheckWhole(files::BlobStore& files, const std::string& user, const std::string& digest) {
  RM_ASSIGN_OR_RETURN(std::string raw, ReadSmall(files, BlobKey(user, digest.substr(7)), kMaxManifestBytes));
  if ("sha256:" + Sha256Hex(raw) != digest) {
    return InvalidArgument(fmt::format("{}/...@{}: the stored manifest does not hash to its digest", user, digest));
  }
  const auto m = nlohmann::json::parse(raw, nullptr, false);
  std::vector<std::string> blobs;
  if (m.is_object() && m.contains("config") && m["config"].is_object() && m["config"].contains("digest") &&
      m["config"]["digest"].is_string()) {
    blobs.push_back(m["config"]["digest"].get<std::string>());
  }
  if (!m.is_object() || blobs.empty() || !m.contains("layers") || !m["layers"].is_array()) {
    return InvalidArgument(fmt::format("{}: not an image manifest (an index is not served here)", digest));
  }
  if (m["layers"].size() > kMaxLayers) {
    return InvalidArgument(fmt::format("{}: {} layers, more than {}", digest, m["layers"].size(), kMaxLayers));
  }
  for (const auto& l : m["layers"]) {
    if (!l.is_object() || !l.contains("digest") || !l["digest"].is_string()) {
      return InvalidArgument(fmt::format("{}: a layer without a digest", digest));
    }
    blobs.push_back(l["digest"].get<std::string>());
  }
  for (const std::string& b : blobs) {
    if (b.rfind("sha256:", 0) != 0 || !IsSha256Hex(b.substr(7))) {
      return InvalidArgument(fmt::format("{}: \"{}\" is not a sha256 digest", digest, b.substr(0, 80)));
    }
    auto head = files.Head(BlobKey(user, b.substr(7)));
    if (!head.ok()) {
      if (head.status().code() == StatusCode::kNotFound) {
        return NotFound(fmt::format("{}: it names blob {}, which is not among {}'s images", digest, b, user));
      }
      return head.status();
    }
  }
  return Status::Ok();
}

}  // namespace ringmaster::server::user_images
