// Streaming SHA-256 and HMAC-SHA256 (OpenSSL), for object checksums and S3
// request signing. One Sha256 per thread at a time.
#pragma once

#include <memory>
#include <string>
#include <string_view>

namespace ringmaster::files {

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

std::string Sha256HexOf(std::string_view data);
// Raw 32-byte MAC.
std::string HmacSha256(std::string_view key, std::string_view data);
std::string HexEncode(std::string_view bytes);
// A lowercase 64-character hex string.
bool IsSha256Hex(std::string_view text);

}  // namespace ringmaster::files
