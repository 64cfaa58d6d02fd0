// Hashes, MACs and secrets (OpenSSL, argon2). API tokens are 256-bit random
// strings stored only as SHA-256 digests (high entropy makes a slow hash
// useless); passwords are argon2id encoded hashes. Functions are thread-safe;
// one Sha256 is used by one thread at a time.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "common/status.h"

namespace ringmaster {

// Streaming SHA-256, for files too large to hold.
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;

  void Update(std::string_view data);
  // Lowercase hex of everything passed to Update(); the hasher is spent.
  std::string FinishHex();

 private:
  struct Ctx;
  std::unique_ptr<Ctx> ctx_;
};

// Lowercase hex SHA-256 of `data`.
std::string Sha256Hex(std::string_view data);
// Raw 32-byte HMAC-SHA256.
std::string HmacSha256(std::string_view key, std::string_view data);
// Equal contents, compared in time that depends only on the sizes: for MACs
// and proofs a caller sent, so timing reveals nothing of the right one.
bool ConstantTimeEquals(std::string_view a, std::string_view b);
// Lowercase hex of raw bytes.
std::string HexEncode(std::string_view bytes);
// A lowercase 64-character hex string.
bool IsSha256Hex(std::string_view text);

std::string RandomHex(size_t bytes);
// A fresh API token: "rm_" + 64 hex chars.
std::string NewApiToken();
// Standard base64 (RFC 4648), with padding.
std::string Base64Encode(std::string_view in);
// Standard base64 (RFC 4648); nullopt-like empty result on malformed input.
std::string Base64Decode(const std::string& in);
StatusOr<std::string> HashPassword(const std::string& password);
bool VerifyPassword(const std::string& encoded_hash, const std::string& password);

}  // namespace ringmaster
