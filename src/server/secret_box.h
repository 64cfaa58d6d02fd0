// SecretBox: secrets the server keeps for users (their registry passwords)
// sealed at rest with AES-256-GCM under a key that lives outside the
// metadata store (a file, 0600, made on first use; --secrets-key): a copy of
// the database alone does not reveal them. Each sealed value is bound to what
// it belongs to (associated data: "registry-login|<user id>|<registry>"), so a
// sealed password moved to another user's row does not open. Thread-safe.
#pragma once

#include <string>
#include <string_view>

#include "common/status.h"

namespace ringmaster::server {

class SecretBox {
 public:
  // The key in `path`: 32 random bytes, written (0600, atomically) when the
  // file is absent. A key file of another size, or readable by others, is refused.
  static StatusOr<SecretBox> Open(const std::string& path);
  // For tests: a box with this 32-byte key.
  static StatusOr<SecretBox> WithKey(std::string key);

  // base64(version byte 1 || 12-byte random nonce || ciphertext || 16-byte tag).
  StatusOr<std::string> Seal(std::string_view plaintext, std::string_view associated) const;
  // PermissionDenied when the value was not sealed by this key for `associated`
  // (another key, another owner, or tampered with).
  StatusOr<std::string> Unseal(std::string_view sealed, std::string_view associated) const;
  // A 32-byte key for another use (`purpose` names it), derived from this
  // one by HMAC-SHA256: independent of it and of every other purpose's.
  std::string DeriveKey(std::string_view purpose) const;

 private:
  explicit SecretBox(std::string key) : key_(std::move(key)) {}
  std::string key_;
};

}  // namespace ringmaster::server
