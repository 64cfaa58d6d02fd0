#include "comm/auth.h"

#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "common/crypto.h"

namespace ringmaster::comm {
namespace {

std::string_view Label(ProofRole role) {
  switch (role) {
    case ProofRole::kStoreClient: return std::string_view("ringcomm-store-client\0", 22);
    case ProofRole::kStoreServer: return std::string_view("ringcomm-store-server\0", 22);
    case ProofRole::kHelloDialer: return std::string_view("ringcomm-hello-dialer\0", 22);
    case ProofRole::kHelloAcceptor: return std::string_view("ringcomm-hello-acceptor\0", 24);
  }
  return "";
}

}  // namespace

std::string NewNonce() { return RandomHex(kNonceBytes / 2); }

std::string MakeProof(std::string_view secret, ProofRole role, std::string_view transcript) {
  std::string data(Label(role));
  data.append(transcript);
  return HmacSha256(secret, data);
}

bool CheckProof(std::string_view secret, ProofRole role, std::string_view transcript, std::string_view proof) {
  return ConstantTimeEquals(MakeProof(secret, role, transcript), proof);
}

std::string JobSecretFromEnvironment() {
  const char* v = std::getenv("RINGMASTER_JOB_SECRET");
  if (v && *v) return v;
  static std::once_flag warned;
  std::call_once(warned, [] {
    std::fputs("ringcomm: RINGMASTER_JOB_SECRET is not set: the store and the ranks' connections are open to "
               "any process that reaches them\n", stderr);
  });
  return "";
}

}  // namespace ringmaster::comm
