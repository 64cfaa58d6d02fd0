#include "server/secret_box.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include <fmt/format.h>

#include "common/crypto.h"
#include "common/files.h"

namespace ringmaster::server {
namespace {

constexpr size_t kKeyBytes = 32, kNonceBytes = 12, kTagBytes = 16;
constexpr char kVersion = 1;

using CipherCtx = std::unique_ptr<EVP_CIPHER_CTX, decltype(&EVP_CIPHER_CTX_free)>;

}  // namespace

StatusOr<SecretBox> SecretBox::Open(const std::string& path) {
  struct stat st {};
  const int fd = open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  struct Closer {
    int fd;
    ~Closer() {
      if (fd >= 0) close(fd);
    }
  } closer{fd};
  if (fd < 0 || fstat(fd, &st) != 0) {
    if (errno == ELOOP) return FailedPrecondition(fmt::format("secrets key {} is a symlink; name the file itself", path));
    if (errno != ENOENT) return Internal(fmt::format("secrets key {}: {}", path, std::strerror(errno)));
    std::string key(kKeyBytes, '\0');
    if (RAND_bytes(reinterpret_cast<unsigned char*>(key.data()), kKeyBytes) != 1) {
      return Internal("secrets key: no randomness");
    }
    RM_RETURN_IF_ERROR(WriteFileAtomic(path, key, 0600).Annotate("secrets key"));
    return SecretBox(std::move(key));
  }
  if (!S_ISREG(st.st_mode) || st.st_uid != geteuid()) {
    return FailedPrecondition(fmt::format("secrets key {} is not a regular file of the server's user", path));
  }
  if ((st.st_mode & 077) != 0) {
    return FailedPrecondition(fmt::format("secrets key {} may be read by others (mode {:o}): chmod 600 it", path,
                                          st.st_mode & 0777));
  }
  std::string key(kKeyBytes + 1, '\0');
  const ssize_t n = pread(fd, key.data(), key.size(), 0);
  if (n < 0) return Internal(fmt::format("secrets key {}: {}", path, std::strerror(errno)));
  key.resize(static_cast<size_t>(n));
  if (key.size() != kKeyBytes) {
    return FailedPrecondition(fmt::format("secrets key {} holds {} bytes, not {}", path, key.size(), kKeyBytes));
  }
  return SecretBox(std::move(key));
}

std::string SecretBox::DeriveKey(std::string_view purpose) const {
  return HmacSha256(key_, "ringmaster derived key|" + std::string(purpose));
}

StatusOr<SecretBox> SecretBox::WithKey(std::string key) {
  if (key.size() != kKeyBytes) return InvalidArgument("a secrets key is 32 bytes");
  return SecretBox(std::move(key));
}

StatusOr<std::string> SecretBox::Seal(std::string_view plaintext, std::string_view associated) const {
  std::string out(1 + kNonceBytes + plaintext.size() + kTagBytes, '\0');
  out[0] = kVersion;
  auto* nonce = reinterpret_cast<unsigned char*>(out.data() + 1);
  if (RAND_bytes(nonce, kNonceBytes) != 1) return Internal("seal: no randomness");
  CipherCtx ctx(EVP_CIPHER_CTX_new(), EVP_CIPHER_CTX_free);
  int n = 0;
  auto* cipher = reinterpret_cast<unsigned char*>(out.data() + 1 + kNonceBytes);
  if (!ctx || EVP_EncryptInit_ex(ctx.get(), EVP_aes_256_gcm(), nullptr, nullptr, nullptr) != 1 ||
      EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_SET_IVLEN, kNonceBytes, nullptr) != 1 ||
      EVP_EncryptInit_ex(ctx.get(), nullptr, nullptr, reinterpret_cast<const unsigned char*>(key_.data()), nonce) != 1 ||
      EVP_EncryptUpdate(ctx.get(), nullptr, &n, reinterpret_cast<const unsigned char*>(associated.data()),
                        static_cast<int>(associated.size())) != 1 ||
      EVP_EncryptUpdate(ctx.get(), cipher, &n, reinterpret_cast<const unsigned char*>(plaintext.data()),
                        static_cast<int>(plaintext.size())) != 1 ||
      EVP_EncryptFinal_ex(ctx.get(), cipher + n, &n) != 1 ||
      EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_GET_TAG, kTagBytes, cipher + plaintext.size()) != 1) {
    return Internal("seal: AES-256-GCM failed");
  }
  return Base64Encode(out);
}

StatusOr<std::string> SecretBox::Unseal(std::string_view sealed, std::string_view associated) const {
  const std::string raw = Base64Decode(std::string(sealed));
  if (raw.size() < 1 + kNonceBytes + kTagBytes || raw[0] != kVersion) {
    return PermissionDenied("a sealed secret is damaged");
  }
  const size_t len = raw.size() - 1 - kNonceBytes - kTagBytes;
  const auto* nonce = reinterpret_cast<const unsigned char*>(raw.data() + 1);
  const auto* cipher = nonce + kNonceBytes;
  std::string plain(len, '\0');
  CipherCtx ctx(EVP_CIPHER_CTX_new(), EVP_CIPHER_CTX_free);
  int n = 0;
  auto* out = reinterpret_cast<unsigned char*>(plain.data());
  std::string tag(raw.substr(raw.size() - kTagBytes));
  if (!ctx || EVP_DecryptInit_ex(ctx.get(), EVP_aes_256_gcm(), nullptr, nullptr, nullptr) != 1 ||
      EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_SET_IVLEN, kNonceBytes, nullptr) != 1 ||
      EVP_DecryptInit_ex(ctx.get(), nullptr, nullptr, reinterpret_cast<const unsigned char*>(key_.data()), nonce) != 1 ||
      EVP_DecryptUpdate(ctx.get(), nullptr, &n, reinterpret_cast<const unsigned char*>(associated.data()),
                        static_cast<int>(associated.size())) != 1 ||
      EVP_DecryptUpdate(ctx.get(), out, &n, cipher, static_cast<int>(len)) != 1 ||
      EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_SET_TAG, kTagBytes, tag.data()) != 1 ||
      EVP_DecryptFinal_ex(ctx.get(), out + n, &n) != 1) {
    return PermissionDenied("a sealed secret does not open with this server's key (another key, or not its owner's)");
  }
  return plain;
}

}  // namespace ringmaster::server
