#include "server/user_images.h"

#include <fmt/format.h>

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

}  // namespace ringmaster::server::user_images
