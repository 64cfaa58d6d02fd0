// Token and password primitives. API tokens are 256-bit random strings
// stored only as SHA-256 digests (high entropy makes a slow hash useless);
// passwords are stored as argon2id encoded hashes. Thread-safe.
#pragma once

#include <string>

#include "common/status.h"

namespace ringmaster {

std::string RandomHex(size_t bytes);
std::string Sha256Hex(const std::string& data);
// A fresh API token: "rm_" + 64 hex chars.
std::string NewApiToken();
// Standard base64 (RFC 4648); nullopt-like empty result on malformed input.
std::string Base64Decode(const std::string& in);
StatusOr<std::string> HashPassword(const std::string& password);
bool VerifyPassword(const std::string& encoded_hash, const std::string& password);

}  // namespace ringmaster
