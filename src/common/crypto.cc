#include "common/crypto.h"

#include <argon2.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <stdexcept>
#include <vector>

namespace ringmaster {
namespace {

std::string ToHex(const unsigned char* data, size_t n) {
  return HexEncode(std::string_view(reinterpret_cast<const char*>(data), n));
}

}  // namespace

struct Sha256::Ctx {
  EVP_MD_CTX* md = EVP_MD_CTX_new();
  ~Ctx() { EVP_MD_CTX_free(md); }
};

Sha256::Sha256() : ctx_(std::make_unique<Ctx>()) { EVP_DigestInit_ex(ctx_->md, EVP_sha256(), nullptr); }
Sha256::~Sha256() = default;

void Sha256::Update(std::string_view data) { EVP_DigestUpdate(ctx_->md, data.data(), data.size()); }

std::string Sha256::FinishHex() {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_DigestFinal_ex(ctx_->md, out, &len);
  return ToHex(out, len);
}

std::string Sha256Hex(std::string_view data) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(data.data(), data.size(), md, &len, EVP_sha256(), nullptr);
  return ToHex(md, len);
}

std::string HmacSha256(std::string_view key, std::string_view data) {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), reinterpret_cast<const unsigned char*>(data.data()),
       data.size(), out, &len);
  return std::string(reinterpret_cast<const char*>(out), len);
}

std::string HexEncode(std::string_view bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) {
    out.push_back(kHex[c >> 4]);
    out.push_back(kHex[c & 15]);
  }
  return out;
}

bool IsSha256Hex(std::string_view text) {
  if (text.size() != 64) return false;
  for (char c : text) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

bool ConstantTimeEquals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

std::string RandomHex(size_t bytes) {
  std::vector<unsigned char> buf(bytes);
  if (RAND_bytes(buf.data(), static_cast<int>(bytes)) != 1) {
    throw std::runtime_error("RAND_bytes failed");  // broken invariant: no entropy
  }
  return ToHex(buf.data(), bytes);
}

std::string NewApiToken() { return "rm_" + RandomHex(32); }

std::string Base64Encode(std::string_view in) {
  std::string out((in.size() + 2) / 3 * 4 + 1, '\0');
  int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                          reinterpret_cast<const unsigned char*>(in.data()), static_cast<int>(in.size()));
  out.resize(static_cast<size_t>(n));
  return out;
}

std::string Base64Decode(const std::string& in) {
  if (in.empty() || in.size() % 4 != 0) return "";
  std::string out(in.size() / 4 * 3, '\0');
  int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                          reinterpret_cast<const unsigned char*>(in.data()), static_cast<int>(in.size()));
  if (n < 0) return "";
  size_t pad = 0;
  if (in.size() >= 1 && in[in.size() - 1] == '=') ++pad;
  if (in.size() >= 2 && in[in.size() - 2] == '=') ++pad;
  out.resize(static_cast<size_t>(n) - pad);
  return out;
}

StatusOr<std::string> HashPassword(const std::string& password) {
  // OWASP's argon2id baseline: m=19 MiB, t=2, p=1.
  const uint32_t t_cost = 2, m_cost = 19 * 1024, parallelism = 1;
  std::vector<unsigned char> salt(16);
  RAND_bytes(salt.data(), static_cast<int>(salt.size()));
  size_t enc_len = argon2_encodedlen(t_cost, m_cost, parallelism, salt.size(), 32, Argon2_id);
  std::string encoded(enc_len, '\0');
  int rc = argon2id_hash_encoded(t_cost, m_cost, parallelism, password.data(), password.size(),
                                 salt.data(), salt.size(), 32, encoded.data(), enc_len);
  if (rc != ARGON2_OK) return Internal(std::string("argon2: ") + argon2_error_message(rc));
  encoded.resize(encoded.find('\0') == std::string::npos ? encoded.size() : encoded.find('\0'));
  return encoded;
}

bool VerifyPassword(const std::string& encoded_hash, const std::string& password) {
  return argon2id_verify(encoded_hash.c_str(), password.data(), password.size()) == ARGON2_OK;
}

}  // namespace ringmaster
